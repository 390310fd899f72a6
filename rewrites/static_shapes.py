"""Dynamic dimensions fixed to the sizes the model runs at: every main-graph tensor whose
signature keeps a −1 gets the shape LiteRT gives it at the model's own (fixed) input size.
Delegates that need static shapes (the Edge TPU compiler, NNAPI, Vela) then take ops the
converter left "dynamic" although the input is not."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.rewrites.edit import Edit

# Ops whose output size depends on the data: their shapes cannot be fixed from one run.
DATA_DEPENDENT = frozenset({"WHERE", "UNIQUE", "NON_MAX_SUPPRESSION_V4",
                            "NON_MAX_SUPPRESSION_V5", "RESHAPE_DYNAMIC", "WHILE", "IF"})


def rewrite_model(model: Any, content: bytes) -> int:
    """Tensors fixed (0: nothing to fix, or the input itself is dynamic)."""
    graph = model.subgraphs[0]
    edit = Edit(model, graph)
    dynamic = [i for i, t in enumerate(graph.tensors)
               if t.shapeSignature is not None and any(int(d) < 0 for d in t.shapeSignature)]
    if not dynamic or any(i in dynamic for i in graph.inputs):
        return 0
    if any(edit.op_name(op) in DATA_DEPENDENT for op in graph.operators or []):
        return 0
    shapes = _run_shapes(content)
    if shapes is None:
        return 0
    fixed = 0
    for index in dynamic:
        shape = shapes.get(index)
        if shape is None or any(d <= 0 for d in shape):
            continue
        tensor = graph.tensors[index]
        tensor.shape, tensor.shapeSignature = list(shape), None
        fixed += 1
    return fixed


def _run_shapes(content: bytes) -> dict[int, list[int]] | None:
    """Each main-graph tensor's shape after one run on zeros (None: the model does not run)."""
    from ai_edge_litert.interpreter import Interpreter

    try:
        interpreter = Interpreter(model_content=content)
        interpreter.allocate_tensors()
        for detail in interpreter.get_input_details():
            interpreter.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
        interpreter.invoke()
    except (ValueError, RuntimeError):
        return None
    return {d["index"]: [int(x) for x in d["shape"]] for d in interpreter.get_tensor_details()}
