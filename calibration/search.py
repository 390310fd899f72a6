"""Fix it: the smallest per-layer precision mix that meets an accuracy budget.

1. Start from the smallest model: int4 where a layer can take it, int8 elsewhere.
2. Measure each layer's sensitivity with the real runtime: the output SQNR of a model
   in which that layer alone is quantized at its lowest precision.
3. Build a ladder of one-step raises (int4 -> int8 for every layer, most sensitive first,
   then int8 -> int16 activations where the format and the device run 16x8 kernels, then
   -> fp16, then fp16 -> float) and bisect for the shortest prefix of the ladder that
   meets the budget. Each prefix is written, loaded and run by the runtime.

The budget is in points of top-1 accuracy when labels exist (the drop from the float
model may not exceed it), else an output-SQNR floor in dB.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from edgeopt.calibration.config import Mode, Precision, traits
from edgeopt.calibration.fallback import write_checked
from edgeopt.calibration.int16_rescue import int16_segment, widened
from edgeopt.calibration.plan import LayerPlan, QuantPlan
from edgeopt.calibration.report import isolated_effect
from edgeopt.calibration.weights import weight_sqnr_db
from edgeopt.validate import compare

SENSITIVITY_SAMPLES = 32
STEPS = ((Precision.INT4, Precision.INT8), (Precision.INT8, Precision.FP16),
         (Precision.FP16, Precision.FLOAT))
# int16 activations (int8 weights, 16x8 kernels) sit between int8 and fp16: 256x the
# activation levels for 2x the activation bytes, weights unchanged
STEPS_INT16 = ((Precision.INT4, Precision.INT8), (Precision.INT8, Precision.INT16),
               (Precision.INT16, Precision.FP16), (Precision.FP16, Precision.FLOAT))


class Budget:
    def __init__(self, budget: float, reference: list[np.ndarray], labels):
        self.budget, self.reference, self.labels = budget, reference, labels

    def score(self, outputs: list[np.ndarray]) -> tuple[bool, dict]:
        record = compare(self.reference, outputs, self.labels)
        if record.metric == "top1_accuracy":
            drop = (record.reference - record.value) * 100
            return bool(drop <= self.budget + 1e-9), {"metric": "top1_accuracy_drop_points",
                                                "value": round(float(drop), 4)}
        return bool(record.sqnr_db >= self.budget), {"metric": "output_sqnr_db",
                                               "value": round(float(record.sqnr_db), 4)}


def smallest_plan(session, plan: QuantPlan) -> QuantPlan:
    changes = {}
    for layer in session.fmt.graph.layers:
        current = plan.layers[layer.name].precision
        if current in (Precision.INT16, Precision.FP16, Precision.FLOAT):
            continue
        target = Precision.INT4 if layer.int4_capable else Precision.INT8
        if target != current:
            changes[layer.name] = session.replan(layer.name, target)
    return plan.with_layers(changes)


def proxy_sensitivity(session, plan: QuantPlan, name: str) -> float:
    """The layer's own output SQNR from its calibration Hessian (no runtime needed):
    10 log10(tr(W H W^T) / tr(dW H dW^T)); the weight SQNR when there is no Hessian."""
    layer = session.fmt.graph.layer(name)
    weight = session.fmt.graph.weights[layer.weight]
    quant = plan.layers[name].weight
    stats = session.calibration.layers.stats.get(name)
    if stats is None or stats.hessian is None:
        return weight_sqnr_db(weight, quant)
    w2d = weight.reshape(len(weight), -1).astype(np.float64)
    delta = quant.dequantize().reshape(w2d.shape) - w2d
    signal = np.einsum("ij,jk,ik->", w2d, stats.hessian, w2d)
    noise = np.einsum("ij,jk,ik->", delta, stats.hessian, delta)
    return float(10 * np.log10(max(signal, 1e-30) / max(noise, 1e-30)))


def sensitivities(session, plan: QuantPlan, data: dict, reference) -> dict[str, float]:
    """Lower = more sensitive. The layers the Hessian proxy ranks worst (at most
    `3 * isolate_layers`) are measured in the runtime alone; the rest follow them."""
    names = [n for n, p in plan.layers.items()
             if p.precision in (Precision.INT4, Precision.INT8)]
    proxy = {n: proxy_sensitivity(session, plan, n) for n in names}
    measured = sorted(names, key=proxy.get)[:3 * session.config.isolate_layers]
    result = {}
    for name in measured:
        layer = session.fmt.graph.layer(name)
        value = isolated_effect(session.fmt, plan, layer, data, reference)
        result[name] = -np.inf if value is None else value
    finite = [v for v in result.values() if np.isfinite(v)]
    offset = (max(finite) if finite else 0.0) + 1.0
    for name in names:
        result.setdefault(name, offset + proxy[name])
    return result


def uses_int16(session) -> bool:
    """int16 steps on the ladder: the writer can mix them in and the device runs them."""
    return bool(session.fmt.int16_activations and session.config.int16_search
                and traits(session.config.scheme).activation_bits == 8)


def ladder(plan: QuantPlan, sensitivity: dict[str, float],
           int16: bool = False) -> list[tuple[str, Precision]]:
    order = sorted(plan.layers, key=lambda n: sensitivity.get(n, np.inf))
    steps, level = [], {n: p.precision for n, p in plan.layers.items()}
    for low, high in (STEPS_INT16 if int16 else STEPS):
        for name in order:
            if level[name] == low:
                steps.append((name, high))
                level[name] = high
    return steps


def round_ends(steps: list[tuple[str, Precision]]) -> list[int]:
    """Ladder positions where a round (all -> int8, all -> fp16, all -> float) ends."""
    ends = [i for i in range(1, len(steps)) if steps[i][1] != steps[i - 1][1]]
    return ends + [len(steps)] if steps else []


def _replan(session, name: str, precision: Precision):
    """An int16 layer is bias-corrected whenever the config allows it: int8's noise can
    hide what the correction buys (the int8 range choice may have turned it off), int16's
    does not (a YOLOv8n: 36.6 dB without, 48.5 dB with)."""
    if precision != Precision.INT16 or session.corrects_bias or \
            not session.config.bias_correction:
        return session.replan(name, precision)
    session.bias_correction = True
    try:
        return session.replan(name, precision)
    finally:
        session.bias_correction = False


def apply_steps(session, plan: QuantPlan, steps) -> QuantPlan:
    final: dict[str, Precision] = {}
    for name, precision in steps:
        final[name] = precision
    raised = plan.with_layers({n: _replan(session, n, p) for n, p in final.items()})
    int16 = [n for n, p in final.items() if p == Precision.INT16]
    if not int16:
        return raised
    graph = session.fmt.graph
    segment = {t: "follows an int16 layer" for n in int16 for t in int16_segment(graph, n)}
    return widened(session, raised.in_int16(segment), [*int16, *segment])


def search_precisions(session, plan: QuantPlan, data: dict, labels, reference):
    """(model, plan, record) of the smallest mix on the ladder that meets the budget."""
    budget = Budget(session.config.accuracy_budget, reference, labels)
    if plan.mode in (Mode.FP16, Mode.FLOAT):
        return session.fmt.write(plan), plan, {"note": f"nothing to search in {plan.mode}"}
    base = smallest_plan(session, plan)
    sense_data = {k: v[:SENSITIVITY_SAMPLES] for k, v in data.items()}
    sense_ref = [r[:SENSITIVITY_SAMPLES] for r in reference]
    steps = ladder(base, sensitivities(session, base, sense_data, sense_ref),
                   uses_int16(session))
    tried: dict[int, dict] = {}

    def attempt(k: int):
        model, checked = write_checked(session, apply_steps(session, base, steps[:k]))
        ok, metric = budget.score(session.fmt.run(model, data))
        tried[k] = {"raised_layers": k, "size_bytes": len(model), "meets_budget": ok, **metric}
        return ok, model, checked

    chosen, best = _bisect(attempt, round_ends(steps))
    if chosen is None:
        return _float_fallback(session, plan, steps, tried, budget)
    record = {"budget": session.config.accuracy_budget, "met": True,
              "steps": [tried[k] for k in sorted(tried)],
              "raised": [{"layer": n, "to": str(p)} for n, p in steps[:chosen]],
              "ladder_length": len(steps)}
    return best[0], best[1], record


def _bisect(attempt, ends: list[int]):
    """(k, (model, plan)) for the shortest ladder prefix that meets the budget, or
    (None, None). Round ends are tried in order (a partly quantized graph is not always
    better than a more quantized one across rounds); within a round, bisection assumes
    that raising a layer never hurts."""
    ok, *found = attempt(0)
    if ok:
        return 0, found
    low = 0
    for end in ends:
        ok, *found = attempt(end)
        if ok:
            break
        low = end
    if not ok:
        return None, None
    high, best = end, found
    while high - low > 1:
        middle = (low + high) // 2
        ok, *result = attempt(middle)
        if ok:
            high, best = middle, result
        else:
            low = middle
    return high, best


def _float_fallback(session, plan: QuantPlan, steps, tried: dict, budget: Budget):
    """No quantized mix meets the budget: the float model does, and the record says so."""
    float_plan = replace(plan, mode=Mode.FLOAT, layers={
        n: LayerPlan(Precision.FLOAT) for n in plan.layers}, activation_ranges={})
    model = session.fmt.write(float_plan)
    session.warnings.append(f"accuracy budget {budget.budget} is not met by any quantized "
                            "precision mix; the model is left float")
    record = {"budget": budget.budget, "met": True, "float_fallback": True,
              "steps": [tried[k] for k in sorted(tried)], "raised": [],
              "ladder_length": len(steps)}
    return model, float_plan, record
