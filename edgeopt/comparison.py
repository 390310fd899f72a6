"""`build --device all` (or a comma list): the built artifact, estimated on every device named.

The artifact is built once, for the first device; the others get the same file through
their own delegate rules and profile, so the comparison answers "where would this model
run best" without building N bundles. A device that cannot take the artifact says why
instead of stopping the build. An .onnx artifact is placed on the onnxruntime execution
provider each device's delegate has (NNAPI, QNN, XNNPACK, CoreML; the CPU EP where none
does) and estimated as the kernels onnxruntime runs, as the build target's own estimate.
"""

from __future__ import annotations

from collections.abc import Callable

from edgeopt.config import device_names
from edgeopt.delegates import place_for_device
from edgeopt.delegates.onnx_placement import place_onnx_for_device
from edgeopt.devices.assignment import PlacementView
from edgeopt.devices.estimator import estimate, estimate_onnx_model
from edgeopt.devices.profile import DeviceProfile, load_profile
from edgeopt.devices.result import Estimate
from edgeopt.errors import ConfigError, EdgeoptError, first_line
from edgeopt.tflite_reader import read_tflite

COMPARED_FORMATS = ("tflite", "onnx")
COMPARE_NEEDS_TFLITE = ("comparing devices (--device all or a comma list) estimates a "
                        ".tflite or .onnx artifact; build with --format tflite or onnx")


def compared_profiles(device_spec: str, fmt: str) -> list:
    """The profiles after the build target; [] for one device. Unknown names fail here,
    before the long stages run."""
    names = device_names(device_spec)
    if len(names) == 1:
        return []
    if fmt not in COMPARED_FORMATS:
        raise ConfigError(COMPARE_NEEDS_TFLITE)
    return [load_profile(name) for name in names[1:]]


def _row(profile: DeviceProfile, placement: PlacementView, estimate: Estimate,
         primary: bool) -> dict:
    total = placement.delegated_ops + placement.cpu_ops
    return {"device": profile.name, "kind": profile.kind, "delegate": profile.delegate,
            "primary": primary, **estimate.manifest_json(),
            "delegated_ops": placement.delegated_ops,
            "cpu_ops": placement.cpu_ops, "partitions": len(placement.partitions),
            "delegated_share": round(placement.delegated_ops / total, 6) if total else 0.0,
            "note": None}


def _failed(profile, why: str) -> dict:
    return {"device": profile.name, "kind": profile.kind, "delegate": profile.delegate,
            "primary": False, "latency_ms": None, "energy_mj": None, "delegated_ops": None,
            "cpu_ops": None, "partitions": None, "delegated_share": None, "note": why}


def compare_devices(content: bytes, primary: tuple[DeviceProfile, PlacementView, Estimate],
                    others: list[DeviceProfile],
                    progress: Callable[[str], None], fmt: str = "tflite",
                    shapes: dict | None = None) -> list[dict]:
    """One row per device: the build target's own (profile, placement, estimate) first.
    ``fmt`` is the artifact's format; an .onnx artifact's dynamic inputs are costed at
    ``shapes`` (the build's input shapes)."""
    estimate_on = _onnx_estimator(content, shapes) if fmt == "onnx" else \
        _tflite_estimator(content)
    rows = [_row(*primary, primary=True)]
    progress(f"estimating the artifact on {len(others)} more device(s)")
    for i, profile in enumerate(others, 1):
        progress(f"{profile.name} ({i}/{len(others)})")
        try:
            rows.append(_row(profile, *estimate_on(profile), primary=False))
        except EdgeoptError as exc:
            rows.append(_failed(profile, first_line(exc)))
    return rows


Estimator = Callable[[DeviceProfile], tuple[PlacementView, Estimate]]


def _tflite_estimator(content: bytes) -> Estimator:
    graph = read_tflite(content)

    def on(profile: DeviceProfile) -> tuple[PlacementView, Estimate]:
        placement = place_for_device(content, profile)
        return placement, estimate(graph, profile, placement, content)

    return on


def _onnx_estimator(content: bytes, shapes: dict | None) -> Estimator:
    def on(profile: DeviceProfile) -> tuple[PlacementView, Estimate]:
        placement = place_onnx_for_device(content, profile)
        return placement, estimate_onnx_model(content, profile, placement, shapes)

    return on
