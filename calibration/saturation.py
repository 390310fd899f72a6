"""Saturation-aware ranges: a tensor read only by ops that flatten outside an interval
needs no quantization levels outside it.

A sigmoid's input beyond +-8 changes its output by less than half an int8 output step;
a ReLU ignores negative inputs; a hard-swish ignores inputs below -3. When every
consumer of a tensor saturates outside [a, b], the tensor's range is cut to [a, b]
whatever the estimator said: the model computes the same, with finer steps inside.
(A PP-OCR detector's last logits span [-151, 96]; the sigmoid after them only needs
[-8, 8].)

    >>> bounds = saturation_bounds(graph)                      # doctest: +SKIP
    >>> clamp((-151.0, 96.0), bounds["logits"])                 # doctest: +SKIP
    (-8.0, 8.0)
"""

from __future__ import annotations

import math

from edgeopt.calibration.graphspec import CalibGraph, OpInfo

INF = math.inf
# op -> input interval outside of which the op's output does not change (int8 output)
SATURATING = {
    "LOGISTIC": (-8.0, 8.0), "Sigmoid": (-8.0, 8.0),
    "TANH": (-4.5, 4.5), "Tanh": (-4.5, 4.5),
    "RELU": (0.0, INF), "Relu": (0.0, INF),
    "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0), "RELU_0_TO_1": (0.0, 1.0),
    "HARD_SWISH": (-3.0, INF), "HardSwish": (-3.0, INF),
}


def op_interval(op: OpInfo) -> tuple[float, float] | None:
    """The saturation interval of `op`'s first input, or None if it never saturates."""
    if op.op == "HardSigmoid":
        alpha, beta = op.attributes.get("alpha", 0.2), op.attributes.get("beta", 0.5)
        return (-beta / alpha, (1 - beta) / alpha) if alpha > 0 else None
    if op.op == "Clip":
        low, high = op.attributes.get("min"), op.attributes.get("max")
        return (-INF if low is None else low, INF if high is None else high)
    return SATURATING.get(op.op)


def saturation_bounds(graph: CalibGraph) -> dict[str, tuple[float, float]]:
    """Tensor -> interval, for tensors whose every reader saturates outside it."""
    readers: dict[str, list[OpInfo]] = {}
    for op in graph.ops:
        for position, name in enumerate(op.inputs):
            readers.setdefault(name, []).append(op if position == 0 else None)
    bounds = {}
    for name, ops in readers.items():
        if name in graph.outputs or any(op is None for op in ops):
            continue
        intervals = [op_interval(op) for op in ops]
        if all(intervals):
            bounds[name] = (min(i[0] for i in intervals), max(i[1] for i in intervals))
    return bounds


def clamp(rng: tuple[float, float], interval: tuple[float, float] | None) -> tuple[float, float]:
    """`rng` cut to `interval`; unchanged when they do not overlap."""
    if interval is None:
        return rng
    lo, hi = max(rng[0], interval[0]), min(rng[1], interval[1])
    return (lo, hi) if lo < hi else rng


# A max never picks a padding cell over a real value, so a pad constant that stands for
# minus infinity (onnx2tf pads a ceil_mode MaxPool with float32's lowest value) needs no
# quantization level: the padded tensor takes its input's range and the constant rounds to
# the lowest code. Left in, it made the range [-3.4e38, x] and every candidate model of
# facenet-pytorch's ONet one XNNPACK refused (requantization scales of 1e34).
PAD_OPS = {"PAD", "PADV2", "MIRROR_PAD", "Pad"}
MAX_OPS = {"MAX_POOL_2D", "MaxPool", "REDUCE_MAX", "ReduceMax", "GlobalMaxPool"}
MINUS_INFINITY_STAND_IN = -1e30


def _max_only(graph: CalibGraph, tensor: str) -> bool:
    readers = [op for op in graph.ops if tensor in op.inputs]
    return bool(readers) and tensor not in graph.outputs and all(
        op.op in MAX_OPS and op.inputs[0] == tensor for op in readers)


def max_padding_ranges(graph: CalibGraph, ranges: dict[str, tuple[float, float]]
                       ) -> dict[str, tuple[float, float]]:
    """`ranges` with each max-pool padding of a minus-infinity stand-in given its
    input's range (in graph order, so padded pads follow their input)."""
    fixed = dict(ranges)
    for op in graph.ops:
        if op.op not in PAD_OPS or not op.outputs or not op.inputs:
            continue
        out, source = op.outputs[0], op.inputs[0]
        if (out in fixed and source in fixed and fixed[out][0] <= MINUS_INFINITY_STAND_IN
                and _max_only(graph, out)):
            fixed[out] = fixed[source]
    return fixed
