"""Equalizing the tensor between a SeparableConv2D's halves before QAT.

The depthwise half's output channels are scaled to the widest one's reach and the 1x1
half's input rows divided by the same factors: the float model computes the same, every
channel spans the same range, and the per-tensor int8 grid of that tensor rounds the
model's output less (a fake-quantized copy of a seeded tiny model, channels 20x apart).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgeopt.calibration.fakequant import fake_quant_activation
from edgeopt.calibration.qat import (
    SEPARABLE_SUFFIX,
    equalize_separable,
    merge_separable,
    split_separable,
)

keras = pytest.importorskip("keras")

DW = f"sep{SEPARABLE_SUFFIX}"


def _model(rng):
    """A separable conv whose depthwise channels differ 20x in size, then a head."""
    x = inp = keras.Input((8, 8, 4), name="image")
    x = keras.layers.SeparableConv2D(6, 3, padding="same", depth_multiplier=2, name="sep")(x)
    x = keras.layers.ReLU(name="relu")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    model = keras.Model(inp, keras.layers.Dense(3, name="fc")(x))
    sep = model.get_layer("sep")
    depthwise, pointwise, bias = (rng.normal(0, 1, w.shape).astype("float32")
                                  for w in sep.weights)
    depthwise *= np.geomspace(0.05, 1.0, 8, dtype="float32").reshape(1, 1, 4, 2)
    sep.set_weights([depthwise, pointwise, bias])
    model.get_layer("fc").set_weights([rng.normal(0, 1, (6, 3)).astype("float32"),
                                       np.zeros(3, "float32")])
    return model


def _data(rng, count=64):
    return rng.normal(0, 1, (count, 8, 8, 4)).astype("float32")


def _between(split, data):
    return np.asarray(keras.Model(split.inputs, split.get_layer(DW).output)(data))


def _rounded_between(split, data, value_range):
    """The model's output with the tensor between the halves on its int8 grid."""
    head = keras.Sequential([split.get_layer(n) for n in ("sep", "relu", "gap", "fc")])
    rounded = fake_quant_activation(_between(split, data), *value_range)
    return np.asarray(head(rounded))


def test_equalizing_keeps_the_float_model_and_evens_the_channels():
    rng = np.random.default_rng(0)
    model, data = _model(rng), _data(rng)
    split = split_separable(model)
    reach = np.abs(_between(split, data)).reshape(-1, 8).max(0)
    assert reach.max() / reach.min() > 10
    ranges = equalize_separable(split, data)
    np.testing.assert_allclose(split(data), model(data), rtol=1e-4, atol=1e-5)
    between = _between(split, data)
    np.testing.assert_allclose(np.abs(between).reshape(-1, 8).max(0), reach.max(), rtol=1e-5)
    assert ranges == {DW: pytest.approx((float(between.min()), float(between.max())))}
    # the weights go back into the SeparableConv2D (the ONNX writer's path) unchanged
    np.testing.assert_allclose(merge_separable(model, split)(data), model(data), rtol=1e-4,
                               atol=1e-5)


def test_equalizing_shrinks_the_output_error_of_the_rounded_tensor():
    rng = np.random.default_rng(1)
    model, data = _model(rng), _data(rng, 128)
    reference = np.asarray(model(data))
    errors = []
    for equalize in (False, True):
        split = split_separable(model)
        values = _between(split, data)
        found = equalize_separable(split, data) if equalize else {}
        value_range = found.get(DW, (float(values.min()), float(values.max())))
        rounded = _rounded_between(split, data, value_range)
        errors.append(float(np.sqrt(np.mean((rounded - reference) ** 2))))
    assert errors[1] < 0.5 * errors[0]


def test_a_depthwise_conv_with_an_activation_before_the_1x1_is_left_alone():
    rng = np.random.default_rng(2)
    x = inp = keras.Input((8, 8, 4))
    x = keras.layers.DepthwiseConv2D(3, use_bias=False, name=DW)(x)
    x = keras.layers.ReLU(name="relu")(x)      # scaling a channel no longer cancels out
    model = keras.Model(inp, keras.layers.Conv2D(2, 1, name="sep")(x))
    before = [w.copy() for w in model.get_weights()]
    assert equalize_separable(model, _data(rng, 8)) == {}
    for old, new in zip(before, model.get_weights()):
        np.testing.assert_array_equal(old, new)


def _depthwise_reach(content: bytes, data: np.ndarray) -> np.ndarray:
    """Per-channel reach of the DEPTHWISE_CONV_2D output of a .tflite in LiteRT."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=content, experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    op = next(o for o in it._get_ops_details() if o["op_name"] == "DEPTHWISE_CONV_2D")
    detail = {d["index"]: d for d in it.get_tensor_details()}[op["outputs"][0]]
    scale, zero = detail["quantization"]
    source = it.get_input_details()[0]
    found = []
    for x in data:
        feed = x[None]
        if source["dtype"] == np.int8:
            s, z = source["quantization"]
            feed = np.clip(np.round(feed / s + z), -128, 127).astype(np.int8)
        it.set_tensor(source["index"], feed)
        it.invoke()
        found.append((it.get_tensor(detail["index"]).astype(np.float32) - zero) * scale)
    return np.abs(np.concatenate(found)).reshape(-1, 8).max(0)


@pytest.mark.slow
def test_the_int8_artifact_carries_the_equalized_channels(run_cli, tmp_path):
    rng = np.random.default_rng(3)
    model, data = _model(rng), _data(rng, 48)
    model.save(tmp_path / "m.keras")
    np.savez(tmp_path / "d.npz", image=data)
    out = tmp_path / "q.tflite"
    result = run_cli("quantize", tmp_path / "m.keras", "--calib", tmp_path / "d.npz", "--qat",
                     "--epochs", "1", "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["qat"]["ran"]
    reach = _depthwise_reach(out.read_bytes(), data)
    assert reach.max() / reach.min() < 1.5     # the float model's channels: 20x apart
