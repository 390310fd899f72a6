"""Micro-benchmark models for `edgeopt devices calibrate`: one op each, float32 and int8.

The shapes live in microbench.toml; each family below turns one row into a model.

    >>> models = micro_models()              # doctest: +SKIP
    >>> models[0].label, len(models[0].tflite)  # doctest: +SKIP
    ('conv 112x112x3->32 k3 s2 float32', 4012)
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import numpy as np

from edgeopt.devices.tflite_writer import GraphWriter, options

IN_SCALE, OUT_SCALE, W_SCALE = 1 / 64, 0.05, 0.01
# Output quantization TFLite requires for int8 LOGISTIC and SOFTMAX.
UNIT_RANGE = {"scale": 1 / 256, "zero_point": -128}
RELU, SAME, VALID = 1, 0, 1


@dataclass(frozen=True)
class MicroModel:
    label: str
    family: str
    dtype: str
    tflite: bytes


def _weights(g: GraphWriter, shape: tuple[int, ...], axis: int | None, seed: int) -> int:
    rng = np.random.default_rng(seed)
    if g.dtype == "float32":
        return g.tensor(shape, "float32", rng.normal(0, 0.1, shape).astype(np.float32))
    data = rng.integers(-127, 128, shape, dtype=np.int8)
    channels = shape[axis] if axis is not None else 1
    return g.tensor(shape, "int8", data, scale=[W_SCALE] * channels, axis=axis or 0)


def _bias(g: GraphWriter, n: int) -> int:
    if g.dtype == "float32":
        return g.tensor((n,), "float32", np.zeros(n, np.float32))
    return g.tensor((n,), "int32", np.zeros(n, np.int32), scale=[IN_SCALE * W_SCALE] * n)


def _input(g: GraphWriter, x: int | None, shape: tuple[int, ...], *scale) -> tuple[list, int]:
    """(new graph inputs, the op's input): ``x`` when chaining, else a new graph input."""
    if x is not None:
        return [], x
    x = g.activation(shape, *scale)
    return [x], x


def _conv(g: GraphWriter, h, w, cin, cout, k, s, x=None) -> tuple[list[int], int]:
    inputs_, x = _input(g, x, (1, h, w, cin), IN_SCALE)
    y = g.activation((1, math.ceil(h / s), math.ceil(w / s), cout), OUT_SCALE)
    inputs = [x, _weights(g, (cout, k, k, cin), 0, cout), _bias(g, cout)]
    g.op("CONV_2D", inputs, [y], options("Conv2DOptions", padding=SAME, strideW=s, strideH=s,
         fusedActivationFunction=RELU, dilationWFactor=1, dilationHFactor=1), _v(g, 3))
    return inputs_, y


def _depthwise(g: GraphWriter, h, w, c, k, s, x=None) -> tuple[list[int], int]:
    inputs_, x = _input(g, x, (1, h, w, c), IN_SCALE)
    y = g.activation((1, math.ceil(h / s), math.ceil(w / s), c), OUT_SCALE)
    inputs = [x, _weights(g, (1, k, k, c), 3, c), _bias(g, c)]
    g.op("DEPTHWISE_CONV_2D", inputs, [y], options(
        "DepthwiseConv2DOptions", padding=SAME, strideW=s, strideH=s, depthMultiplier=1,
        fusedActivationFunction=RELU, dilationWFactor=1, dilationHFactor=1), _v(g, 3))
    return inputs_, y


def _dense(g: GraphWriter, n, m) -> tuple[list[int], int]:
    x = g.activation((1, n), IN_SCALE)
    y = g.activation((1, m), OUT_SCALE)
    g.op("FULLY_CONNECTED", [x, _weights(g, (m, n), None, m), _bias(g, m)], [y],
         options("FullyConnectedOptions", fusedActivationFunction=0), _v(g, 4))
    return [x], y


def _binary(name: str) -> Callable:
    def build(g: GraphWriter, h, w, c, x=None) -> tuple[list[int], int]:
        inputs, a = _input(g, x, (1, h, w, c))
        b = g.activation((1, h, w, c))
        y = g.activation((1, h, w, c), 0.1)
        g.op(name, [a, b], [y], options(f"{name.title()}Options"), _v(g, 2))
        return [*inputs, b], y
    return build


def _unary(name: str, output_range: dict | None = None, int8_version: int = 2) -> Callable:
    def build(g: GraphWriter, *shape, x=None) -> tuple[list[int], int]:
        inputs, x = _input(g, x, (1, *shape))
        y = g.activation((1, *shape), **(output_range if g.dtype == "int8" and output_range
                                         else {}))
        g.op(name, [x], [y], version=_v(g, int8_version))
        return inputs, y
    return build


def _pool(name: str) -> Callable:
    def build(g: GraphWriter, h, w, c, k) -> tuple[list[int], int]:
        x = g.activation((1, h, w, c))
        y = g.activation((1, h // k, w // k, c))
        g.op(name, [x], [y], options("Pool2DOptions", padding=VALID, strideW=k, strideH=k,
                                     filterWidth=k, filterHeight=k), _v(g, 2))
        return [x], y
    return build


def _mean(g: GraphWriter, h, w, c) -> tuple[list[int], int]:
    x, y = g.activation((1, h, w, c)), g.activation((1, c))
    axes = g.tensor((2,), "int32", np.array([1, 2], np.int32))
    g.op("MEAN", [x, axes], [y], options("ReducerOptions", keepDims=False), _v(g, 2))
    return [x], y


def _softmax(g: GraphWriter, n) -> tuple[list[int], int]:
    x = g.activation((1, n))
    y = g.activation((1, n), **(UNIT_RANGE if g.dtype == "int8" else {}))
    g.op("SOFTMAX", [x], [y], options("SoftmaxOptions", beta=1.0), _v(g, 2))
    return [x], y


def _reshape(g: GraphWriter, h, w, c) -> tuple[list[int], int]:
    x, y = g.activation((1, h, w, c)), g.activation((1, h * w * c))
    shape = g.tensor((2,), "int32", np.array([1, h * w * c], np.int32))
    g.op("RESHAPE", [x, shape], [y], options("ReshapeOptions", newShape=[1, h * w * c]))
    return [x], y


def _concatenation(g: GraphWriter, h, w, c) -> tuple[list[int], int]:
    a, b = g.activation((1, h, w, c)), g.activation((1, h, w, c))
    y = g.activation((1, h, w, 2 * c))
    g.op("CONCATENATION", [a, b], [y], options("ConcatenationOptions", axis=3), _v(g, 2))
    return [a, b], y


def _pad(g: GraphWriter, h, w, c) -> tuple[list[int], int]:
    x, y = g.activation((1, h, w, c)), g.activation((1, h + 2, w + 2, c))
    paddings = g.tensor((4, 2), "int32", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
    g.op("PAD", [x, paddings], [y], version=_v(g, 2))
    return [x], y


def _quantize(g: GraphWriter, *shape) -> tuple[list[int], int]:
    x = g.tensor((1, *shape), "float32")
    y = g.activation((1, *shape))
    g.op("QUANTIZE", [x], [y], version=2)
    return [x], y


def _dequantize(g: GraphWriter, *shape) -> tuple[list[int], int]:
    x = g.activation((1, *shape))
    y = g.tensor((1, *shape), "float32")
    g.op("DEQUANTIZE", [x], [y], version=2)
    return [x], y


def _v(g: GraphWriter, int8_version: int) -> int:
    return int8_version if g.dtype == "int8" else 1


FAMILIES: dict[str, Callable] = {
    "conv": _conv, "depthwise": _depthwise, "dense": _dense, "add": _binary("ADD"),
    "mul": _binary("MUL"), "hard_swish": _unary("HARD_SWISH", int8_version=1),
    "logistic": _unary("LOGISTIC", UNIT_RANGE), "average_pool": _pool("AVERAGE_POOL_2D"),
    "max_pool": _pool("MAX_POOL_2D"), "mean": _mean, "softmax": _softmax,
    "reshape": _reshape, "concatenation": _concatenation, "pad": _pad,
    "quantize": _quantize, "dequantize": _dequantize,
}
INT8_ONLY = ("quantize", "dequantize")


def micro_specs() -> dict[str, list[list]]:
    text = resources.files("edgeopt.devices").joinpath("microbench.toml").read_text("utf-8")
    return tomllib.loads(text)


def _model(family: str, dtype: str, row: list, repeat: int = 1) -> MicroModel:
    """One op of ``family``, or ``repeat`` of them chained output to input."""
    g = GraphWriter(dtype)
    inputs, output = FAMILIES[family](g, *row)
    for _ in range(repeat - 1):
        more, output = FAMILIES[family](g, *row, x=output)
        inputs += more
    label = f"{family} {'x'.join(map(str, row))} {dtype}"
    label = f"{repeat}x {label}" if repeat > 1 else label
    return MicroModel(label, family, dtype, g.build(inputs, [output]))


def micro_models(dtypes: tuple[str, ...] = ("float32", "int8"), limit: int | None = None
                 ) -> list[MicroModel]:
    """Every micro-benchmark model; ``limit`` keeps the first N shapes of each family.

    The ``chains`` (the same op repeated, output to input) separate what each op costs
    from what each invoke costs."""
    specs = micro_specs()
    chains = specs.pop("chains", [])
    models = []
    for dtype in dtypes:
        for family, rows in specs.items():
            if family not in INT8_ONLY or dtype == "int8":
                models += [_model(family, dtype, row) for row in rows[:limit]]
        models += [_model(family, dtype, row, repeat) for family, repeat, *row in chains]
    return models
