"""An output that collapses in int8 is rescued before the build fails, and the build says so.

    >>> model, plan = rescue_collapsed(session, plan, model, check, reference)  # doctest: +SKIP

Where the device's delegate runs int16 activations (16x8 kernels: `delegates/int16.toml`)
the ops writing the output get int16 first (`int16_rescue`): same int8 weights, 256x the
levels, and the op stays on the accelerator. Elsewhere int16 buys nothing: the op leaves
the accelerator either way, and on the CPU LiteRT runs 16x8 on its reference kernels
while float runs on XNNPACK. So an output that still collapses gets a *float tail*: the
ops that compute it, nearest first, the first 1, 2, 4, ... of them kept float (weights
too), then bisected to the shortest tail after which no output collapses on the check
samples and those outputs reach `RISK_DB` (else the best tail tried, kept only if it
beats int8 as int16 must). As for int16, a values output below RISK_DB on the check
samples counts: they are calibration samples, and an output near the floor there
collapses on held-out ones. A log-mel front end whose int8 power spectrum underflows to
the log's floor is fixed this way. Every op of the tail is listed as a float island with
the reason, the warning names them, and `--require-full-integer` still refuses the
result. The `.onnx` route rescues the same way: the tail's nodes are excluded from the
QDQ writer (`onnx_writer.excluded_nodes`) and listed by node name; int16 is never tried
there, as onnxruntime's CPU EP runs a 16-bit QDQ op in float anyway.
"""

from __future__ import annotations

import numpy as np

from edgeopt.calibration.config import Mode, Precision
from edgeopt.calibration.graphspec import CalibGraph
from edgeopt.calibration.int16_rescue import (
    RISK_DB,
    attempt,
    better,
    output_ops,
    output_state,
    rescue_int16,
    rescue_record,
)
from edgeopt.calibration.plan import QuantPlan

MAX_DOUBLINGS = 9   # tails of 1 .. 256 ops, then every op that computes the outputs
FLOAT_REASON = ("kept float: output(s) {outputs} collapsed (or nearly) in int8 and {no_int16} "
                "(float tail of the outputs, on the CPU)")
DELEGATE_NO_INT16 = "the device's delegate runs no int16"
# onnxruntime's CPU EP fuses only 8-bit DQ -> op -> Q groups into QLinear kernels: a 16-bit
# group stays DequantizeLinear -> float op -> QuantizeLinear (seen in onnxruntime 1.32's
# optimized graph), so int16 QDQ costs what float does and keeps fewer levels
ONNX_NO_INT16 = "onnxruntime's CPU EP has no int16 QDQ kernels"


def no_int16(session) -> str:
    """Why the rescue did not use int16, in the reason and the warning."""
    return ONNX_NO_INT16 if session.fmt.name == "onnx" else DELEGATE_NO_INT16


def float_tail(graph: CalibGraph, outputs: list[str]) -> list[str]:
    """First output tensors of the ops that compute `outputs`, breadth-first from them
    (nearest first; an op is listed once). Only float values count: the integer ops that
    compute a Reshape's shape (Shape, Gather, Cast...) are never quantized, and the float
    op whose shape they read does not change the output's values through them."""
    floats = set(graph.activations)
    writer = {out: op for op in graph.ops for out in op.outputs if out in floats}
    order: list[str] = []
    seen: set[str] = set()
    frontier = list(outputs)
    while frontier:
        following = []
        for tensor in frontier:
            op = writer.get(tensor)
            if op is None or op.outputs[0] in seen:
                continue
            seen.add(op.outputs[0])
            order.append(op.outputs[0])
            following += [t for t in op.inputs if t in writer]
        frontier = following
    return order


def in_float(session, plan: QuantPlan, tensors: list[str], reason: str) -> QuantPlan:
    """`plan` with the ops writing `tensors` kept float (a layer's weights too)."""
    layers = {t: session.replan(t, Precision.FLOAT) for t in tensors if t in plan.layers}
    kept = plan.with_layers(layers)
    for tensor in tensors:
        kept = kept.keeping_float(tensor, reason)
    return kept


def tail_sizes(total: int) -> list[int]:
    sizes = [1 << k for k in range(MAX_DOUBLINGS) if 1 << k < total]
    return sizes + [total]


