"""Whole builds from PyTorch (issue 17): edgeopt.build(module), `edgeopt build model.pt2` for a
.tflite and an .onnx target, quantize and compress; each runs the real exporter, onnx2tf,
the quantizers and LiteRT/onnxruntime, so they are slow."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

from torch_models import TwoHeads, save_program  # noqa: E402

import edgeopt  # noqa: E402
from edgeopt.tflite_reader import read_tflite  # noqa: E402

pytestmark = pytest.mark.slow

MODULE_PATHS = ("features.0", "features.1.0", "classifier", "box")


def test_api_builds_a_module_for_the_npu_validated_against_pytorch(tmp_path, heads_calib):
    result = edgeopt.build(TwoHeads(), example_inputs=(torch.randn(1, 3, 16, 16),),
                           device="pixel-npu", calib=str(heads_calib),
                           output=str(tmp_path / "dist"))
    manifest = result.manifest
    assert manifest["source"] == {"file": "twoheads.pt2", "format": "pt2"}
    conversion = manifest["conversion"]
    assert conversion["input_layout_changes"] == {"x": [0, 2, 3, 1]}  # NCHW -> NHWC
    assert [o["name"] for o in conversion["torch_export"]["outputs"]] == \
        [o["name"] for o in manifest["outputs"]]
    assert conversion["torch_export"]["parity"]["cosine"] > 0.9999
    assert conversion["parity"]["cosine"] > 0.9999  # the float .tflite against PyTorch
    assert [o["name"] for o in manifest["validation"]["outputs"]] == \
        [o["name"] for o in manifest["outputs"]]
    assert all(o["sqnr_db"] > 20 for o in manifest["validation"]["outputs"])
    assert manifest["placement"]["cpu_ops"] == 0
    assert manifest["estimate"]["latency_ms"] > 0
    # The .tflite's tensors carry the module paths (not onnx2tf's Keras names), so do the
    # layer report rows and the report page; the model's outputs keep the .tflite's names.
    layers = [row["layer"] for row in manifest["quantization"]["layer_report"]]
    artifact = read_tflite(next((tmp_path / "dist").glob("*.tflite")).read_bytes())
    known = {*MODULE_PATHS, *(artifact.tensor(i).name for i in artifact.outputs)}
    assert {"features.0", "features.1.0"} <= set(layers), layers
    assert all(layer in known for layer in layers), layers
    assert "features.1.0" in (tmp_path / "dist" / "report.html").read_text()


def test_pt2_onnx_build_reports_layers_by_module_path(run_cli, heads_pt2, heads_calib, tmp_path):
    out = tmp_path / "dist"
    result = run_cli("build", heads_pt2, "--device", "host-cpu", "--format", "onnx",
                     "--calib", heads_calib, "-o", out)
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    layers = [row["layer"] for row in manifest["quantization"]["layer_report"]]
    # A layer whose output is a model output keeps that output's name.
    known = {*MODULE_PATHS, *(o["name"] for o in manifest["outputs"])}
    assert layers and all(layer.split("/")[0] in known for layer in layers), layers
    assert "features.0" in layers
    assert manifest["model"]["format"] == "onnx"
    assert "features.0" in (out / "report.html").read_text()


def test_quantize_and_compress_take_a_pt2(run_cli, heads_pt2, heads_calib, tmp_path):
    quantized = tmp_path / "q.tflite"
    result = run_cli("quantize", heads_pt2, "--calib", heads_calib, "--scheme", "w8a8", "-o",
                     quantized)
    assert result.exit_code == 0, result.stderr
    assert quantized.read_bytes()[4:8] == b"TFL3"
    out = tmp_path / "pruned"
    result = run_cli("build", heads_pt2, "--device", "host-cpu", "--format", "onnx",
                     "--calib", heads_calib, "--prune", "0.25", "-o", out)
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["compression"]["size_bytes"]["after"] < \
        manifest["compression"]["size_bytes"]["before"]


class OneHead(torch.nn.Module):
    """Conv-BN-ReLU, a strided conv, a linear head: one input, one output, as --qat takes."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 16, 3, stride=2, padding=1), torch.nn.ReLU())
        self.classifier = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


def test_qat_trains_a_pt2_through_its_onnx_export(run_cli, tmp_path):
    """Issue 19 item 2: a PyTorch source trains through the ONNX->Keras import (the .pt2's
    ONNX export is the model every stage sees); the record says QAT ran and what shipped."""
    pt2 = save_program(OneHead(), (1, 3, 16, 16), tmp_path / "net.pt2")
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.random.default_rng(0).standard_normal((60, 3, 16, 16)).astype(
        np.float32))
    out = tmp_path / "qat.tflite"
    result = run_cli("quantize", pt2, "--calib", calib, "--qat", "--epochs", "2", "-o", out,
                     "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["qat"]["ran"] and record["qat"]["epochs_run"] >= 1
    assert record["qat"]["shipped"] in ("qat", "ptq")
    assert out.read_bytes()[4:8] == b"TFL3"


class CeilPool(torch.nn.Module):
    """facenet-pytorch ONet's pattern: conv, per-channel PReLU, MaxPool2d(ceil_mode=True)
    on a size the window does not tile (10 -> 5), so onnx2tf pads with float32's lowest."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3)
        self.prelu1 = torch.nn.PReLU(8)
        self.pool1 = torch.nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2 = torch.nn.Conv2d(8, 8, 3)
        self.prelu2 = torch.nn.PReLU(8)
        self.dense = torch.nn.Linear(8 * 3 * 3, 4)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        return self.dense(self.prelu2(self.conv2(x)).flatten(1))


def test_ceil_mode_max_pool_quantizes_for_xnnpack(run_cli, tmp_path):
    """Its padding's range was [-3.4e38, x]: every int8 candidate had requantization
    scales XNNPACK refuses ('failed to create XNNPACK runtime')."""
    pt2 = save_program(CeilPool(), (1, 3, 12, 12), tmp_path / "ceil.pt2")
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.random.default_rng(0).standard_normal((40, 3, 12, 12), np.float32))
    out = tmp_path / "q.tflite"
    result = run_cli("quantize", pt2, "--calib", calib, "--scheme", "w8a8", "-o", out)
    assert result.exit_code == 0, result.stderr
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(out))  # XNNPACK applied by default
    interpreter.allocate_tensors()
    scales = [d["quantization"][0] for d in interpreter.get_tensor_details()
              if d["dtype"] == np.int8]
    assert scales and max(scales) < 1e3, max(scales)
