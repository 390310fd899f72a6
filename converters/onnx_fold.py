"""ONNX control flow the fixed input shapes decide, folded before an `.onnx` is quantized.

Exporters guard a graph with `If` nodes whose condition depends only on tensor shapes
(silero-vad's "is the batch 1", "is the state empty"): with the input shapes fixed, each
condition is a constant. onnxruntime's quantizer leaves an `If` and its branches in float,
and its QDQ rewrite of the tensors the branches read from the outer graph broke them
(silero-vad 16k: a recurrent state at 0.4 dB; a graph the ONNX checker calls unsorted).
onnxslim, given the shapes, folds such an `If` into the branch it takes. The folded graph
is used only when it has fewer `If` nodes and gives the source's outputs on the data.
"""

from __future__ import annotations

import io
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeopt.converters.onnx_to_tf import fixed_shapes, graph_nodes, static_onnx
from edgeopt.converters.parity import check_parity
from edgeopt.errors import EdgeoptError
from edgeopt.model import ModelHandle
from edgeopt.runtime import OnnxRunner

CHECK_SAMPLES = 8


@dataclass(frozen=True)
class Folded:
    content: bytes
    note: str


def count_if(source: Path | bytes) -> int:
    """`If` nodes in the graph and in every body."""
    import onnx

    model = (onnx.load_from_string(source) if isinstance(source, bytes)
             else onnx.load(str(source), load_external_data=False))
    return sum(node.op_type == "If" for node in graph_nodes(model.graph))


def _sample(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The first samples (samples come first; a scalar input is one value for all)."""
    return {k: v[:CHECK_SAMPLES] if np.ndim(v) else v for k, v in arrays.items()}


def fold_control_flow(handle: ModelHandle, arrays: dict[str, np.ndarray]) -> Folded | None:
    """The folded model's bytes and what was done, or None (nothing to fold, no fold
    possible, or the folded graph does not give the source's outputs)."""
    before = count_if(handle.path)
    if not before:
        return None
    try:
        shapes = fixed_shapes(handle)
    except EdgeoptError:  # dynamic dims beyond the batch: nothing is decided by them
        return None
    with tempfile.TemporaryDirectory(prefix="edgeopt-fold-") as tmp:
        static = static_onnx(handle, Path(tmp), shapes, io.StringIO())
        if static is None or count_if(static) >= before:
            return None
        content = static.read_bytes()
    sample = _sample(arrays)
    try:
        parity = check_parity(OnnxRunner(handle.path).run(sample),
                              OnnxRunner(content).run(sample), "folding If nodes")
    except (EdgeoptError, ValueError):  # outputs that differ, or do not line up
        return None
    if parity.cosine < 0.9999:
        return None
    return Folded(content, f"{before - count_if(content)} of {before} If node(s) folded: "
                           f"their conditions are fixed by the input shapes "
                           f"({', '.join(shapes)}); the folded graph gives the source's "
                           f"outputs on {len(next(iter(sample.values())))} samples "
                           f"(cosine {parity.cosine:.6f})")

