"""Ask the LiteRT interpreter which ops its default XNNPACK delegate really took.

After ``allocate_tensors`` the interpreter's node list holds the original nodes followed by
one ``DELEGATE`` node per partition; the execution plan runs the delegate nodes instead of
the ops they replaced. The Python API does not expose the plan, but it leaves two traces:

* a delegated op's output is either an output of a ``DELEGATE`` node (the partition's
  boundary), or an intermediate the arena never allocated (reading it raises "Tensor data
  is null");
* an op left on the CPU has every output allocated.

Reading both gives the exact per-op answer, for the main subgraph.

    >>> sorted(xnnpack_delegated_ops(Path("m.tflite").read_bytes()))  # doctest: +SKIP
    [0, 1, 2, 4, 5, 6, 7]
"""

from __future__ import annotations

import numpy as np


def _interpreter(model: bytes, num_threads: int = 1):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model, num_threads=num_threads)
    interpreter.allocate_tensors()
    return interpreter


def _run_once(interpreter) -> None:
    """Invoke on zeros so dynamic tensors of CPU ops get allocated too (best effort)."""
    try:
        for detail in interpreter.get_input_details():
            zeros = np.zeros(detail["shape"], dtype=detail["dtype"])
            interpreter.set_tensor(detail["index"], zeros)
        interpreter.invoke()
    except (ValueError, RuntimeError):
        pass


def _allocated(interpreter, tensor: int) -> bool:
    try:
        interpreter.get_tensor(tensor)
    except ValueError:
        return False
    return True


def xnnpack_delegated_ops(model: bytes, num_threads: int = 1) -> set[int]:
    """Indices (main subgraph) of the ops the interpreter handed to XNNPACK."""
    interpreter = _interpreter(model, num_threads)
    _run_once(interpreter)
    details = interpreter._get_ops_details()  # noqa: SLF001 - only per-node view there is
    delegate_outputs = {t for d in details if d["op_name"] == "DELEGATE" for t in d["outputs"]}
    delegated = set()
    for d in details:
        if d["op_name"] == "DELEGATE":
            continue
        outputs = [t for t in d["outputs"] if t >= 0]
        if outputs and all(t in delegate_outputs or not _allocated(interpreter, t)
                           for t in outputs):
            delegated.add(d["index"])
    return delegated
