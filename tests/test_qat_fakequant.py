"""The fake-quant layer set against the runtime's own int8 arithmetic.

A one-layer Keras model is fake-quantized on the calibration core's ranges and the core
writes its int8 .tflite (ai-edge-quantizer) with those ranges; LiteRT's integer kernels
and the training graph must agree to the last quantization step of the output.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.calibration.config import QuantConfig
from edgeopt.calibration.qat import (
    INPUT_KEY,
    fold_batchnorm,
    keras_values,
    layer_ranges,
    match_tensors,
    qat_model,
    runtime_ranges,
    trained_float,
    unfold_into,
)
from edgeopt.calibration.quantgrid import ActivationGrid
from edgeopt.calibration.session import open_format
from edgeopt.calibration.weights import quantize_rtn
from edgeopt.converters.tf_source import from_keras, run_converter
from edgeopt.quantize import quantize_tflite
from edgeopt.runtime import TFLiteRunner, run_dataset

keras = pytest.importorskip("keras")
CORE = QuantConfig(method="minmax", bias_correction=False, layer_report=False)


def _tflite(model, tmp_path) -> bytes:
    return run_converter(from_keras(model, tmp_path).converter(), "float")


def _conv(rng):
    x = inp = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(6, 3, padding="same", name="conv")(x)
    model = keras.Model(inp, x)
    model.get_layer("conv").set_weights([rng.normal(0, 0.5, (3, 3, 3, 6)).astype("float32"),
                                         rng.normal(0, 0.1, 6).astype("float32")])
    return model, rng.normal(0, 1, (24, 8, 8, 3)).astype("float32")


def _dense(rng):
    x = inp = keras.Input((20,))
    x = keras.layers.Dense(7, name="fc")(x)
    model = keras.Model(inp, x)
    scales = np.linspace(0.05, 2.0, 7, dtype="float32")  # channels of very different size
    model.get_layer("fc").set_weights([rng.normal(0, 1, (20, 7)).astype("float32") * scales,
                                       np.zeros(7, "float32")])
    return model, rng.normal(0, 1, (24, 20)).astype("float32")


def _depthwise(rng):
    x = inp = keras.Input((8, 8, 4))
    x = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
    model = keras.Model(inp, x)
    return model, rng.normal(0, 1, (24, 8, 8, 4)).astype("float32")


def _student_and_int8(model, data, tmp_path):
    """(training graph on the core's ranges, int8 .tflite bytes, the output's grid)."""
    float_tflite = _tflite(model, tmp_path)
    name = TFLiteRunner(float_tflite).input_names[0]
    result = quantize_tflite(float_tflite, {name: data}, CORE)
    ranges = {t: (r["min"], r["max"]) for t, r in result.ranges.items()}
    fmt = open_format("tflite", float_tflite)
    runtime = next(fmt.capture().stream({name: data[:4]}, set(fmt.graph.activations), 4))
    matches = match_tensors(runtime, keras_values(model, data[:4]))
    student = qat_model(fold_batchnorm(model), layer_ranges(matches, ranges))
    output = fmt.graph.outputs[0]
    return student, result.model, ActivationGrid.from_range(*ranges[output]), name


@pytest.mark.parametrize("make", [_conv, _dense, _depthwise])
def test_fake_quant_layer_agrees_with_litert_int8_to_one_step(make, tmp_path):
    model, data = make(np.random.default_rng(0))
    student, int8_model, grid, name = _student_and_int8(model, data, tmp_path)
    fake = np.asarray(student(data, training=False))
    runtime = run_dataset(TFLiteRunner(int8_model), {name: data})[0]
    steps = np.abs(fake - runtime) / grid.scale
    assert steps.max() <= 1.0 + 1e-3
    assert (steps < 0.5).mean() > 0.95  # nearly all values on the very same code
    # and the float model is further away than the fake-quant graph: the noise is modelled
    float_out = np.asarray(model(data))
    assert np.abs(float_out - runtime).mean() > np.abs(fake - runtime).mean()


def test_fake_quant_weights_are_the_cores_codes():
    from edgeopt.calibration.fakequant import fake_quant_weight

    rng = np.random.default_rng(1)
    kernel = rng.normal(0, 1, (3, 3, 4, 5)).astype("float32")
    fake = np.asarray(fake_quant_weight(kernel, (0, 1, 2)))
    canonical = kernel.transpose(3, 2, 0, 1)  # (O, I, kh, kw), as the core holds it
    expected = quantize_rtn(canonical, 8).dequantize().transpose(2, 3, 1, 0)
    np.testing.assert_allclose(fake, expected, rtol=0, atol=1e-6)


def test_gradients_pass_straight_through_and_reach_the_range():
    import tensorflow as tf

    from edgeopt.calibration.fakequant import fake_quant_activation, fake_quant_weight

    x = tf.constant([-3.0, -0.5, 0.2, 0.7, 5.0])
    low, high = tf.Variable(-1.0), tf.Variable(1.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.reduce_sum(fake_quant_activation(x, low, high))
        w = tf.reduce_sum(fake_quant_weight(x[None], (1,)) * 2.0)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [0, 1, 1, 1, 0])
    assert float(tape.gradient(y, low)) == 1.0 and float(tape.gradient(y, high)) == 1.0
    np.testing.assert_allclose(tape.gradient(w, x).numpy(), [2.0] * 5)


def _bn_model(rng):
    x = inp = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, padding="same", use_bias=False, name="conv")(x)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.ReLU(name="relu")(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
    x = keras.layers.BatchNormalization(name="bn2")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    model = keras.Model(inp, keras.layers.Dense(3, name="fc")(x))
    for bn in ("bn", "bn2"):
        layer = model.get_layer(bn)
        c = layer.gamma.shape[0]
        layer.set_weights([rng.uniform(0.5, 2, c), rng.normal(0, 0.3, c), rng.normal(0, 0.3, c),
                           rng.uniform(0.5, 2, c)])
    return model


def test_batchnorm_folds_as_the_converter_folds_it_and_unfolds_back():
    rng = np.random.default_rng(2)
    model = _bn_model(rng)
    data = rng.normal(0, 1, (6, 8, 8, 3)).astype("float32")
    folded = fold_batchnorm(model)
    assert not [la for la in folded.layers if isinstance(la, keras.layers.BatchNormalization)]
    np.testing.assert_allclose(folded(data), model(data), atol=1e-4)
    back = unfold_into(model, folded)
    np.testing.assert_allclose(back(data), model(data), atol=1e-4)


def test_learned_ranges_map_onto_the_runtime_tensors(tmp_path):
    rng = np.random.default_rng(3)
    model = _bn_model(rng)
    data = rng.normal(0, 1, (8, 8, 8, 3)).astype("float32")
    folded = fold_batchnorm(model)
    float_tflite = _tflite(folded, tmp_path)
    fmt = open_format("tflite", float_tflite)
    name = TFLiteRunner(float_tflite).input_names[0]
    runtime = next(fmt.capture().stream({name: data[:2]}, set(fmt.graph.activations), 2))
    matches = match_tensors(runtime, keras_values(folded, data[:2]))
    assert matches[fmt.graph.inputs[0]] == INPUT_KEY
    assert set(matches.values()) >= {"relu", "fc"}  # conv+bn+relu fuse into one tensor
    student = qat_model(folded, {"relu": (0.0, 4.0), INPUT_KEY: (-3.0, 3.0)})
    trained = trained_float(student, folded)
    np.testing.assert_allclose(trained(data), folded(data), atol=1e-5)
    exported = runtime_ranges(matches, {"relu": (0.0, 4.0)})
    assert list(exported.values()) == [(0.0, 4.0)]


@pytest.mark.parametrize("start", [(0.0, 0.05), (-11.0, 11.0)])
def test_a_range_moves_by_a_share_of_its_own_width(start):
    """One Adam step on values clipped above the range moves its high end by the rate
    times the range's width, whatever that width is (absolute steps of one rate wrecked
    magika's small ranges)."""
    import keras
    import tensorflow as tf

    from edgeopt.calibration.fakequant import qat_layers

    quantizer = qat_layers().ActivationQuantizer(*start, name="act")
    x = tf.constant(np.linspace(start[0], start[1] * 2, 64, dtype=np.float32))
    quantizer(x)
    optimizer = keras.optimizers.Adam(1e-2)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(quantizer(x) - x))
    variables = [quantizer.low, quantizer.high]
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    low, high = quantizer.range()
    width = start[1] - start[0]
    assert high - start[1] == pytest.approx(1e-2 * width, rel=1e-3)
    assert low == pytest.approx(start[0], abs=1e-6 * width)
