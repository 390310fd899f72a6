"""Fake quantization for training: the writers' integer grids in a Keras forward pass.

Two quantizers, each the grid the runtime will use:

* weights: symmetric int8 per output channel, `scale = max|w| / 127`, codes in
  [-127, 127] -- what `weights.quantize_rtn` gives and ai-edge-quantizer / onnxruntime
  store;
* activations: asymmetric int8 per tensor, the grid of `quantgrid.ActivationGrid` (a
  step and an integer zero point in [-128, 127], so the range holds 0), started from the
  calibration core's range. Two ways to learn it (`ACTIVATION_QUANTIZERS`):

  - "lsq": learned step size (Esser et al., 2019, "Learned Step Size
    Quantization"). The variables are the step (held as a multiple of its start, so one
    learning rate moves every layer's step by the same share) and the zero point (in
    codes, rounded in the forward pass). The step gets the gradient of the rounding
    residual `round(x/s) - x/s` from every in-range value and `qmin - z` / `qmax - z`
    from the clipped ones, both scaled by LSQ's `1/sqrt(N * Qp)` (N: values per sample,
    Qp = 255 steps); the zero point gets the clipped values' gradient (LSQ+'s offset).
    The step can shrink toward a finer grid, not only widen.
  - "minmax_vars" (the default, `DEFAULT_ACTIVATION_QUANTIZER`): TensorFlow's
    FakeQuantWithMinMaxVars on two range variables (low, high): the range gets only the
    clipped values' gradient (PACT-style), so it can widen but never shrink toward a finer
    step. It stays the default because LSQ measured no better on fer_emotion
    (BENCHMARKS.md, QAT, session 10: 13 flips of 300 against 9).

Gradients pass straight through the rounding of the values (Bengio et al., 2013).

    >>> layers = qat_layers()                                     # doctest: +SKIP
    >>> q = layers.Quantized(conv, output_range=(-1.0, 3.0), activation_quantizer="lsq")
"""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace
from typing import Any

import numpy as np

from edgeopt.calibration.quantgrid import ActivationGrid

ACTIVATION_QUANTIZERS = ("lsq", "minmax_vars")
DEFAULT_ACTIVATION_QUANTIZER = "minmax_vars"
QMIN, QMAX = -128, 127     # int8 activations: asymmetric, the writers' grid
WEIGHT_QMAX = 127          # int8 symmetric weights: [-127, 127] (TFLite, onnxruntime)
MIN_SCALE = 1e-12          # weights.MIN_SCALE: an all-zero channel keeps a finite scale
MIN_WIDTH = 1e-6           # an activation range never collapses to a point


def fake_quant_weight(kernel: Any, reduce_axes: tuple[int, ...]) -> Any:
    """`kernel` rounded to int8 per channel (the axes not in `reduce_axes`), straight-through."""
    import tensorflow as tf

    absmax = tf.reduce_max(tf.abs(kernel), axis=reduce_axes, keepdims=True)
    scale = tf.maximum(absmax / WEIGHT_QMAX, MIN_SCALE)
    rounded = tf.clip_by_value(tf.round(kernel / scale), -WEIGHT_QMAX, WEIGHT_QMAX) * scale
    return kernel + tf.stop_gradient(rounded - kernel)


def fake_quant_activation(x: Any, low: Any, high: Any) -> Any:
    """`x` on the int8 grid of [low, high] (widened to hold 0), range gradients included."""
    import tensorflow as tf

    lo = tf.minimum(low, 0.0)
    hi = tf.maximum(tf.maximum(high, 0.0), lo + MIN_WIDTH)
    return tf.quantization.fake_quant_with_min_max_vars(x, lo, hi, num_bits=8,
                                                        narrow_range=False)


def _scaled_gradient(value: Any, factor: Any) -> Any:
    """`value` in the forward pass, its gradient times `factor` (LSQ's gradient scale)."""
    import tensorflow as tf

    return value * factor + tf.stop_gradient(value - value * factor)


def lsq_fake_quant(x: Any, step: Any, zero_point: Any) -> Any:
    """`x` on the int8 grid of `step` and the zero point `round(zero_point)` (clipped to
    [-128, 127]): `(clip(round(x/s) + z, -128, 127) - z) * s`, `ActivationGrid.fake_quant`.
    LSQ gradients: x straight through where in range; s the rounding residual (in range)
    or the clip bound (outside); z -s where clipped; s and z scaled by 1/sqrt(N * Qp)."""
    import tensorflow as tf

    values = 1
    for dim in x.shape[1:]:
        values *= int(dim) if dim is not None else 1
    factor = 1.0 / (max(values, 1) * (QMAX - QMIN)) ** 0.5
    s = _scaled_gradient(tf.maximum(step, MIN_SCALE), factor)
    z = _scaled_gradient(tf.clip_by_value(zero_point, float(QMIN), float(QMAX)), factor)
    z = z + tf.stop_gradient(tf.round(z) - z)                      # an integer code
    v = tf.minimum(tf.maximum(x / s, QMIN - z), QMAX - z)          # grads reach the bounds
    return (v + tf.stop_gradient(tf.round(v) - v)) * s


