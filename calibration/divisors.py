"""Divisions LiteRT's int8 kernel would refuse: they stay float, and say why.

LiteRT's int8 DIV checks every divisor value against the divisor's zero point and fails
the invoke when one matches (`tflite/kernels/div.cc`: `data[i] != zero_point`). A
quantized range always holds the real 0 (at the zero point), so any divisor smaller than
half a quantization step rounds to it: a layer norm's `1 / sqrt(var + eps)` or a softmax
written as `exp / sum(exp)` does, on the inputs whose variance or sum is small. The
divisor's own calibrated minimum is not enough: the int8 ops before it round too (magika's
`var + 1e-6` loses the epsilon, and `sqrt` of a variance rounded to 0 is 0 although the
float minimum sat 2.4 steps above 0). A DIV whose divisor comes within `MARGIN_STEPS` int8
steps of 0 (a divisor range narrower than 255/16 of its maximum) is kept float. So is a
DIV the graph itself guards against a zero divisor (TensorFlow's `div_no_nan` becomes
EQUAL(divisor, 0), DIV, SELECT): the divisor is 0 on some input (basic-pitch's
normalisation of a silent clip) whatever the calibration data showed.

    >>> risky_divisions(graph, {"sqrt_out": (1e-3, 8.0)})        # doctest: +SKIP
    {'reciprocal': 'int8 DIV: the divisor sqrt_out (range 0.001..8) ...'}
"""

from __future__ import annotations

from edgeopt.calibration.graphspec import CalibGraph

MARGIN_STEPS = 16.0
_LEVELS = 255  # int8 steps across the quantized range


def _step(lo: float, hi: float) -> float:
    return (max(hi, 0.0) - min(lo, 0.0)) / _LEVELS


def near_zero(lo: float, hi: float) -> bool:
    """True when a value of [lo, hi] lies within MARGIN_STEPS int8 steps of 0."""
    margin = MARGIN_STEPS * _step(lo, hi)
    return lo < margin and hi > -margin


_GUARDS = ("EQUAL", "NOT_EQUAL")


def guarded_divisions(graph: CalibGraph) -> dict[str, str]:
    """DIV ops whose divisor an EQUAL/NOT_EQUAL also reads: a zero-divisor guard."""
    compared = {name for op in graph.ops if op.op in _GUARDS for name in op.inputs}
    return {op.outputs[0]: (
        f"int8 DIV: the graph guards its divisor '{op.inputs[1]}' against 0 (div_no_nan), so "
        "it is 0 on some input, and LiteRT's int8 DIV fails on a divisor at its zero point; "
        "kept float") for op in graph.ops
        if op.op == "DIV" and len(op.inputs) > 1 and op.inputs[1] in compared}


def risky_divisions(graph: CalibGraph, ranges: dict[str, tuple[float, float]]) -> dict[str, str]:
    """DIV ops (by output tensor) to keep float, with the reason the manifest lists."""
    found = guarded_divisions(graph)
    for op in graph.ops:
        if op.op != "DIV" or len(op.inputs) < 2 or op.inputs[1] not in ranges:
            continue
        lo, hi = ranges[op.inputs[1]]
        if near_zero(lo, hi):
            found[op.outputs[0]] = (
                f"int8 DIV: the divisor '{op.inputs[1]}' (calibrated {lo:.3g}..{hi:.3g}) comes "
                f"within {MARGIN_STEPS:g} int8 steps of 0, and LiteRT's int8 DIV fails on a "
                "divisor that rounds to its zero point; kept float")
    return found
