"""`--qat` on `edgeopt quantize` and `edgeopt build`: bad input, the skip, the real run.

The trained artifact is what the runtime runs: LiteRT (or onnxruntime) loads the written
file here and its figures are the ones the record shows.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import SAMPLES, assert_user_error
from edgeopt.runtime import OnnxRunner, TFLiteRunner, run_dataset
from edgeopt.tflite_reader import read_tflite

keras = pytest.importorskip("keras")
DIGITS = SAMPLES / "digits_cnn.keras"
CALIB = SAMPLES / "digits_calib.npz"
EVAL = SAMPLES / "digits_eval.npz"


def test_qat_without_real_samples_is_refused(run_cli, tmp_path):
    result = run_cli("build", DIGITS, "--calib", "random", "--qat", "-o", tmp_path / "dist")
    assert_user_error(result, "--qat trains on real samples")
    assert not (tmp_path / "dist").exists()


def test_qat_of_a_tflite_source_says_where_not(run_cli, tmp_path, tiny_float_tflite,
                                               tiny_nhwc_data):
    result = run_cli("quantize", tiny_float_tflite, "--calib", tiny_nhwc_data, "--qat",
                     "-o", tmp_path / "q.tflite")
    assert_user_error(result, "a tflite source has no trainable graph")
    assert not (tmp_path / "q.tflite").exists()


def test_qat_of_another_scheme_is_refused(run_cli, tmp_path):
    result = run_cli("quantize", DIGITS, "--calib", CALIB, "--qat", "--scheme", "w4a8",
                     "-o", tmp_path / "q.tflite")
    assert_user_error(result, "--scheme w8a8")


def test_qat_with_converter_ranges_is_refused(run_cli, tmp_path):
    result = run_cli("build", DIGITS, "--calib", CALIB, "--qat", "--method", "converter",
                     "-o", tmp_path / "dist")
    assert_user_error(result, "drop --method converter")


def _no_weights_model(path):
    x = inp = keras.Input((6, 6, 3), name="image")
    x = keras.layers.ReLU()(x)
    keras.Model(inp, keras.layers.GlobalAveragePooling2D()(x)).save(path)
    return path


def test_a_model_without_a_trainable_quantized_layer_is_refused(run_cli, tmp_path):
    model = _no_weights_model(tmp_path / "noweights.keras")
    data = tmp_path / "d.npz"
    np.savez(data, image=np.random.default_rng(0).random((40, 6, 6, 3), dtype=np.float32))
    result = run_cli("quantize", model, "--calib", data, "--qat", "-o", tmp_path / "q.tflite")
    assert_user_error(result, "no trainable quantized layer")
    assert not (tmp_path / "q.tflite").exists()


def test_budget_met_by_ptq_skips_qat_and_says_so(run_cli, tmp_path):
    out = tmp_path / "q.tflite"
    result = run_cli("quantize", DIGITS, "--calib", CALIB, "--eval", EVAL, "--qat",
                     "--accuracy-budget", "5", "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["qat"]["ran"] is False
    assert "already meets the budget 5.0 at full integer: QAT skipped" in record["qat"]["reason"]
    assert record["qat"]["ptq"]["metric"] == "top1_accuracy"
    assert out.exists()


@pytest.mark.slow
def test_forced_qat_writes_the_int8_model_litert_runs(run_cli, tmp_path):
    out = tmp_path / "q.tflite"
    result = run_cli("quantize", DIGITS, "--calib", CALIB, "--eval", EVAL, "--qat",
                     "--epochs", "2", "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    qat = json.loads(result.stdout)["qat"]
    assert qat["ran"] and qat["shipped"] == "qat" and qat["labels"] is False
    assert 1 <= qat["epochs_run"] <= 2 and qat["learned_ranges"] >= 4
    assert qat["ptq"]["samples"] == qat["qat"]["samples"] > 0
    assert qat["ptq"]["reference"] == qat["qat"]["reference"]  # both against the source float
    # the figure is the runtime's: LiteRT runs the written file to the same agreement
    content = out.read_bytes()
    assert any(t.dtype == "int8" and not t.is_constant for t in read_tflite(content).tensors)
    data = np.load(EVAL)
    runner = TFLiteRunner(content)
    outputs = run_dataset(runner, {runner.input_names[0]: data["image"]})[0]
    assert (outputs.argmax(-1) == data["labels"]).mean() == pytest.approx(qat["qat"]["value"])


@pytest.mark.slow
def test_build_with_qat_records_ptq_and_qat_side_by_side(run_cli, tmp_path):
    out = tmp_path / "dist"
    result = run_cli("build", DIGITS, "--calib", CALIB, "--eval", EVAL, "--qat", "--epochs",
                     "1", "--device", "pixel-npu", "-o", out)
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    qat = manifest["qat"]
    assert qat["ran"] and qat["epochs_max"] == 1 and qat["seconds"] > 0
    assert manifest["accuracy"]["value"] == pytest.approx(qat["qat"]["value"], abs=1e-6)
    assert "Quantization-aware training" in (out / "report.html").read_text()


@pytest.mark.slow
def test_qat_of_an_onnx_source_goes_through_the_import_and_the_qdq_writer(
        run_cli, tmp_path, tiny_onnx_path):
    data = tmp_path / "d.npz"
    np.savez(data, input=np.random.default_rng(0).random((48, 3, 16, 16), dtype=np.float32))
    out = tmp_path / "q.onnx"
    result = run_cli("quantize", tiny_onnx_path, "--calib", data, "--qat", "--epochs", "1",
                     "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    qat = json.loads(result.stdout)["qat"]
    assert qat["ran"] and qat["learned_ranges"] >= 2
    import onnx

    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    runner = OnnxRunner(out.read_bytes())
    sample = np.load(data)["input"][:4]
    assert run_dataset(runner, {runner.input_names[0]: sample})[0].shape == (4, 4)


@pytest.mark.slow
def test_qat_runs_when_ptq_misses_the_budget_and_the_better_result_ships(run_cli, tmp_path):
    # no labels: the budget is an SQNR floor; 80 dB is more than any int8 model holds, so
    # PTQ's search falls back to float, QAT runs, misses too, and the PTQ result ships
    out = tmp_path / "q.tflite"
    result = run_cli("quantize", DIGITS, "--calib", CALIB, "--qat", "--epochs", "1",
                     "--accuracy-budget", "80", "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    qat = record["qat"]
    assert qat["ran"] and "post-training quantization" in qat["reason"]
    assert "budget 80.0" in qat["reason"]
    assert qat["shipped"] == "ptq" and "missed the budget 80.0 too" in qat["note"]
    assert qat["qat"]["layers_above_int8"] == 0 and qat["ptq"]["layers_above_int8"] > 0
    assert "quantization-aware" not in record["method"]  # PTQ's own result and method


@pytest.mark.slow
def test_qat_of_an_onnx_source_to_tflite_trains_the_import(run_cli, tmp_path, tiny_onnx_path):
    data = tmp_path / "d.npz"
    np.savez(data, input=np.random.default_rng(1).random((48, 3, 16, 16), dtype=np.float32))
    out = tmp_path / "q.tflite"
    result = run_cli("quantize", tiny_onnx_path, "--calib", data, "--qat", "--epochs", "1",
                     "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["qat"]["ran"] and record["qat"]["learned_ranges"] >= 2
    assert record["validation"]["samples"] == record["qat"]["qat"]["samples"]
    assert any(t.dtype == "int8" for t in read_tflite(out.read_bytes()).tensors)


def test_forced_qat_that_scores_below_ptq_ships_and_says_so():
    from edgeopt.calibration.config import QuantConfig, QuantResult
    from edgeopt.qat_step import choose

    def result(value: float) -> QuantResult:
        return QuantResult(b"", "tflite", "w8a8", "auto", [], {}, [], "int8",
                           validation={"metric": "top1_agreement", "value": value})

    ptq, qat, record = result(0.9667), result(0.94), {}
    assert choose(ptq, qat, QuantConfig(), record) is qat and record["shipped"] == "qat"
    assert "scored below the post-training one" in record["note"] and "0.94" in record["note"]
    better, record = result(0.98), {}
    assert choose(ptq, better, QuantConfig(), record) is better and "note" not in record
