"""Integer model IO on a graph whose output is also read inside it by an op kept float.

ai-edge-quantizer hands such a reader the output's DEQUANTIZE; the IO change (TFLite's
modify_model_interface) turns that DEQUANTIZE into a QUANTIZE to uint8, and LiteRT refused
the model (basic-pitch's EXPAND_DIMS on coral-usb). Afterwards the float readers get a
DEQUANTIZE of their own.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def _two_heads_tflite() -> bytes:
    """x -> Dense 'head' (an output) -> Reshape -> Flatten -> Dense 'tail' (an output)."""
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    x = keras.Input((4,), name="x")
    head = keras.layers.Dense(8, activation="relu", name="head")(x)
    tail = keras.layers.Dense(3, name="tail")(
        keras.layers.Flatten()(keras.layers.Reshape((8, 1))(head)))
    model = keras.Model(x, [head, tail])
    return tf.lite.TFLiteConverter.from_keras_model(model).convert()


def _quantized_with_float_reader(float_model: bytes) -> bytes:
    from ai_edge_quantizer import quantizer, recipe

    from edgeopt.calibration.tflite_aeq import _signature_samples

    rules = list(recipe.static_wi8_ai8())
    for operation in ("INPUT", "OUTPUT", "RESHAPE"):  # float IO, as edgeopt's writer asks
        rules.append({"regex": ".*", "operation": operation, "algorithm_key": "no_quantize",
                      "op_config": {}})
    qt = quantizer.Quantizer(bytearray(float_model), rules)
    samples = {"x": np.random.default_rng(1).standard_normal((16, 4)).astype(np.float32)}
    calibration = qt.calibrate(_signature_samples(float_model, samples))
    return bytes(qt.quantize(calibration).quantized_model)


def _readers_of_outputs(model: bytes) -> list[str]:
    """The ops that read a tensor the graph outputs."""
    from edgeopt import tflite_edit

    unpacked = tflite_edit.unpack(model)
    graph = unpacked.subgraphs[0]
    outputs = {int(i) for i in graph.outputs}
    return [tflite_edit.opcode_name(unpacked, op)[0] for op in graph.operators
            if outputs & {int(i) for i in op.inputs}]


def _tail(model: bytes, x: np.ndarray) -> np.ndarray:
    """The (1, 3) output for float input `x`, quantized in and dequantized out as the IO asks."""
    from edgeopt.model import tflite_interpreter

    interpreter = tflite_interpreter(model)
    given = interpreter.get_input_details()[0]
    if given["dtype"] != np.float32:
        scale, zero = given["quantization"]
        x = np.clip(np.round(x / scale + zero), 0, 255).astype(given["dtype"])
    interpreter.set_tensor(given["index"], x)
    interpreter.invoke()
    detail = next(d for d in interpreter.get_output_details() if tuple(d["shape"]) == (1, 3))
    value = interpreter.get_tensor(detail["index"]).astype(np.float32)
    scale, zero = detail["quantization"]
    return (value - zero) * scale if detail["dtype"] != np.float32 else value


def test_an_output_read_by_a_float_op_keeps_working_with_uint8_io(monkeypatch):
    from edgeopt.calibration import tflite_aeq

    quantized = _quantized_with_float_reader(_two_heads_tflite())
    assert "RESHAPE" in _readers_of_outputs(quantized)  # the structure under test
    x = np.random.default_rng(2).standard_normal((1, 4)).astype(np.float32)
    reference = _tail(quantized, x)  # float IO: the same integer graph inside

    fixed = tflite_aeq.set_io_dtype(quantized, "uint8")
    assert tflite_aeq.dequantize_for_float_readers(fixed) == fixed  # nothing left to do
    step = np.abs(reference).max() / 127
    assert np.abs(_tail(fixed, x) - reference).max() <= 3 * step

    # without the readers' own DEQUANTIZE the float RESHAPE reads uint8 bytes as floats
    monkeypatch.setattr(tflite_aeq, "dequantize_for_float_readers", lambda model: model)
    broken = tflite_aeq.set_io_dtype(quantized, "uint8")
    try:
        wrong = _tail(broken, x)
    except Exception:  # LiteRT refuses it (basic-pitch's EXPAND_DIMS checks the scales)
        return
    assert not np.allclose(wrong, reference, atol=3 * step)
