"""Fake quantization for training: the writers' integer grids in a Keras forward pass.

Two quantizers, each the grid the runtime will use:

* weights: symmetric int8 per output channel, `scale = max|w| / 127`, codes in
  [-127, 127] -- what `weights.quantize_rtn` gives and ai-edge-quantizer / onnxruntime
  store;
* activations: asymmetric int8 per tensor on a range [lo, hi] widened to hold 0, the grid
  of `quantgrid.ActivationGrid` (TensorFlow's FakeQuantWithMinMaxVars nudges to the same
  scale and zero point). The range is two trainable variables started from the
  calibration core's estimate.

Gradients pass straight through the rounding (Bengio et al., 2013); the range gets the
gradient of the clipped values (PACT-style, as FakeQuantWithMinMaxVars defines it).

    >>> layers = qat_layers()                                     # doctest: +SKIP
    >>> q = layers.Quantized(conv, weight_axis=-1, output_range=(-1.0, 3.0))
"""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace
from typing import Any

WEIGHT_QMAX = 127          # int8 symmetric weights: [-127, 127] (TFLite, onnxruntime)
MIN_SCALE = 1e-12          # weights.MIN_SCALE: an all-zero channel keeps a finite scale
MIN_WIDTH = 1e-6           # an activation range never collapses to a point
# The path suffixes of ActivationQuantizer's range variables: trained at their own rate,
# and not weights (a gradient reaching only them does not train the model)
RANGE_VARIABLES = ("/low", "/high")


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


@cache
def qat_layers() -> SimpleNamespace:
    """The Keras layer classes (made on first use: Keras is imported only here)."""
    import keras
    from keras import ops

    class ActivationQuantizer(keras.layers.Layer):
        """Fake int8 quantization of one tensor with a trainable range.

        The variables `low` and `high` are the ends' moves from the start, in units of the
        start's width: one learning rate then moves a [0, 0.05] range and a [-11, 11] one
        by the same share. In absolute units, the rate that suited a logits range (2e-3)
        widened magika's [0, 0.045] activations by half their width in an epoch, and its
        QAT lost 20 points of labelled accuracy to that alone (BENCHMARKS.md, issue 19)."""

        def __init__(self, low: float, high: float, **kwargs):
            super().__init__(**kwargs)
            self.start = (float(low), float(high))
            self.width = max(self.start[1] - self.start[0], MIN_WIDTH)

        def build(self, input_shape):
            zero = keras.initializers.Constant(0.0)
            self.low = self.add_weight(shape=(), name="low", initializer=zero)  # RANGE_VARIABLES
            self.high = self.add_weight(shape=(), name="high", initializer=zero)

        def call(self, x):
            return fake_quant_activation(x, self.start[0] + self.width * self.low,
                                         self.start[1] + self.width * self.high)

        def range(self) -> tuple[float, float]:
            lo = self.start[0] + self.width * float(self.low.numpy())
            hi = self.start[1] + self.width * float(self.high.numpy())
            return min(lo, 0.0), max(hi, 0.0, min(lo, 0.0) + MIN_WIDTH)

    class Quantized(keras.layers.Layer):
        """A layer run with int8 fake-quantized weights and/or output.

        Conv2D, DepthwiseConv2D and Dense compute with their kernel rounded per channel
        (the layer's own variables stay float and are what training updates); any layer's
        output may be fake-quantized on a range."""

        def __init__(self, inner, output_range=None, quantize_weights: bool = True,
                     **kwargs):
            super().__init__(name=f"{inner.name}_qat", **kwargs)
            self.inner = inner
            self.axes = weight_reduce_axes_of(inner) if quantize_weights else None
            self.output_quantizer = None if output_range is None else ActivationQuantizer(
                *output_range, name=f"{inner.name}_act")

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
