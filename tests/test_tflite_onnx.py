"""`edgeopt build --format onnx` from .tflite and Keras sources (converters/tflite_onnx)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import assert_user_error


def _keras():
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import keras

    return keras


def _session(path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _run_onnx(path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """One sample per run: the converted graph has batch 1, as the .tflite it came from."""
    session = _session(path)
    count = len(next(iter(feeds.values())))
    runs = [session.run(None, {k: v[i:i + 1] for k, v in feeds.items()}) for i in range(count)]
    return [np.concatenate(outs) for outs in zip(*runs)]


def _build(run_cli, model, calib, out, *flags):
    result = run_cli("build", model, "--format", "onnx", "--device", "host-cpu", "--calib",
                     calib, "-o", out, "--json", *flags)
    assert result.exit_code == 0, result.stderr
    return json.loads((out / "manifest.json").read_text())


def _images(path, count: int = 24, shape=(16, 16, 3), seed: int = 1) -> np.ndarray:
    x = np.random.default_rng(seed).random((count, *shape), dtype=np.float32)
    np.savez(path, image=x)
    return x


@pytest.mark.slow  # the calibration core's w8a8 search: ~50 s on a loaded host
def test_keras_source_builds_an_onnx_that_onnxruntime_runs(run_cli, tmp_path, tiny_keras_path):
    """The w8a8 .onnx of a Keras model: onnxruntime loads it, it takes the source's input
    name and layout, has QDQ nodes, and follows the Keras model (its probabilities within
    0.02: the tiny net's are near-uniform, so top-1 says nothing here)."""
    keras = _keras()
    x = _images(tmp_path / "calib.npz")
    manifest = _build(run_cli, tiny_keras_path, tmp_path / "calib.npz", tmp_path / "dist")
    conversion = manifest["conversion"]
    assert "TFLiteConverter (Keras) + tf2onnx" in conversion["converter"]
    assert conversion["parity"]["cosine"] > 0.9999 and conversion["input_layout_changes"] == {}
    assert manifest["model"]["format"] == "onnx" and manifest["recipe"]["scheme"] == "w8a8"
    assert manifest["source"]["format"] == "keras"
    artifact = tmp_path / "dist" / "tiny.onnx"
    import onnx

    ops = {n.op_type for n in onnx.load(str(artifact)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    assert [i.name for i in _session(artifact).get_inputs()] == ["image"]
    got = _run_onnx(artifact, {"image": x})[0]
    want = keras.models.load_model(tiny_keras_path).predict(x, verbose=0)
    assert got.shape == want.shape
    error = np.abs(got - want).max()
    assert error < 0.02, (error, got[:2], want[:2])


def test_tflite_source_float_onnx_equals_litert(run_cli, tmp_path, tiny_float_tflite):
    """--scheme float ships the converted graph itself: equal to the .tflite under LiteRT."""
    from edgeopt.runtime import TFLiteRunner

    x = _images(tmp_path / "calib.npz")
    manifest = _build(run_cli, tiny_float_tflite, tmp_path / "calib.npz", tmp_path / "dist",
                      "--scheme", "float")
    assert manifest["conversion"]["converter"].startswith("tf2onnx")
    assert "parity checked against the source in LiteRT" in manifest["conversion"]["note"]
    (artifact,) = (tmp_path / "dist").glob("*.onnx")
    runner = TFLiteRunner(tiny_float_tflite.read_bytes())
    want = runner.run({runner.input_names[0]: x})[0]
    got = _run_onnx(artifact, {_session(artifact).get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(got, want, atol=1e-5)


def _two_outputs(path):
    """mtcnn's RNet in small: a box head (4) and a score head (2), which the TFLite
    converter writes in another order than Keras gives them."""
    keras = _keras()
    keras.utils.set_random_seed(3)
    x = keras.Input((12, 12, 3), name="face")
    h = keras.layers.Conv2D(6, 3, activation="relu")(x)
    h = keras.layers.Flatten()(h)
    score = keras.layers.Dense(2, activation="softmax", name="score")(h)
    box = keras.layers.Dense(4, name="box")(h)
    model = keras.Model(x, [box, score])
    model.save(path)
    return model


def test_multi_output_keras_keeps_its_output_names_and_order(run_cli, tmp_path):
    model = _two_outputs(tmp_path / "rnet.keras")
    x = np.random.default_rng(0).random((20, 12, 12, 3), dtype=np.float32)
    np.savez(tmp_path / "calib.npz", face=x)
    manifest = _build(run_cli, tmp_path / "rnet.keras", tmp_path / "calib.npz",
                      tmp_path / "dist", "--scheme", "float")
    assert [o["name"] for o in manifest["outputs"]] == ["box", "score"]
    artifact = tmp_path / "dist" / "rnet.onnx"
    assert [o.name for o in _session(artifact).get_outputs()] == ["box", "score"]
    got = _run_onnx(artifact, {"face": x})
    for g, w in zip(got, model.predict(x, verbose=0)):
        np.testing.assert_allclose(g, w, atol=1e-4)


def _int8_tflite(path, keras_path):
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import tensorflow as tf

    model = _keras().models.load_model(keras_path)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.default_rng(0)
    converter.representative_dataset = lambda: (
        [rng.random((1, 16, 16, 3), dtype=np.float32)] for _ in range(8))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    path.write_bytes(converter.convert())
    return path


def _stateful_tflite(path):
    """A streaming model: it adds each input to a running sum kept in a resource variable."""
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import tensorflow as tf

    class Accumulate(tf.Module):
        def __init__(self):
            super().__init__()
            self.total = tf.Variable(tf.zeros([1, 4]))

        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
        def __call__(self, x):
            self.total.assign_add(x)
            return {"y": self.total * 1.0}

    module = Accumulate()
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [module.__call__.get_concrete_function()], module)
    converter.experimental_enable_resource_variables = True
    path.write_bytes(converter.convert())
    return path


def test_integer_tflite_is_refused_with_one_line(run_cli, tmp_path, tiny_keras_path):
    model = _int8_tflite(tmp_path / "int8.tflite", tiny_keras_path)
    _images(tmp_path / "calib.npz")
    out = tmp_path / "dist"
    result = run_cli("build", model, "--format", "onnx", "--device", "host-cpu", "--calib",
                     tmp_path / "calib.npz", "-o", out)
    assert_user_error(result, "already quantized (w8a8")
    assert "--format tflite" in result.stderr and not out.exists()


def test_streaming_tflite_is_refused_with_one_line(run_cli, tmp_path):
    model = _stateful_tflite(tmp_path / "stream.tflite")
    out = tmp_path / "dist"
    result = run_cli("build", model, "--format", "onnx", "--device", "host-cpu", "--calib",
                     "random", "-o", out)
    assert_user_error(result, "keeps state between invokes")
    assert "VAR_HANDLE" in result.stderr and not out.exists()


def test_a_tf2onnx_failure_is_one_conversion_error(tmp_path):
    """Whatever tf2onnx raises (ValueError, IndexError...) becomes one ConversionError."""
    from edgeopt.converters.tflite_onnx import _tf2onnx
    from edgeopt.errors import ConversionError

    with pytest.raises(ConversionError, match="tf2onnx could not convert the float .tflite"):
        _tf2onnx(b"TFL3 not a model", tmp_path / "broken.tflite")


def _saved_model(folder):
    """A SavedModel with a dynamic batch: y = relu(x @ w + b), on [None, 6]."""
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import tensorflow as tf

    rng = np.random.default_rng(4)

    class Dense(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(rng.normal(0, 0.5, (6, 3)).astype(np.float32))
            self.b = tf.Variable(rng.normal(0, 0.1, 3).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.nn.relu(x @ self.w + self.b)}

    module = Dense()
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.__call__})
    return module


def test_saved_model_source_float_onnx_equals_tensorflow(run_cli, tmp_path):
    module = _saved_model(tmp_path / "sm")
    x = np.random.default_rng(5).random((20, 6), dtype=np.float32)
    np.savez(tmp_path / "calib.npz", x=x)
    manifest = _build(run_cli, tmp_path / "sm", tmp_path / "calib.npz", tmp_path / "dist",
                      "--scheme", "float")
    assert "TFLiteConverter (SavedModel) + tf2onnx" in manifest["conversion"]["converter"]
    assert manifest["conversion"]["batch_fixed_to_1"] is True
    (artifact,) = (tmp_path / "dist").glob("*.onnx")
    assert [i.name for i in _session(artifact).get_inputs()] == ["x"]
    got = _run_onnx(artifact, {"x": x})[0]
    np.testing.assert_allclose(got, module(x)["y"].numpy(), atol=1e-5)
