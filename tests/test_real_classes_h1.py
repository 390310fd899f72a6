"""Failure classes 1, 5 and 6 of issue 20, each on a tiny model built here (slow: they run
the real converters). The zoo models that showed each class are in benchmarks/zoo.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import assert_user_error

pytestmark = pytest.mark.slow


def _keras():
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import keras

    keras.utils.set_random_seed(0)
    return keras


def _three_heads(path) -> None:
    """mtcnn's ONet in small: box (4), landmarks (10), score (2) from one trunk. The TFLite
    converter gives them back landmarks, box, score."""
    keras = _keras()
    x = keras.Input((12, 12, 3), name="image")
    h = keras.layers.Conv2D(8, 3, activation="relu")(x)
    h = keras.layers.Dense(16, activation="relu")(keras.layers.Flatten()(h))
    outputs = [keras.layers.Dense(4, name="box")(h), keras.layers.Dense(10, name="marks")(h),
               keras.layers.Dense(2, activation="softmax", name="score")(h)]
    keras.Model(x, outputs).save(path)


def test_multi_output_keras_matched_by_name(tmp_path, run_cli):
    """Class 1: outputs the converter reorders are compared with their own source output,
    and the manifest names each artifact output after its source output."""
    from edgeopt.runtime import LayoutAdapter, TFLiteRunner

    model, data, out = tmp_path / "three.keras", tmp_path / "calib.npz", tmp_path / "out"
    _three_heads(model)
    images = np.random.default_rng(0).random((40, 12, 12, 3), dtype=np.float32)
    np.savez(data, image=images)
    result = run_cli("build", model, "--device", "pixel-npu", "--calib", data, "-o", out,
                     "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    shapes = {o["name"]: o["shape"][1:] for o in manifest["outputs"]}
    assert shapes == {"box": [4], "marks": [10], "score": [2]}
    assert manifest["conversion"]["parity"]["cosine"] > 0.9999
    # the artifact's own runner, paired by the manifest's indexes, reproduces Keras
    import keras

    expected = keras.saving.load_model(model).predict(images[:4], verbose=0)
    runner = TFLiteRunner(out / manifest["model"]["file"], ["image"])
    raw = runner.run({"image": images[:4]})
    for record, want in zip(manifest["outputs"], expected):
        np.testing.assert_allclose(raw[record["index"]], want, atol=0.05)
    adapted = LayoutAdapter(runner, {}, (), tuple(_source_outputs(model)))
    for got, want in zip(adapted.run({"image": images[:4]}), expected):
        np.testing.assert_allclose(got, want, atol=0.05)


def _source_outputs(path):
    from edgeopt.model import load_model

    return load_model(path).outputs


def _lstm_onnx(path, seq: int = 6, features: int = 4, hidden: int = 8) -> None:
    """x [seq, 1, features] -> LSTM -> Y [seq, 1, 1, hidden]: time-major, as ONNX LSTMs are."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {"W": (1, 4 * hidden, features), "R": (1, 4 * hidden, hidden),
               "B": (1, 8 * hidden)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype("float32"), n)
             for n, s in weights.items()]
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], name="lstm_1",
                            hidden_size=hidden)
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                       [seq, 1, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [seq, 1, 1, hidden])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_op_onnx2tf_lacks_is_named_with_options(tmp_path, run_cli):
    """Class 6: a dynamically quantized LSTM (DynamicQuantizeLSTM, onnxruntime's own op) is
    refused before onnx2tf runs, naming the op, its node and what to do."""
    from onnxruntime.quantization import quantize_dynamic

    float_model, model = tmp_path / "lstm.onnx", tmp_path / "lstm_dq.onnx"
    _lstm_onnx(float_model)
    quantize_dynamic(str(float_model), str(model), op_types_to_quantize=["LSTM"])
    result = run_cli("inspect", model, "--device", "pixel-npu")
    assert_user_error(result, "op DynamicQuantizeLSTM (node ")
    assert "not supported by the ONNX->TFLite converter" in result.stderr
    assert "--format onnx" in result.stderr and "No module named" not in result.stderr
