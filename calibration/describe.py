"""One line that says how a model was quantized (the result's `method`)."""

from __future__ import annotations

from edgeopt.calibration.calibrate import method_summary
from edgeopt.calibration.config import Mode
from edgeopt.calibration.plan import QuantPlan
from edgeopt.calibration.session import Session


def describe_method(session: Session, label: str, choices, scores, plan: QuantPlan) -> str:
    config = session.config
    weights = weight_summary(plan, session.corrects_bias)
    if plan.mode != Mode.STATIC:
        return f"{config.scheme}: {weights}; no activation ranges"
    if config.method != "auto":
        return f"{label} activation ranges; {weights}"
    if label == "auto":
        summary = ", ".join(f"{k} {v}" for k, v in method_summary(choices).items())
        how = f"per-tensor ranges ({summary})"
    else:
        how = f"{label} ranges on every tensor"
    chosen = f", chosen from {len(scores)} candidates by output SQNR" if scores else ""
    return f"auto: {how}{chosen}; {weights}"


def weight_summary(plan: QuantPlan, bias_correction: bool) -> str:
    counts: dict[str, int] = {}
    for layer in plan.layers.values():
        key = str(layer.precision) + (f" {layer.weight_method}" if layer.weight_method else "")
        counts[key] = counts.get(key, 0) + 1
    text = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))
    corrected = bias_correction and any(p.bias is not None for p in plan.layers.values())
    return f"weights {text or 'none'}" + (" (bias-corrected)" if corrected else "")


def describe_search(search: dict) -> str:
    if search.get("float_fallback"):
        return f"; accuracy budget {search['budget']}: no quantized mix met it, left float"
    if "budget" not in search:
        return ""
    return (f"; accuracy budget {search['budget']}: {len(search['raised'])} layer step(s) "
            f"raised from the all-int4 start")
