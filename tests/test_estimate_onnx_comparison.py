"""`build --format onnx --device a,b,...`: the .onnx artifact is compared on every device
named (issue 15: ONNX artifacts get placement and estimates everywhere), each row placed
on that device's onnxruntime execution provider and carrying its basis."""

from __future__ import annotations

import json

from edgeopt.devices.fitted import PRIOR_BASIS
from edgeopt.devices.profile import load_profile

DEVICES = ("host-cpu", "snapdragon-npu", "rpi5-cpu", "coral-usb")


def test_an_onnx_artifact_is_compared_on_every_device(run_cli, tiny_onnx_path, tmp_path):
    result = run_cli("build", tiny_onnx_path, "--device", ",".join(DEVICES), "--format",
                     "onnx", "--calib", "random", "-o", tmp_path / "dist")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((tmp_path / "dist" / "manifest.json").read_text())
    rows = manifest["comparison"]
    assert [r["device"] for r in rows] == list(DEVICES)
    assert rows[0]["primary"] and rows[0]["latency_ms"] == manifest["estimate"]["latency_ms"]
    for row in rows:
        assert row["latency_ms"] > 0, row
        assert row["basis"], row
        assert row["delegated_ops"] + row["cpu_ops"] > 0
    # the QNN EP takes the quantized graph on the Snapdragon NPU; Coral has no ORT EP, so
    # every node is on the CPU there, and its basis says the fit does not apply
    by = {r["device"]: r for r in rows}
    assert by["snapdragon-npu"]["delegated_ops"] > 0
    assert by["coral-usb"]["delegated_ops"] == 0
    assert by["coral-usb"]["basis"] == PRIOR_BASIS
    assert by["snapdragon-npu"]["basis"] == load_profile("snapdragon-npu").basis
