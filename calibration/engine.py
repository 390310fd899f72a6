"""The quantize stage end to end, for any format with a format object.

    check data -> precisions -> one capture pass -> ranges -> weights -> plan
      -> (auto: candidates scored by the runtime) -> write + runtime check (fallbacks)
      -> collapsed outputs: int16 on the ops feeding them (where the device runs
         int16), else a float tail (calibration/rescue.py)
      -> validation -> layer report -> (accuracy budget: precision search)

    >>> fmt = open_format("tflite", float_tflite_bytes)                  # doctest: +SKIP
    >>> result = quantize_with(fmt, calib, QuantConfig(scheme="w8a8"))   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from edgeopt.calibration.backend import QuantFormat
from edgeopt.calibration.calibrate import run_calibration
from edgeopt.calibration.config import Mode, Precision, QuantConfig, QuantResult, traits
from edgeopt.calibration.data_checks import check_calibration
from edgeopt.calibration.describe import describe_method
from edgeopt.calibration.fallback import write_checked
from edgeopt.calibration.finish import finish
from edgeopt.calibration.measured import choose_ranges, keep_bias_correction_if_it_helps
from edgeopt.calibration.plan import QuantPlan
from edgeopt.calibration.precision import assign_precisions
from edgeopt.calibration.rescue import rescue_collapsed
from edgeopt.calibration.selection import output_sqnr
from edgeopt.calibration.session import Progress, Session, check_data, open_format

__all__ = ["open_format", "quantize_with", "Session", "build_plan", "write_checked",
           "check_data"]


def hessian_layers(session: Session) -> set[str]:
    """Conv and dense layers that GPTQ will round (any int4 candidate under a budget)."""
    budget = session.config.accuracy_budget is not None
    capable = {la.name for la in session.fmt.graph.layers if la.int4_capable}
    return {n for n, c in session.choices.items() if n in capable and (
        c.weight_method == "gptq" or budget and c.method_for(Precision.INT4) == "gptq")}


def fit_to_format(fmt: QuantFormat, config: QuantConfig, choices: dict,
                  warnings: list[str]) -> dict:
    """int4 layers become int8 where the format's writer cannot store int4 in this mode."""
    mode = traits(config.scheme).mode
    if mode in fmt.int4_modes:
        return choices
    demoted = {n: replace(c, precision=Precision.INT8) for n, c in choices.items()
               if c.precision == Precision.INT4}
    if demoted:
        warnings.append(f"{fmt.name} {config.scheme}: {len(demoted)} int4 layer(s) stored as "
                        f"int8 (the {fmt.name} writer has no int4 for this scheme)")
    return {**choices, **demoted}


def calibrate(session: Session) -> None:
    config = session.config
    session.progress(f"calibrating on {len(next(iter(session.calib.values())))} samples")
    session.stats = run_calibration(session.fmt, session.calib, hessian_layers(session),
                                    config.batch_size, config.seed)
    for name, stats in session.calibration.layers.stats.items():
        if stats.hessian is not None and stats.rows < len(stats.hessian):
            session.warnings.append(
                f"GPTQ for layer '{name}': {stats.rows} input rows for {len(stats.hessian)} "
                "weights per channel; the damped Hessian may overfit (give more samples)")


def build_plan(session: Session, ranges: dict) -> QuantPlan:
    scheme = traits(session.config.scheme)
    layers = {name: session.replan(name, choice.precision)
              for name, choice in session.choices.items()}
    return QuantPlan(scheme.mode, scheme.activation_bits,
                     ranges if scheme.mode == Mode.STATIC else {}, layers,
                     session.config.io_dtype)


def quantize_with(fmt: QuantFormat, calib: dict[str, np.ndarray], config: QuantConfig,
                  evaluation: dict | None = None, labels: np.ndarray | None = None,
                  progress: Progress | None = None,
                  fixed_ranges: dict[str, tuple[float, float]] | None = None) -> QuantResult:
    """Calibrate, quantize, check in the runtime, validate and report. `fixed_ranges`
    (tensor -> range, e.g. learned by quantization-aware training) replace the estimated
    ranges of those tensors."""
    warnings = check_calibration(calib, config.method)
    choices, precision_warnings = assign_precisions(fmt.graph, config)
    choices = fit_to_format(fmt, config, choices, precision_warnings)
    session = Session(fmt, config, calib, choices, warnings=warnings + precision_warnings,
                      progress=progress or (lambda _msg: None))
    calibrate(session)
    check = check_data(session)
    reference = fmt.run(fmt.float_model, check)
    plan = build_plan(session, {})
    label, choices_by_tensor, scores = config.method, {}, {}
    if plan.mode == Mode.STATIC:
        label, ranges, scores, choices_by_tensor, plan = choose_ranges(session, plan, check,
                                                                       reference)
        fixed = {k: v for k, v in (fixed_ranges or {}).items() if k in ranges}
        plan = plan.with_ranges({**ranges, **fixed})
    else:
        plan = keep_bias_correction_if_it_helps(session, plan, check, reference)
    model, plan = write_checked(session, plan)
    model, plan = rescue_collapsed(session, plan, model, check, reference)
    session.warnings.extend(fmt.limitations(plan))
    method = describe_method(session, label, choices_by_tensor, scores, plan)
    record = {"check_output_sqnr_db": output_sqnr(reference, fmt.run(model, check)),
              "candidates": scores, "calibration_seconds": round(session.calibration.seconds, 3)}
    return finish(session, plan, model, method, record, choices_by_tensor, evaluation, labels)
