"""Concatenations of tensors whose ranges differ by orders of magnitude: they stay float.

One int8 tensor has one scale. A detector that concatenates box coordinates (0..320) with
class scores (0..1) into one output gives the scores 255 / 320 of a step: every score
rounds to 0 and the model detects nothing, while the pooled output SQNR, dominated by the
boxes, still looks good. A CONCATENATION whose inputs' calibrated magnitudes differ by more
than `MAX_RATIO` is kept float, and so are the layout-only ops it feeds (transpose,
reshape...), which would otherwise quantize the joined tensor again.

    >>> mixed_scale_concats(graph, {"boxes": (0, 316.0), "scores": (0, 0.68)})  # doctest: +SKIP
    {'output0': 'CONCATENATION of inputs whose ranges differ 465x ...'}
"""

from __future__ import annotations

from edgeopt.calibration.graphspec import CalibGraph

MAX_RATIO = 16.0  # the smaller input keeps 255 / 16 = 16 levels or more
CONCAT_OPS = frozenset({"CONCATENATION", "Concat"})  # LiteRT, ONNX
LAYOUT_OPS = frozenset({"RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS", "STRIDED_SLICE",
                        "SLICE", "GATHER", "PACK", "UNPACK", "SPLIT", "SPLIT_V",
                        "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice", "Gather",
                        "Split", "Flatten"})


def _magnitude(lo: float, hi: float) -> float:
    return max(abs(lo), abs(hi))


def mixed_scale_concats(graph: CalibGraph, ranges: dict[str, tuple[float, float]],
                        bits: int = 8) -> dict[str, str]:
    """Ops (by output tensor) to keep float, with the reason the manifest lists; int16
    activations (`bits` 16) have 256x the levels, so a 256x wider ratio."""
    found: dict[str, str] = {}
    max_ratio = MAX_RATIO * 2 ** (bits - 8)
    for op in graph.ops:
        if op.op not in CONCAT_OPS:
            continue
        sizes = {name: _magnitude(*ranges[name]) for name in op.inputs if name in ranges}
        if len(sizes) < 2 or min(sizes.values()) <= 0:
            continue
        big, small = max(sizes, key=sizes.get), min(sizes, key=sizes.get)
        ratio = sizes[big] / sizes[small]
        if ratio > max_ratio:
            found[op.outputs[0]] = (
                f"{op.op} of inputs whose ranges differ {ratio:.0f}x ('{big}' up to "
                f"{sizes[big]:.3g}, '{small}' up to {sizes[small]:.3g}): one int{bits} scale would "
                f"leave '{small}' {(2 ** bits - 1) / ratio:.1f} steps; kept float")
    return {**found, **_downstream_layout(graph, found)}


def _downstream_layout(graph: CalibGraph, start: dict[str, str]) -> dict[str, str]:
    """Layout-only ops fed by a float tensor of `start` (and by each other)."""
    marked, found = set(start), {}
    for op in graph.ops:  # ops are in execution order
        if op.op in LAYOUT_OPS and op.inputs and op.inputs[0] in marked:
            marked.update(op.outputs)
            for out in op.outputs:
                found[out] = f"{op.op} of a concatenation kept float (mixed scales); kept float"
    return found