@cache
def qat_layers() -> SimpleNamespace:
    """The Keras layer classes (made on first use: Keras is imported only here)."""
    import keras
    from keras import ops

    class ActivationQuantizer(keras.layers.Layer):
        """Fake int8 quantization of one tensor with a trainable grid, started on the
        range [low, high]: a learned step and zero point ("lsq") or a learned range
        ("minmax_vars"), `ACTIVATION_QUANTIZERS`."""

        def __init__(self, low: float, high: float, mode: str = DEFAULT_ACTIVATION_QUANTIZER,
                     **kwargs):
            super().__init__(**kwargs)
            if mode not in ACTIVATION_QUANTIZERS:
                raise ValueError(f"activation quantizer '{mode}': choose from "
                                 f"{', '.join(ACTIVATION_QUANTIZERS)}")
            self.start, self.mode = (float(low), float(high)), mode
            self.start_step = ActivationGrid.from_range(*self.start).scale

        def build(self, input_shape):
            lo, hi = self.start
            if self.mode == "lsq":
                grid = ActivationGrid.from_range(lo, hi)
                self.step = self.add_weight(shape=(), name="step",
                                            initializer=keras.initializers.Constant(1.0))
                self.zero_point = self.add_weight(
                    shape=(), name="zero_point",
                    initializer=keras.initializers.Constant(float(grid.zero_point)))
                return
            self.low = self.add_weight(shape=(), name="low",
                                       initializer=keras.initializers.Constant(lo))
            self.high = self.add_weight(shape=(), name="high",
                                        initializer=keras.initializers.Constant(hi))

        def call(self, x):
            if self.mode == "lsq":
                return lsq_fake_quant(x, self.step * self.start_step, self.zero_point)
            return fake_quant_activation(x, self.low, self.high)

        def grid(self) -> ActivationGrid:
            """The int8 grid this quantizer computes on now (what the writer must ship)."""
            if self.mode == "lsq":
                scale = max(float(self.step.numpy()) * self.start_step, MIN_SCALE)
                zero = int(np.clip(np.rint(float(self.zero_point.numpy())), QMIN, QMAX))
                return ActivationGrid(scale, zero)
            return ActivationGrid.from_range(*self.range())

        def range(self) -> tuple[float, float]:
            """[low, high] whose writer's grid (`ActivationGrid.from_range`) is this one's."""
            if self.mode == "lsq":
                grid = self.grid()
                return grid.low, grid.high
            lo, hi = float(self.low.numpy()), float(self.high.numpy())
            return min(lo, 0.0), max(hi, 0.0, min(lo, 0.0) + MIN_WIDTH)

    class Quantized(keras.layers.Layer):
        """A layer run with int8 fake-quantized weights and/or output.

        Conv2D, DepthwiseConv2D and Dense compute with their kernel rounded per channel
        (the layer's own variables stay float and are what training updates); any layer's
        output may be fake-quantized on a range."""

        def __init__(self, inner, output_range=None, quantize_weights: bool = True,
                     activation_quantizer: str = DEFAULT_ACTIVATION_QUANTIZER, **kwargs):
            super().__init__(name=f"{inner.name}_qat", **kwargs)
            self.inner = inner
            self.axes = weight_reduce_axes_of(inner) if quantize_weights else None
            self.output_quantizer = None if output_range is None else ActivationQuantizer(
                *output_range, activation_quantizer, name=f"{inner.name}_act")

        def build(self, input_shape):
            if not self.inner.built:
                self.inner.build(input_shape)

        def call(self, inputs, **kwargs):
            y = self._weighted(inputs) if self.axes is not None else self.inner(inputs, **kwargs)
            return y if self.output_quantizer is None else self.output_quantizer(y)

        def _weighted(self, x):
            inner = self.inner
            kernel = fake_quant_weight(inner.kernel, self.axes)
            if isinstance(inner, keras.layers.DepthwiseConv2D):
                y = ops.depthwise_conv(x, kernel, strides=inner.strides, padding=inner.padding,
                                       dilation_rate=inner.dilation_rate,
                                       data_format=inner.data_format)
            elif isinstance(inner, keras.layers.Conv2D):
                y = inner.convolution_op(x, kernel)
            else:
                y = ops.matmul(x, kernel)
            if inner.use_bias:
                y = y + inner.bias
            return inner.activation(y)

    class FoldedAway(keras.layers.Layer):
        """Where a BatchNormalization was folded into the layer before it: passes through
        (it takes the BN's call arguments, `training` and `mask`, and ignores them)."""

        def call(self, inputs, training=None, mask=None):
            return inputs

    class LogProbabilities(keras.layers.Layer):
        """log(p) of a softmax output: the logits distillation trains on (up to a
        constant), with gradients that a quantized probability would have cut."""

        def call(self, inputs):
            return ops.log(ops.clip(inputs, 1e-7, 1.0))

    def weight_reduce_axes_of(inner):
        if isinstance(inner, keras.layers.DepthwiseConv2D):
            return (0, 1) if inner.data_format == "channels_last" else None
        if isinstance(inner, keras.layers.Conv2D):
            ok = inner.data_format == "channels_last" and inner.groups == 1
            return (0, 1, 2) if ok else None
        if isinstance(inner, keras.layers.Dense):
            return (0,) if getattr(inner, "lora_rank", None) is None else None
        return None

    return SimpleNamespace(ActivationQuantizer=ActivationQuantizer, Quantized=Quantized,
                           FoldedAway=FoldedAway, LogProbabilities=LogProbabilities,
                           weight_axes=weight_reduce_axes_of)
