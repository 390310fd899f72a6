"""`edgeopt quantize` through click, inside edgeopt's error-handling group."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError, replace

import numpy as np
import pytest

from conftest import SAMPLES, assert_user_error
from edgeopt.quantize import QuantConfig, QuantizeRequest, build_config


@pytest.fixture
def run(run_cli):
    """`edgeopt ARGS` (the tests name the quantize command themselves)."""
    return run_cli


@pytest.fixture(scope="module")
def calib(tmp_path_factory):
    rng = np.random.default_rng(3)
    path = tmp_path_factory.mktemp("qdata") / "calib.npz"
    np.savez(path, input=rng.random((40, 3, 16, 16), dtype=np.float32))
    return path


def test_quantize_onnx_to_onnx_prints_one_json_object(run, tiny_onnx_path, calib, tmp_path):
    out = tmp_path / "q.onnx"
    result = run("quantize", tiny_onnx_path, "--calib", calib, "--scheme", "w4a8",
                 "-o", out, "--json", "--report", tmp_path / "r.html")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["output"] == str(out) and out.stat().st_size == record["size_bytes"]
    assert record["scheme"] == "w4a8" and record["format"] == "onnx"
    assert record["layer_report"] and record["validation"]["sqnr_db"] > 10
    assert "<svg" in (tmp_path / "r.html").read_text()
    assert not list(tmp_path.glob(".*partial"))


def test_quantize_keras_sample_to_tflite_with_a_recipe(run, tmp_path):
    out = tmp_path / "digits.tflite"
    result = run("quantize", SAMPLES / "digits_cnn.keras", "--calib",
                 SAMPLES / "digits_calib.npz", "--recipe", "w4a8-int8-head", "--method",
                 "minmax", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes()[4:8] == b"TFL3"
    assert "wrote" in result.stdout and "w4a8" in result.stdout


def test_nan_in_calibration_data_exits_2_naming_the_input(run, tiny_onnx_path, tmp_path):
    data = np.random.default_rng(0).random((8, 3, 16, 16)).astype(np.float32)
    data[2, 0, 0, 0] = np.nan
    np.savez(tmp_path / "bad.npz", input=data)
    result = run("quantize", tiny_onnx_path, "--calib", tmp_path / "bad.npz", "-o",
                 tmp_path / "q.onnx")
    assert_user_error(result, "'input'")
    assert not (tmp_path / "q.onnx").exists()


def test_unknown_recipe_and_impossible_target_exit_2(run, tiny_onnx_path, calib, tmp_path):
    assert_user_error(run("quantize", tiny_onnx_path, "--calib", calib, "--recipe", "nope",
                          "-o", tmp_path / "q.onnx"), "recipe 'nope' not found")
    assert_user_error(run("quantize", SAMPLES / "digits_cnn.keras", "--calib",
                          SAMPLES / "digits_calib.npz", "-o", tmp_path / "q.onnx"),
                      "an .onnx output needs an .onnx model")


def test_dry_run_prints_the_resolved_config(run, tiny_onnx_path, calib):
    result = run("quantize", tiny_onnx_path, "--calib", calib, "--recipe",
                 "w4-dense-block32", "-o", "x.onnx", "--dry-run")
    config = json.loads(result.stdout)
    assert config["scheme"] == "w4afp32" and config["recipe"] == "w4-dense-block32"


def test_a_request_resolves_flags_over_the_recipe_over_the_defaults():
    """One frozen request, as every other command has; no untyped options dict."""
    request = QuantizeRequest(model="m.onnx", calib="c.npz", output="q.tflite")
    assert build_config(request) == QuantConfig()
    with pytest.raises(FrozenInstanceError):
        request.scheme = "w4a8"  # type: ignore[misc]
    with_recipe = replace(request, recipe="w4-dense-block32")
    recipe_config = build_config(with_recipe)
    assert recipe_config.scheme == recipe_config.recipe.scheme != QuantConfig().scheme
    flags = build_config(replace(with_recipe, scheme="w4a8", method="mse"))
    assert (flags.scheme, flags.method, flags.recipe) == ("w4a8", "mse", recipe_config.recipe)


def test_help_has_an_example(run):
    result = run("quantize", "--help")
    assert "Example:" in result.stdout and "edgeopt quantize" in result.stdout


def test_an_already_quantized_model_is_refused(run, tiny_onnx_path, calib, tmp_path):
    first = tmp_path / "q.onnx"
    assert run("quantize", tiny_onnx_path, "--calib", calib, "-o", first).exit_code == 0
    assert_user_error(run("quantize", first, "--calib", calib, "-o", tmp_path / "qq.onnx"),
                      "already quantized")


def test_build_and_quantize_hold_back_the_same_share(run, run_cli, tiny_onnx_path,
                                                     tiny_nhwc_data, tmp_path):
    """Drift: without --eval build held back a fifth, quantize (--accuracy-budget) a quarter."""
    from edgeopt.data import HOLDOUT_SHARE

    built = run_cli("build", tiny_onnx_path, "--device", "host-cpu", "--format", "onnx",
                    "--calib", tiny_nhwc_data, "-o", tmp_path / "d", "--json")
    assert built.exit_code == 0, built.stderr
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    result = run("quantize", tiny_onnx_path, "--calib", tiny_nhwc_data, "--accuracy-budget",
                 "5", "-o", tmp_path / "q.onnx", "--json")
    assert result.exit_code == 0, result.stderr
    held = json.loads(result.stdout)["validation"]["samples"]
    assert held == manifest["data"]["evaluation_samples"] == 64 // round(1 / HOLDOUT_SHARE)


def test_quantize_says_what_did_not_fit_in_the_images(run, tiny_onnx_path, tmp_path):
    from PIL import Image

    rng = np.random.default_rng(4)
    (tmp_path / "wide").mkdir()
    for i in range(10):
        pixels = rng.integers(0, 256, (16, 32, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / "wide" / f"{i}.png")
    result = run("quantize", tiny_onnx_path, "--calib", tmp_path / "wide", "-o",
                 tmp_path / "q.onnx")
    assert result.exit_code == 0, result.stderr
    assert "warning   10 of 10 images (32x16) have another aspect ratio" in result.stdout
