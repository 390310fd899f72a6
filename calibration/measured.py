"""Decisions the runtime makes: which activation ranges, and whether bias correction
stays. Candidates are written, run on check samples and scored by output SQNR.

Bias correction removes the mean shift of rounded weights (large for int4); with int8
weights and quantized activations it can also cost output SQNR (PP-OCR's classifier), so
for full-integer schemes every range set is scored with and without it.
"""

from __future__ import annotations

from edgeopt.calibration.calibrate import estimate_ranges
from edgeopt.calibration.estimators import EstimatorSettings
from edgeopt.calibration.plan import QuantPlan
from edgeopt.calibration.runtime_errors import RuntimeRejected
from edgeopt.calibration.selection import candidate_ranges, output_sqnr, select_ranges
from edgeopt.calibration.session import Session

WITHOUT_BC = " without bias correction"


def has_corrected_bias(plan: QuantPlan) -> bool:
    return any(p.bias is not None for p in plan.layers.values())


def replanned(session: Session, plan: QuantPlan, bias_correction: bool,
              after: bool | None) -> QuantPlan:
    """Every layer of `plan` planned again with bias correction on or off; the session's
    setting is `after` once done."""
    session.bias_correction = bias_correction
    try:
        return plan.with_layers({n: session.replan(n, p.precision)
                                 for n, p in plan.layers.items()})
    finally:
        session.bias_correction = after


def without_bias_correction(session: Session, plan: QuantPlan) -> QuantPlan:
    return replanned(session, plan, False, None)


def choose_ranges(session: Session, plan: QuantPlan, check, reference):
    """(label, ranges, scores, per-tensor choices, plan): the best range set, and the plan
    with or without bias correction, whichever scored higher."""
    config = session.config
    settings = EstimatorSettings(percentile=config.percentile)
    _, choices, warnings = estimate_ranges(session.calibration.observers, config.method, settings)
    session.warnings.extend(warnings)
    sets = candidate_ranges(choices, session.fmt.graph, config.method)
    plans = {"": plan}
    if session.corrects_bias and has_corrected_bias(plan):
        plans[WITHOUT_BC] = without_bias_correction(session, plan)
    if len(sets) * len(plans) > 1:
        session.progress(f"scoring {len(sets) * len(plans)} candidates in "
                         f"{session.fmt.runtime}")
    scores, best = {}, None
    for suffix, candidate in plans.items():
        label, ranges, found = select_ranges(session.fmt, candidate, sets, check, reference,
                                             score_single=len(plans) > 1)
        scores.update({k + suffix: v for k, v in found.items()})
        score = found.get(label, 0.0)
        if best is None or score > best[0]:
            best = (score, label, ranges, candidate, suffix)
    _, label, ranges, chosen, suffix = best
    if suffix:
        session.bias_correction = False
    return label, ranges, scores, choices, chosen


def keep_bias_correction_if_it_helps(session: Session, plan: QuantPlan, check,
                                     reference) -> QuantPlan:
    """For schemes without activation ranges: one plan with, one without, the better one."""
    if not session.corrects_bias or not has_corrected_bias(plan):
        return plan
    try:
        score = output_sqnr(reference, session.fmt.run(session.fmt.write(plan), check))
        plain = without_bias_correction(session, plan)
        plain_score = output_sqnr(reference, session.fmt.run(session.fmt.write(plain), check))
    except RuntimeRejected:
        return plan
    if plain_score > score:
        session.bias_correction = False
        return plain
    return plan
