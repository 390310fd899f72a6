"""The second PyTorch route, `--torch-route litert` (issue 17, acceptance 2): the checked
program converted by litert-torch straight to a float .tflite, checked against the program
per output, then built like any .tflite. Real litert-torch, LiteRT, the quantizers; the
builds take tens of seconds, so they are slow."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("litert_torch")

from torch_models import TwoHeads  # noqa: E402

import edgeopt  # noqa: E402
from conftest import assert_user_error  # noqa: E402
from edgeopt.model import load_model  # noqa: E402
from edgeopt.tflite_reader import read_tflite  # noqa: E402
from edgeopt.torch_litert import LAYOUT_NOTE, module_path  # noqa: E402


@pytest.fixture(scope="module")
def litert_handle(heads_pt2):
    return load_model(heads_pt2, "litert")


@pytest.mark.slow
def test_litert_route_gives_a_float_tflite_named_and_ordered_as_the_program(
        litert_handle, heads_pt2):
    onnx_handle = load_model(heads_pt2)  # the default route, for its names
    handle = litert_handle
    assert handle.format == "tflite" and handle.torch.route == "litert"
    assert handle.path.read_bytes()[4:8] == b"TFL3"
    assert [s.name for s in handle.inputs] == [s.name for s in onnx_handle.inputs] == ["x"]
    assert [s.name for s in handle.outputs] == [s.name for s in onnx_handle.outputs]
    assert handle.inputs[0].shape == (1, 3, 16, 16)  # NCHW, as litert-torch writes it
    record = handle.torch.record()
    assert record["route"] == "litert" and record["exporter"].startswith(
        "litert_torch.convert (litert-torch 0.10")
    assert record["layout"] == LAYOUT_NOTE
    assert record["named_layers"] > 0
    assert [o["name"] for o in record["outputs"]] == [s.name for s in handle.outputs]
    assert record["parity"]["cosine"] > 0.9999 and record["parity"]["max_abs"] < 1e-4


@pytest.mark.slow
def test_litert_tflite_runs_as_the_program(litert_handle):
    """The handle's .tflite in edgeopt's own LiteRT runner gives the program's outputs, in
    the program's order (the two heads, logits and a sigmoid box, differ)."""
    from edgeopt.runtime import make_runner, run_dataset
    from edgeopt.torch_program import ProgramRunner

    feeds = {"x": np.random.default_rng(1).standard_normal((3, 3, 16, 16)).astype(np.float32)}
    got = run_dataset(make_runner(litert_handle), feeds)
    want = ProgramRunner(litert_handle.torch.program).run(feeds)
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-4)
    assert not np.allclose(want[0], want[1], atol=1e-2)  # so the order is checked too


@pytest.mark.slow
@pytest.mark.parametrize("device, via", [("pixel-npu", "cli"), ("host-cpu", "api")])
def test_build_by_the_litert_route(run_cli, heads_pt2, heads_calib, tmp_path, device, via):
    """`edgeopt build x.pt2 --torch-route litert`, and edgeopt.build(module, torch_route=)."""
    out = tmp_path / "dist"
    if via == "cli":
        result = run_cli("build", heads_pt2, "--torch-route", "litert", "--device", device,
                         "--calib", heads_calib, "-o", out)
        assert result.exit_code == 0, result.stderr
    else:
        edgeopt.build(TwoHeads(), example_inputs=(torch.randn(1, 3, 16, 16),), device=device,
                      torch_route="litert", calib=str(heads_calib), output=str(out))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"]["format"] == "pt2"
    conversion = manifest["conversion"]
    export = conversion["torch_export"]
    assert export["route"] == "litert" and "litert-torch" in export["exporter"]
    assert export["parity"]["cosine"] > 0.9999
    assert [o["name"] for o in export["outputs"]] == [o["name"] for o in manifest["outputs"]]
    assert conversion["input_layout_changes"] == {}  # NCHW kept
    assert "litert-torch" in conversion["note"] and "already" not in conversion["note"]
    assert all(o["sqnr_db"] > 15 for o in manifest["validation"]["outputs"])
    artifact = read_tflite(next(out.glob("*.tflite")).read_bytes())
    assert artifact.tensor(artifact.inputs[0]).shape[1] == 3  # channels first
    # The layer report names layers by module path (the outputs keep the program's names).
    layers = {row["layer"] for row in manifest["quantization"]["layer_report"]}
    assert {"features.0.0", "features.1.0"} <= layers, layers
    assert layers <= {"features.0.0", "features.1.0", "features.1.1", "box", "classifier",
                      "linear", "sigmoid"}, layers
    assert manifest["estimate"]["latency_ms"] > 0


