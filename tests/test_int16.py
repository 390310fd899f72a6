"""int16 activations (TFLite 16x8): the w8a16 scheme, the collapse rescue and the budget
search's int16 step, on tiny Keras models checked in LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.calibration.config import QuantConfig
from edgeopt.delegates.int16 import int16_support
from edgeopt.delegates.registry import delegate_names
from edgeopt.errors import ConfigError
from edgeopt.quantize import quantize_tflite
from edgeopt.validate import compare


def _float_tflite(model) -> bytes:
    import tensorflow as tf

    return tf.lite.TFLiteConverter.from_keras_model(model).convert()


def _head_model(ratio: float):
    """Conv -> one 1x1 conv writing two channels `ratio` apart in magnitude (a landmark
    head: coordinates and a flag from one op)."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3), name="image")
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    head = keras.layers.Conv2D(2, 1, name="head")
    outputs = head(x)
    kernel, bias = head.get_weights()
    kernel[..., 0] *= ratio
    head.set_weights([kernel, bias])
    return keras.Model(inputs, outputs)


def _images(count: int, seed: int, shape=(8, 8, 3)) -> np.ndarray:
    return np.random.default_rng(seed).random((count, *shape), dtype=np.float32)


def _details(model: bytes):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model)
    interpreter.allocate_tensors()
    tensors = {d["index"]: d for d in interpreter.get_tensor_details()}
    return [(op["op_name"], [tensors[i] for i in op["inputs"] if i >= 0],
             [tensors[i] for i in op["outputs"]]) for op in interpreter._get_ops_details()]


@pytest.fixture(scope="module")
def tiny(tiny_float_tflite):
    images = _images(48, 1, (16, 16, 3))
    return tiny_float_tflite.read_bytes(), {"image": images[:32]}, {"image": images[32:]}


def test_w8a16_writes_int16_activations_with_zero_point_0_and_int64_bias(tiny):
    model, calib, evaluation = tiny
    config = QuantConfig(scheme="w8a16", layer_report=False, isolate_layers=1)
    result = quantize_tflite(model, calib, config, evaluation)
    weighted = [(name, ins, outs) for name, ins, outs in _details(result.model)
                if name in ("CONV_2D", "DEPTHWISE_CONV_2D")]
    assert weighted
    for _, ins, outs in weighted:
        assert ins[0]["dtype"] == np.int16 and outs[0]["dtype"] == np.int16
        assert outs[0]["quantization"][1] == 0            # symmetric: zero point 0
        assert ins[1]["dtype"] == np.int8                 # int8 weights
        assert ins[2]["dtype"] == np.int64                # 16x8 bias
    assert result.scheme == "w8a16" and not result.float_ops
    int8 = quantize_tflite(model, calib, config.replace(scheme="w8a8"), evaluation)
    assert result.validation["sqnr_db"] > int8.validation["sqnr_db"] + 10


@pytest.mark.parametrize("device,slow", [("pixel-cpu", True), ("snapdragon-npu", False)])
def test_int16_ops_on_a_cpu_are_costed_on_reference_kernels_and_said(tiny, device, slow):
    from edgeopt.devices.estimator import estimate
    from edgeopt.devices.profile import load_profile
    from edgeopt.tflite_reader import read_tflite

    model, calib, _ = tiny
    config = QuantConfig(method="minmax", layer_report=False, isolate_layers=1)
    found = {}
    for scheme in ("w8a8", "w8a16"):
        content = quantize_tflite(model, calib, config.replace(scheme=scheme)).model
        found[scheme] = estimate(read_tflite(content), load_profile(device), model=content)
    noted = any("reference 16x8 kernels" in n for n in found["w8a16"].notes)
    assert noted == slow
    assert not any("16x8" in n for n in found["w8a8"].notes)
    if slow:
        assert found["w8a16"].latency_s > 2 * found["w8a8"].latency_s


def test_w8a16_refuses_integer_model_io():
    with pytest.raises(ConfigError, match="int16"):
        QuantConfig(scheme="w8a16", io_dtype="int8")


def test_an_output_that_collapses_in_int8_gets_int16_on_the_op_writing_it():
    model = _float_tflite(_head_model(600.0))
    images = _images(48, 2)
    calib, evaluation = {"image": images[:32]}, {"image": images[32:]}
    result = quantize_tflite(model, calib, QuantConfig(layer_report=False, isolate_layers=1),
                             evaluation)
    head = [name for name, ins, outs in _details(result.model)
            if name == "CONV_2D" and outs[0]["dtype"] == np.int16]
    assert head, "the head was left in int8"
    assert "int16" in result.precision_per_layer.values()
    assert not result.validation["collapsed"]
    assert any("int16 activations" in w and "reference kernels" in w for w in result.warnings)
    # the same plan in int8 (the core before the rescue) collapses on this model
    from edgeopt.calibration.tflite_format import TFLiteFormat

    fmt = TFLiteFormat(model)
    reference = fmt.run(model, evaluation)
    aeq_int8 = _aeq_int8(model, calib["image"])
    assert compare(reference, fmt.run(aeq_int8, evaluation)).collapsed


def _aeq_int8(model: bytes, images: np.ndarray) -> bytes:
    from edgeopt.calibration.tflite_aeq import full_integer

    return full_integer(model, {"image": images}, "float32")


def test_budget_search_raises_layers_to_int16_only_where_allowed(tiny):
    model, calib, evaluation = tiny
    config = QuantConfig(scheme="w8a8", method="minmax", accuracy_budget=55.0,
                         layer_report=False, isolate_layers=2)
    with_int16 = quantize_tflite(model, calib, config, evaluation)
    raised = {r["to"] for r in with_int16.search["raised"]}
    assert "int16" in raised and with_int16.validation["sqnr_db"] >= 55.0
    without = quantize_tflite(model, calib, config.replace(int16_search=False), evaluation)
    assert "int16" not in {r["to"] for r in without.search["raised"]}
    assert "int16" not in without.precision_per_layer.values()


def test_int16_data_names_every_delegate_with_a_source():
    for name in delegate_names():
        support = int16_support(name)
        assert support.source and "not listed" not in support.source, name
    assert int16_support("qnn-htp").runs and int16_support("ethos-u").runs
    assert not int16_support("xnnpack").runs and not int16_support("google-tensor").runs
    assert not int16_support("/some/external_delegate.so").runs
