"""What `edgeopt estimate` does, apart from printing: load the model, resolve the device,
estimate on one profile or on all of them.

    >>> est, notes, log = estimate_one("model.tflite", "coral-usb")   # doctest: +SKIP
    >>> record, rows = estimate_all("model.tflite")                  # doctest: +SKIP
"""

from __future__ import annotations

from edgeopt.devices.edgetpu import compiler_log
from edgeopt.devices.estimator import estimate
from edgeopt.devices.modelsource import EstimateModel, load_estimate_model
from edgeopt.devices.profile import DeviceProfile, all_profiles, load_profile
from edgeopt.devices.result import Estimate
from edgeopt.errors import EdgeoptError, first_line


def _estimate(source: EstimateModel, profile: DeviceProfile) -> Estimate:
    return estimate(source.graph, profile, model=source.tflite)


def estimate_one(model: str, device: str, precision: str = "auto",
                 input_shapes: tuple[str, ...] = ()) -> tuple[Estimate, list[str], str]:
    """(estimate, notes, Edge TPU compiler log or '') of ``model`` on ``device``."""
    profile = load_profile(device)
    source = load_estimate_model(model, profile.precision, precision, input_shapes)
    est = _estimate(source, profile)
    log = ""
    if profile.delegate == "edgetpu":
        log = compiler_log(est)
    return est, [source.precision_note], log


def estimate_all(model: str, precision: str = "auto", input_shapes: tuple[str, ...] = ()
                 ) -> tuple[dict, list[tuple[str, Estimate | None, str]]]:
    """Every shipped profile; a device that cannot run the model gets its reason instead."""
    sources: dict[str, EstimateModel] = {}
    rows: list[tuple[str, Estimate | None, str]] = []
    records = []
    for profile in all_profiles():
        key = "int8" if profile.precision == "int8" else "float"
        try:
            if key not in sources:
                sources[key] = load_estimate_model(model, profile.precision, precision,
                                                   input_shapes)
            est = _estimate(sources[key], profile)
        except EdgeoptError as exc:
            rows.append((profile.name, None, first_line(exc)))
            records.append({"device": profile.name, "error": first_line(exc)})
            continue
        rows.append((profile.name, est, ""))
        records.append({**est.to_json(), "precision_note": sources[key].precision_note})
    return {"model": model, "devices": records}, rows