def _fixed(state, risky: list[int]) -> bool:
    return state[0] == 0 and min(state[1][i] for i in risky) >= RISK_DB


def _rank(state, risky: list[int]) -> tuple[int, float]:
    return -state[0], min(state[1][i] for i in risky)


def rescue_in_float(session, plan: QuantPlan, check: dict[str, np.ndarray],
                    reference: list[np.ndarray], before) -> tuple[bytes, QuantPlan] | None:
    """(model, plan) with the shortest float tail that fixes the outputs at risk (doubling,
    then bisecting below the first tail that does; else the best one found, if it beats
    `before` as int16 must), or None."""
    graph = session.fmt.graph
    risky = before[2]
    names = [graph.outputs[i] for i in risky]
    reason = FLOAT_REASON.format(outputs=", ".join(f"'{n}'" for n in names),
                                 no_int16=no_int16(session))
    tail = float_tail(graph, names)
    if not tail:
        return None
    tried: dict[int, tuple | None] = {}

    def tail_of(size: int):
        if size not in tried:
            tried[size] = attempt(session, in_float(session, plan, tail[:size], reason),
                                  check, reference)
        return tried[size]

    def fixes(size: int) -> bool:
        found = tail_of(size)
        return found is not None and _fixed(found[2], risky)

    low, high = 0, None
    for size in tail_sizes(len(tail)):
        if fixes(size):
            high = size
            break
        low = size
    while high is not None and high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if fixes(middle) else (middle, high)
    if high is None:  # no tail fixes it: the best one, if better than int8
        ranked = [(k, f) for k, f in tried.items() if f is not None]
        high = max(ranked, key=lambda kf: _rank(kf[1][2], risky))[0] if ranked else None
    best = tail_of(high) if high is not None else None
    if best is None or not better(before, best[2], risky):
        return None
    _warn(session, before, best[2], risky, tail[:high])
    return best[0], best[1]


def _warn(session, before, after, outputs: list[int], tensors: list[str]) -> None:
    names = ", ".join(f"'{session.fmt.node_name(t)}'" for t in tensors[:4])
    names += ", ..." if len(tensors) > 4 else ""
    total = len(session.fmt.graph.ops)
    if 2 * len(tensors) > total:  # no longer a tail: say what the artifact has become
        session.warnings.append(
            f"the collapse rescue keeps {len(tensors)} of the model's {total} ops float: "
            "the artifact is mostly a float model on the CPU, not an accelerator build; "
            "--accept-collapsed ships the int8 model instead, --accuracy-budget searches "
            "a mix for a quality target")
    session.warnings.append(
        f"{len(outputs)} output(s) collapsed in int8 or fell below {RISK_DB:.0f} dB SQNR on "
        f"the check samples: the last "
        f"{len(tensors)} op(s) computing them ({names}) are kept float ({no_int16(session)}; "
        f"they run on the CPU); collapsed parts {before[0]} -> "
        f"{after[0]}, worst SQNR of those outputs "
        f"{min(before[1][i] for i in outputs):.1f} -> {min(after[1][i] for i in outputs):.1f}"
        " dB")
    session.rescue = rescue_record(session, "float", outputs, tensors, before, after)


def rescue_collapsed(session, plan: QuantPlan, model: bytes, check: dict[str, np.ndarray],
                     reference: list[np.ndarray]) -> tuple[bytes, QuantPlan]:
    """(model, plan): int16 on the ops feeding outputs that collapse (or nearly) where the
    device runs int16, then a float tail for outputs that still collapse; unchanged when
    nothing collapses, nothing helps, or the user accepts the collapse (config.rescue)."""
    if not session.config.rescue or plan.mode != Mode.STATIC or plan.activation_bits != 8:
        return model, plan
    ops = output_ops(session.fmt.graph)
    before = output_state(reference, session.fmt.run(model, check), ops)
    if not before[2]:
        return model, plan
    if session.fmt.int16_activations and session.config.int16_search:
        found = rescue_int16(session, plan, check, reference, before)
        if found is not None:
            model, plan = found
            before = output_state(reference, session.fmt.run(model, check), ops)
    if not before[2] or not session.fmt.keeps_ops_float or not session.config.float_tail:
        return model, plan  # the collapse check then names the output and the way out
    found = rescue_in_float(session, plan, check, reference, before)
    return found if found is not None else (model, plan)
