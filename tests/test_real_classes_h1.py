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


def _dynamic_spatial_keras(path) -> None:
    """mtcnn's PNet in small: a fully convolutional net on [N, ?, ?, 3]."""
    keras = _keras()
    x = keras.Input((None, None, 3), name="image")
    h = keras.layers.Conv2D(6, 3)(x)
    h = keras.layers.PReLU(shared_axes=[1, 2])(h)
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.Conv2D(4, 3)(h)
    keras.Model(x, keras.layers.Softmax(axis=3, name="prob")(h)).save(path)


def test_dynamic_keras_input_takes_the_data_shape(tmp_path, run_cli):
    """Class 5: a dynamic spatial Keras input is built for the calibration data's shape
    (said in the manifest notes), and the .tflite it writes is static and runs."""
    from edgeopt.runtime import TFLiteRunner

    model, data, out = tmp_path / "pnet.keras", tmp_path / "calib.npz", tmp_path / "out"
    _dynamic_spatial_keras(model)
    images = np.random.default_rng(1).random((40, 20, 20, 3), dtype=np.float32)
    np.savez(data, image=images)
    result = run_cli("build", model, "--device", "pixel-npu", "--calib", data, "-o", out,
                     "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert any("is dynamic: built for [1, 20, 20, 3]" in n for n in manifest["notes"])
    runner = TFLiteRunner(out / manifest["model"]["file"], ["image"])
    assert [int(d) for d in runner.input_details[0]["shape_signature"]] == [1, 20, 20, 3]
    assert runner.run({"image": images[:2]})[0].shape == (2, 7, 7, 4)


def test_dynamic_keras_input_without_shape_is_one_clear_error(tmp_path, run_cli):
    """Class 5: with no shape to take (inspect, no --input-shape) the user is told which
    flag fixes it, instead of LiteRT failing to prepare the converted model."""
    model = tmp_path / "pnet.keras"
    _dynamic_spatial_keras(model)
    assert_user_error(run_cli("inspect", model), "--input-shape image:1,?,?,3")
    result = run_cli("inspect", model, "--input-shape", "image:1,24,24,3", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["inputs"][0]["shape"] == [1, 24, 24, 3]


def _dynamic_onnx(path) -> None:
    """x [N, 3, ?, ?] -> Conv -> Relu: an NCHW detector backbone with dynamic H and W."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype("float32"), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv_1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu_1")]
    graph = helper.make_graph(
        nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                     ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H", "W"])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_inspect_device_on_dynamic_onnx_with_input_shape(tmp_path, run_cli):
    """Class 5: `inspect --device --input-shape` converts a dynamic ONNX model without
    sample images (onnx2tf's own check gets seeded stand-ins, nothing is downloaded)."""
    model = tmp_path / "dyn.onnx"
    _dynamic_onnx(model)
    result = run_cli("inspect", model, "--device", "pixel-npu", "--input-shape",
                     "x:1,3,16,16", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["inputs"][0]["shape"] == [1, 3, 16, 16]
    assert {op["op"] for op in record["placement"]["ops"]} >= {"CONV_2D"}


def _scalar_and_state_onnx(path) -> None:
    """y = (x @ W) * gain, state' = state + 1: a scalar input (silero-vad's `sr`) and a
    recurrent state that counts samples on axis 1 ([2, N, 8], silero-vad's `state`)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 3)).astype("float32"), "w"),
        numpy_helper.from_array(np.array(1.0, "float32"), "one")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Mul", ["m", "gain"], ["y"]),
             helper.make_node("Add", ["state", "one"], ["state_out"])]
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "stream",
        [helper.make_tensor_value_info("x", f32, ["N", 4]),
         helper.make_tensor_value_info("state", f32, [2, "N", 8]),
         helper.make_tensor_value_info("gain", f32, [])],
        [helper.make_tensor_value_info("y", f32, ["N", 3]),
         helper.make_tensor_value_info("state_out", f32, [2, "N", 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_scalar_and_state_inputs_load_and_run(tmp_path):
    """Class 5: a rank-0 input takes the one value the data gives for every sample, and a
    state [2, N, 8] is split by its own sample axis: edgeopt's outputs equal one direct
    onnxruntime run on the whole batch (the old loader refused the scalar)."""
    import onnxruntime as ort

    from edgeopt.data import DataSpec, load_data
    from edgeopt.model import load_model
    from edgeopt.runtime import make_runner, run_dataset

    model, data = tmp_path / "stream.onnx", tmp_path / "calib.npz"
    _scalar_and_state_onnx(model)
    rng = np.random.default_rng(2)
    raw = {"x": rng.random((10, 4), dtype=np.float32),
           "state": rng.random((2, 10, 8), dtype=np.float32), "gain": np.float32(3.0)}
    np.savez(data, **raw)
    handle = load_model(model)
    dataset = load_data(DataSpec(str(data)), handle.inputs, hold_out=False)[0]
    assert dataset.count == 10 and dataset.arrays["state"].shape == (10, 2, 8)
    assert any("'gain' is a scalar input: 3.0" in n for n in dataset.notes)
    y, state = run_dataset(make_runner(handle), dataset.arrays)
    direct = ort.InferenceSession(str(model)).run(None, {**raw, "gain": np.array(3.0, "f4")})
    np.testing.assert_allclose(y, direct[0], rtol=1e-6)
    np.testing.assert_allclose(state, np.moveaxis(direct[1], 1, 0), rtol=1e-6)


def _time_major_onnx(path, steps: int = 6) -> None:
    """x [1, T, 4] -> MatMul -> Transpose -> y [T, 1, 5]: a CTC recognizer's time-major
    output (ddddocr's [T, N, C]), batch on axis 1."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 5)).astype("float32"), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul_1"),
             helper.make_node("Transpose", ["m"], ["y"], name="time_major", perm=[1, 0, 2])]
    graph = helper.make_graph(
        nodes, "ctc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, steps, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [steps, 1, 5])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_time_major_output_compared_per_sample(tmp_path, run_cli):
    """Class 1 (ddddocr): an output whose batch is not axis 0 is put samples-first by
    every runner, so the parity check compares each sample with itself (the old code
    sliced time steps as if they were samples: shape (60, 1, C) against (3, 1, C))."""
    model, data, out = tmp_path / "ctc.onnx", tmp_path / "calib.npz", tmp_path / "out"
    _time_major_onnx(model)
    np.savez(data, x=np.random.default_rng(3).random((20, 6, 4), dtype=np.float32))
    result = run_cli("build", model, "--device", "pixel-npu", "--calib", data, "-o", out,
                     "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["conversion"]["parity"]["cosine"] > 0.9999
    assert manifest["conversion"]["parity"]["samples"] == manifest["data"]["evaluation_samples"]


def _dynamic_tflite(path) -> None:
    """A .tflite on a [-1, -1] signal whose placeholder shape [1, 1] its CONV_2D cannot
    prepare (openWakeWord's melspectrogram)."""
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import tensorflow as tf

    kernel = tf.constant(np.random.default_rng(0).standard_normal((1, 5, 1, 2)), tf.float32)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32, name="signal")])
    def frames(signal):
        x = tf.reshape(signal, [1, 1, -1, 1])
        return tf.nn.relu(tf.nn.conv2d(x, kernel, strides=[1, 1, 1, 1], padding="VALID"))

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [frames.get_concrete_function()], frames)
    path.write_bytes(converter.convert())


def test_dynamic_tflite_made_static_at_the_data_shape(tmp_path, run_cli):
    """Class 5: a .tflite that does not prepare at its placeholder shape loads, is fixed
    to the data's shape, and the artifact is static and runs."""
    from edgeopt.runtime import TFLiteRunner

    model, data, out = tmp_path / "mel.tflite", tmp_path / "calib.npz", tmp_path / "out"
    _dynamic_tflite(model)
    signal = np.random.default_rng(4).random((20, 40), dtype=np.float32)
    from edgeopt.model import load_model

    name = load_model(model).inputs[0].name
    np.savez(data, **{name: signal})
    result = run_cli("build", model, "--device", "pixel-npu", "--calib", data, "-o", out,
                     "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    runner = TFLiteRunner(out / manifest["model"]["file"], [name])
    assert [int(d) for d in runner.input_details[0]["shape_signature"]] == [1, 40]
    assert runner.run({name: signal[:2]})[0].shape == (2, 1, 36, 2)


def test_dynamic_tflite_quantized_at_the_data_shape(tmp_path, run_cli):
    """Class 5 for `quantize`: the same .tflite is fixed to the data's shape as build has it
    (it ended in "does not prepare at its placeholder shape" with data of a fixed shape)."""
    from edgeopt.model import load_model
    from edgeopt.runtime import TFLiteRunner

    model, data, out = tmp_path / "mel.tflite", tmp_path / "calib.npz", tmp_path / "q.tflite"
    _dynamic_tflite(model)
    name = load_model(model).inputs[0].name
    np.savez(data, **{name: np.random.default_rng(4).random((20, 40), dtype=np.float32)})
    result = run_cli("quantize", model, "--scheme", "w8a8", "--calib", data, "-o", out)
    assert result.exit_code == 0, result.stderr
    runner = TFLiteRunner(out, [name])
    assert [int(d) for d in runner.input_details[0]["shape_signature"]] == [1, 40]