@pytest.mark.slow
def test_onnx_build_inspect_and_convert_by_the_litert_route(run_cli, heads_pt2, heads_calib,
                                                            tmp_path):
    out = tmp_path / "dist"
    result = run_cli("build", heads_pt2, "--torch-route", "litert", "--device", "host-cpu",
                     "--format", "onnx", "--calib", heads_calib, "-o", out)
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["format"] == "onnx"
    assert manifest["conversion"]["torch_export"]["route"] == "litert"
    result = run_cli("inspect", heads_pt2, "--torch-route", "litert", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["format"] == "pt2" and "litert-torch" in record["graph_read_from"]
    converted = tmp_path / "float.tflite"
    result = run_cli("convert", heads_pt2, "--torch-route", "litert", "--calib", heads_calib,
                     "-o", converted, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)  # the float .tflite against the PyTorch program
    assert record["model"] == str(heads_pt2) and "litert-torch" in record["converter"]
    assert record["parity"]["cosine"] > 0.9999 and converted.read_bytes()[4:8] == b"TFL3"


def test_litert_tensor_names_become_module_paths():
    root = "torch_models.TwoHeads"
    conv = f"{root}/torch.nn.modules.container.Sequential_features/" \
        "torch.nn.modules.container.Sequential_0/torch.nn.modules.conv.Conv2d_0"
    relu = conv.replace("conv.Conv2d_0", "activation.ReLU_2")
    assert module_path(f"{relu};;{conv};2") == "features.0.0"  # fused: the convolution's
    assert module_path(f"{root}/torch.nn.modules.linear.Linear_box;") == "box"
    assert module_path(f"{root}/tv.models.densenet._DenseLayer_denselayer1/"
                       "torch.nn.modules.conv.Conv2d_conv_1x1;1") == "denselayer1.conv_1x1"
    assert module_path(f"{root};1") is None  # the root module's own op
    assert module_path("arith.constant1") is None


def test_unknown_route_is_one_error(run_cli, heads_pt2, tmp_path):
    result = run_cli("build", heads_pt2, "--torch-route", "tflite", "--calib", "random",
                     "-o", tmp_path / "dist")
    assert_user_error(result, "--torch-route")
    assert not (tmp_path / "dist").exists()


HIDDEN = ("import runpy, sys; sys.modules['litert_torch'] = None; "
          "sys.argv = ['edgeopt', *sys.argv[1:]]; runpy.run_module('edgeopt.cli', "
          "run_name='__main__')")


def test_litert_route_without_litert_torch_says_what_to_install(heads_pt2, tmp_path):
    """litert-torch is hidden from a fresh interpreter, as on a machine without it."""
    out = tmp_path / "dist"
    for args in (["inspect", heads_pt2, "--torch-route", "litert"],
                 ["build", heads_pt2, "--torch-route", "litert", "--calib", "random",
                  "-o", out]):
        result = subprocess.run([sys.executable, "-c", HIDDEN, *map(str, args)],
                                capture_output=True, text=True, timeout=300)
        assert_user_error(result, "pip install 'edgeopt[torch]'")
        assert "needs litert-torch" in result.stderr
    assert not out.exists()
