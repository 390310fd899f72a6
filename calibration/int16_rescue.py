"""An output that collapses in int8 gets int16 activations on the ops that write it.

One int8 scale spans every channel of a tensor. A landmark head whose one convolution
writes coordinates (0..256) and visibility logits (0..1) gives the small channels a few
steps, and the output collapses (`validate.collapse_reason`). int16 activations give the
same tensor 256x the levels with the same int8 weights (TFLite's 16x8 kernels). Before a
collapsed output fails the build, the ops from the last computing op to that output
(through layout-only ops) are moved to int16; the change is kept when fewer outputs
collapse, and the warning names the ops. `calibration.rescue` decides when (where the
device runs int16) and what follows (a float tail).

    >>> found = rescue_int16(session, plan, check, reference, before)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from edgeopt.calibration.config import Mode, Precision
from edgeopt.calibration.fallback import write_checked
from edgeopt.calibration.graphspec import CalibGraph
from edgeopt.calibration.measured import replanned
from edgeopt.calibration.mixed_scales import LAYOUT_OPS
from edgeopt.calibration.plan import QuantPlan
from edgeopt.calibration.runtime_errors import RuntimeRejected
from edgeopt.validate import compare

CPU_NOTE = ("XNNPACK has no int16 kernels: on a CPU they run on LiteRT's reference "
            "kernels (slower than int8; the estimate says so)")
RISK_DB = 10.0      # an output this close to the 3 dB collapse floor is rescued too
GAIN_DB = 1.0       # the least SQNR gain on the rescued outputs that keeps int16
# ops a tensor's scale passes through unchanged in kind: the values they write were made
# by the op before them, so that op needs the int16 grid too
PASS_THROUGH = LAYOUT_OPS | {"LOGISTIC", "TANH", "RELU", "RELU6", "RELU_N1_TO_1",
                             "HARD_SWISH", "LEAKY_RELU", "QUANTIZE", "DEQUANTIZE",
                             "Sigmoid", "Tanh", "Relu", "Clip", "HardSwish", "LeakyRelu"}


def feeding_ops(graph: CalibGraph, output: str) -> list[str]:
    """Output tensors of the ops from the last op that computed the values up to
    `output`: activations and layout ops on the way, and that op."""
    writer = {out: op for op in graph.ops for out in op.outputs}
    chain, tensor = [], output
    while tensor in writer:
        op = writer[tensor]
        chain.append(op.outputs[0])
        if op.op not in PASS_THROUGH or not op.inputs:
            break
        tensor = op.inputs[0]
    return chain


def int16_segment(graph: CalibGraph, layer: str) -> list[str]:
    """Output tensors of the ops without weights that `layer`'s output reaches before the
    next weight layer: an int16 layer carries its grid through them (a pooling or softmax
    left in int8 would quantize its output again at int8 resolution)."""
    layers = {la.name for la in graph.layers}
    readers: dict[str, list] = {}
    for op in graph.ops:
        for name in op.inputs:
            readers.setdefault(name, []).append(op)
    found, frontier = [], [layer]
    while frontier:
        for op in readers.get(frontier.pop(), []):
            out = op.outputs[0] if op.outputs else None
            if out is None or out in layers or out in found:
                continue
            found.append(out)
            frontier.append(out)
    return found


def output_ops(graph: CalibGraph) -> list[str | None]:
    """The op computing each output of `graph`, past layout-only ops (a RESHAPE after a
    LOGISTIC: the LOGISTIC fixes the output's grid); None for an input passed through."""
    writer = {out: op for op in graph.ops for out in op.outputs}
    found: list[str | None] = []
    for tensor in graph.outputs:
        op = writer.get(tensor)
        while op is not None and op.op in LAYOUT_OPS and op.inputs and op.inputs[0] in writer:
            op = writer[op.inputs[0]]
        found.append(op.op if op is not None else None)
    return found


def finite_db(value: float) -> float | None:
    """A dB figure for the manifest: rounded, None when infinite (identical outputs)."""
    return round(float(value), 2) if np.isfinite(value) else None


def output_state(reference: list[np.ndarray], outputs: list[np.ndarray],
                 ops: list[str | None] | None = None,
                 ) -> tuple[int, list[float], list[int]]:
    """(collapsed parts, SQNR per output, outputs at risk: collapsed, or values below
    RISK_DB); `ops` as `output_ops` gives them. An output not judged on these samples is
    not at risk."""
    validation = compare(reference, outputs, ops=ops)
    lines = [len(out.collapse_lines()) for out in validation.outputs]
    sqnrs = [float(out.sqnr_db) for out in validation.outputs]
    # a class or CTC output can lose SQNR and keep its top-1: only its collapse counts
    near = [not out.unjudged and out.kind == "values" for out in validation.outputs]
    risky = [i for i, (n, q, v) in enumerate(zip(lines, sqnrs, near))
             if n or (v and q < RISK_DB)]
    return sum(lines), sqnrs, risky


def widened(session, plan: QuantPlan, tensors) -> QuantPlan:
    """`plan` with the calibrated min-max range on `tensors`: a range estimator clips
    outliers to buy int8 resolution, which int16 has without clipping."""
    observers = session.calibration.observers
    wide = {t: (float(observers[t].min), float(observers[t].max)) for t in tensors
            if t in observers and t in plan.activation_ranges}
    return plan.with_ranges({**plan.activation_ranges, **wide})


def in_int16(session, plan: QuantPlan, tensors: list[str]) -> QuantPlan:
    """`plan` with the ops writing `tensors` at int16 activations (weights stay int8) and
    their outputs on min-max ranges."""
    layers = {t: session.replan(t, Precision.INT16) for t in tensors
              if t in plan.layers and plan.layers[t].precision == Precision.INT8}
    others = {t: "its output collapsed in int8 (mixed channel scales); int16 activations"
              for t in tensors if t not in plan.layers}
    return widened(session, plan.with_layers(layers).in_int16(others), tensors)


def better(before, after, risky: list[int]) -> bool:
    if after[0] != before[0]:
        return after[0] < before[0]
    return min(after[1][i] for i in risky) >= min(before[1][i] for i in risky) + GAIN_DB


def attempt(session, plan: QuantPlan, check, reference):
    """(model, plan, state) of `plan` written and run, or None if the runtime refuses it."""
    try:
        model, plan = write_checked(session, plan)
        return model, plan, output_state(reference, session.fmt.run(model, check),
                                         output_ops(session.fmt.graph))
    except RuntimeRejected:
        return None


def rescue_int16(session, plan: QuantPlan, check: dict[str, np.ndarray],
                 reference: list[np.ndarray], before) -> tuple[bytes, QuantPlan] | None:
    """(model, plan), with int16 activations where they help outputs that collapse (or
    nearly) in int8 (`before`: `output_state` of the int8 model): first on the ops
    feeding them, else on every op; None when neither helps."""
    if plan.mode != Mode.STATIC or plan.activation_bits != 8 or \
            not session.fmt.int16_activations:
        return None
    risky = before[2]
    graph = session.fmt.graph
    tensors = list(dict.fromkeys(t for i in risky
                                 for t in feeding_ops(graph, graph.outputs[i])))
    for candidate, where, corrected in _candidates(session, plan, tensors):
        found = attempt(session, candidate, check, reference)
        if found is not None and better(before, found[2], risky):
            _warn(session, before, found[2], risky, where, tensors)
            if corrected:
                session.bias_correction = None
            return found[0], found[1]
    return None


def _candidates(session, plan: QuantPlan, tensors: list[str]):
    """(plan, where, bias corrected again) to try in order: the ops feeding the outputs,
    then every op; each again with bias correction if int8 had turned it off (the int8
    grid's noise can hide what the correction buys, int16's does not)."""
    local = in_int16(session, plan, tensors)
    every = widened(session, replace(plan, activation_bits=16), plan.activation_ranges)
    found = [(local, f"{len(tensors)} op(s) feeding them", False),
             (every, "every op (the model becomes w8a16)", False)]
    if session.corrects_bias or not session.config.bias_correction:
        return found
    return found[:1] + [(_corrected(session, local), found[0][1], True), found[1],
                        (_corrected(session, every), found[1][1], True)]


def _corrected(session, plan: QuantPlan) -> QuantPlan:
    return replanned(session, plan, True, False)


def _warn(session, before, after, risky: list[int], where: str, tensors: list[str]) -> None:
    names = ", ".join(f"'{t}'" for t in tensors[:3]) + (", ..." if len(tensors) > 3 else "")
    session.warnings.append(
        f"{len(risky)} output(s) collapsed in int8 or fell below {RISK_DB:.0f} dB SQNR on "
        f"the check samples (fed by {names}): {where} run with int16 activations; "
        f"collapsed parts {before[0]} -> {after[0]}, worst SQNR of those outputs "
        f"{min(before[1][i] for i in risky):.1f} -> {min(after[1][i] for i in risky):.1f} dB. "
        f"{CPU_NOTE}")
    session.rescue = rescue_record(session, "int16", risky, tensors, before, after)


def rescue_record(session, precision: str, outputs: list[int], tensors, before,
                  after) -> dict:
    """The manifest's `quantization.rescue`: what was kept at which precision, and why."""
    return {"precision": precision, "outputs": [session.fmt.graph.outputs[i] for i in outputs],
            "ops": list(tensors), "nodes": [session.fmt.node_name(t) for t in tensors],
            "collapsed_before": before[0], "collapsed_after": after[0],
            "sqnr_db_before": finite_db(min(before[1][i] for i in outputs)),
            "sqnr_db_after": finite_db(min(after[1][i] for i in outputs))}
