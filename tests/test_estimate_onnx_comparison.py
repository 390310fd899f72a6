"""`build --format onnx --device a,b,...`: the .onnx artifact is compared on every device
named (issue 15: ONNX artifacts get placement and estimates everywhere), each row placed
on that device's onnxruntime execution provider and carrying its basis; `inspect --device`
shows an .onnx input's placement on that provider too."""

from __future__ import annotations

import json

import pytest

from conftest import tiny_onnx
from edgeopt.devices.fitted import PRIOR_BASIS
from edgeopt.devices.profile import load_profile
from edgeopt.inspect import inspect_model, render_inspection

DEVICES = ("host-cpu", "snapdragon-npu", "rpi5-cpu", "coral-usb")


def test_an_onnx_artifact_is_compared_on_every_device(run_cli, tmp_path):
    # a fixed batch: with a dynamic one the QNN EP takes only the weights' DequantizeLinear
    # nodes and every kernel runs on the CPU EP (whose basis is then the prior, rightly)
    model = tiny_onnx(tmp_path / "static.onnx", dynamic_batch=False)
    result = run_cli("build", model, "--device", ",".join(DEVICES), "--format",
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


@pytest.mark.slow   # places the model on every shipped profile, twice
def test_inspect_places_an_onnx_input_as_the_onnx_artifact_runs(tiny_onnx_path):
    record = inspect_model(str(tiny_onnx_path), "snapdragon-npu")
    onnx = record["onnx_placement"]
    assert onnx["summary"].startswith("snapdragon-npu: ")
    assert {op["unit"] for op in onnx["ops"]} == {"npu"}   # QNN EP, shapes fixed as built
    assert "as .onnx on onnxruntime: snapdragon-npu" in render_inspection(record)
    every = inspect_model(str(tiny_onnx_path), "all")["devices"]
    assert all(line["onnx_summary"].startswith(line["device"]) for line in every)
