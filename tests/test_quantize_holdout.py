"""Issue 20 class 9: `edgeopt quantize` and `edgeopt build` take one path through the
calibration core, and the figure quantize prints is measured on held-out samples.

Before the fix, `quantize` without --eval calibrated on every sample and validated on
the same calibration samples that had chosen its range candidate (an optimistic figure),
while `build` held a fifth back: the two printed different figures for one model.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import tiny_cnn
from edgeopt.data import HOLDOUT_SHARE

pytestmark = pytest.mark.slow
SAMPLES = 60


@pytest.fixture(scope="module")
def model_and_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("class9")
    tiny_cnn(input_shape=(16, 16, 3)).save(folder / "tiny.keras")
    rng = np.random.default_rng(9)
    smooth = rng.random((SAMPLES, 4, 4, 3)).repeat(4, axis=1).repeat(4, axis=2)
    images = (smooth + 0.1 * rng.random((SAMPLES, 16, 16, 3))).astype(np.float32)
    np.savez(folder / "calib.npz", image=images)
    return folder


def test_quantize_validates_on_the_held_out_share_not_on_calibration(run_cli, model_and_data,
                                                                   tmp_path):
    result = run_cli("quantize", model_and_data / "tiny.keras", "--calib",
                     model_and_data / "calib.npz", "--scheme", "w8a8", "--method", "auto",
                     "-o", tmp_path / "q.tflite", "--json")
    assert result.exit_code == 0, result.stderr
    validation = json.loads(result.stdout)["validation"]
    held = SAMPLES // round(1 / HOLDOUT_SHARE)
    assert validation["samples"] == held
    assert "held out" in validation["data"]
    assert validation["check_samples"] == SAMPLES - held  # the candidates' samples
    text = run_cli("quantize", model_and_data / "tiny.keras", "--calib",
                   model_and_data / "calib.npz", "-o", tmp_path / "q2.tflite")
    assert f"validated {held} samples (held out from" in text.stdout


def test_build_and_quantize_print_the_same_figure(run_cli, model_and_data, tmp_path):
    """Same model, same data, same scheme: the same samples calibrate, choose and
    validate, so both commands report the same output SQNR."""
    built = run_cli("build", model_and_data / "tiny.keras", "--device", "host-cpu",
                    "--calib", model_and_data / "calib.npz", "-o", tmp_path / "b", "--json")
    assert built.exit_code == 0, built.stderr
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    result = run_cli("quantize", model_and_data / "tiny.keras", "--calib",
                     model_and_data / "calib.npz", "-o", tmp_path / "q.tflite", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["method"] == manifest["recipe"]["method"]
    assert record["validation"]["samples"] == manifest["validation"]["samples"]
    # build compares with the Keras model, quantize with the float .tflite (parity ~1e-6)
    assert record["validation"]["sqnr_db"] == pytest.approx(manifest["validation"]["sqnr_db"],
                                                            abs=0.05)


def test_the_library_says_when_it_validated_on_calibration_samples(model_and_data):
    import tensorflow as tf

    from edgeopt.quantize import QuantConfig, quantize_tflite

    model = tf.keras.models.load_model(model_and_data / "tiny.keras")
    float_tflite = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    images = np.load(model_and_data / "calib.npz")["image"]
    name = tf.lite.Interpreter(model_content=float_tflite).get_signature_list()[
        "serving_default"]["inputs"][0]
    result = quantize_tflite(float_tflite, {name: images}, QuantConfig(layer_report=False))
    assert "optimistic" in result.validation["data"]
    assert any("calibration samples that chose the ranges" in w for w in result.warnings)
