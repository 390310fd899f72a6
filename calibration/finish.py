"""Last steps of the quantize stage: validate, search a precision mix, report, result."""

from __future__ import annotations

import numpy as np

from edgeopt.calibration.backend import QuantFormat
from edgeopt.calibration.config import QuantResult
from edgeopt.calibration.describe import describe_search
from edgeopt.calibration.int16_rescue import output_ops
from edgeopt.calibration.plan import QuantPlan
from edgeopt.calibration.report import layer_report
from edgeopt.calibration.search import search_precisions
from edgeopt.calibration.session import check_data
from edgeopt.float_islands import FULL_INTEGER_SCHEMES, WRITERS, float_ops, float_ops_note
from edgeopt.validate import compare


def validate(fmt: QuantFormat, model: bytes, data: dict[str, np.ndarray], labels,
             reference: list[np.ndarray] | None = None) -> dict:
    """The artifact run by the real runtime against the float model on `data`."""
    reference = reference if reference is not None else fmt.run(fmt.float_model, data)
    record = compare(reference, fmt.run(model, data), labels,
                     ops=output_ops(fmt.graph)).to_json()
    record["runtime"] = fmt.runtime
    return record


def range_records(plan: QuantPlan, choices: dict) -> dict[str, dict]:
    records = {}
    for name, (lo, hi) in plan.activation_ranges.items():
        choice = choices.get(name)
        records[name] = {"min": float(lo), "max": float(hi),
                         "estimator": choice.method if choice else None}
    return records


def finish(session, plan: QuantPlan, model: bytes, method: str, record: dict,
           choices: dict, evaluation: dict | None, labels) -> QuantResult:
    fmt, config = session.fmt, session.config
    data = evaluation if evaluation is not None else check_data(session)
    data_labels = labels if evaluation is not None else None
    reference = fmt.run(fmt.float_model, data)
    search = None
    if config.accuracy_budget is not None:
        session.progress(f"searching per-layer precision for a budget of "
                         f"{config.accuracy_budget}")
        model, plan, search = search_precisions(session, plan, data, data_labels, reference)
        method += describe_search(search)
    validation = validate(fmt, model, data, data_labels, reference)
    validation.update(record)
    validation["check_samples"] = len(next(iter(check_data(session).values())))
    if evaluation is None:
        validation["data"] = "calibration samples that chose the ranges (optimistic)"
        session.warnings.append(
            "validated on the calibration samples that chose the ranges (no evaluation "
            "data was given): the figure is optimistic; pass samples held out from "
            "calibration")
    validation["fallbacks"] = session.fallbacks
    report = []
    if config.layer_report:
        session.progress("layer-wise report")
        report = layer_report(session, plan, model, check_data(session))
    islands = None
    if str(config.scheme) in FULL_INTEGER_SCHEMES:
        islands = float_ops(model, fmt.name, WRITERS[fmt.name], fmt.float_reasons(plan))
        if islands:
            session.warnings.append(float_ops_note(islands, str(config.scheme)))
    return QuantResult(model, fmt.name, str(config.scheme), method, report, plan.precisions(),
                       list(dict.fromkeys(session.warnings)), config.io_dtype, validation,
                       search, range_records(plan, choices), islands, session.rescue,
                       output_ops(fmt.graph))
