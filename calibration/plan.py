"""A `QuantPlan`: every number the writers need, decided by the core.

Activation ranges per tensor, and per layer a precision, the integer weight codes with
their scales, and the corrected bias. `make_layer_plan` decides one layer: round to
nearest or GPTQ, then bias correction `b' = b - (W_q - W) E[x]` with the mean input
patch measured during calibration (Nagel et al., 2019).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from edgeopt.calibration.config import Mode, Precision, WeightMethod
from edgeopt.calibration.gptq import gptq_quantize
from edgeopt.calibration.graphspec import CalibGraph, Layer, LayerKind
from edgeopt.calibration.layer_stats import LayerInputStats
from edgeopt.calibration.weights import WeightQuant, quantize_rtn

BITS = {Precision.INT4: 4, Precision.INT8: 8, Precision.INT16: 8}  # weight bits


@dataclass(frozen=True)
class LayerPlan:
    precision: Precision
    weight: WeightQuant | None = None
    bias: np.ndarray | None = None
    weight_method: str | None = None


@dataclass(frozen=True)
class QuantPlan:
    mode: Mode
    activation_bits: int | None
    activation_ranges: dict[str, tuple[float, float]]
    layers: dict[str, LayerPlan]
    io_dtype: str = "float32"
    quantize_rest: bool = True     # static mode: quantize ops without weights too
    # ops without weights kept float after the runtime refused them in int8: tensor -> why
    keep_float: dict[str, str] = field(default_factory=dict)
    # ops without weights run with int16 activations in an int8 plan: tensor -> why
    int16_ops: dict[str, str] = field(default_factory=dict)

    def precisions(self) -> dict[str, str]:
        """Per layer, and per op without weights moved to int16 activations (int8 weights
        in an int16-activation plan read "int16": the activations set the kernel)."""
        wide = self.activation_bits == 16
        found = {name: str(Precision.INT16 if wide and plan.precision == Precision.INT8
                           else plan.precision) for name, plan in self.layers.items()}
        return {**found, **{name: str(Precision.INT16) for name in self.int16_ops}}

    def with_layers(self, layers: dict[str, LayerPlan]) -> QuantPlan:
        return replace(self, layers={**self.layers, **layers})

    def with_ranges(self, ranges: dict[str, tuple[float, float]]) -> QuantPlan:
        return replace(self, activation_ranges=ranges)

    def keeping_float(self, tensor: str, reason: str) -> QuantPlan:
        return replace(self, keep_float={**self.keep_float, tensor: reason})

    def in_int16(self, tensors: dict[str, str]) -> QuantPlan:
        """This plan with the ops writing `tensors` moved to int16 activations (and out of
        the float list: int16 is what replaces a float fallback)."""
        keep = {t: r for t, r in self.keep_float.items() if t not in tensors}
        return replace(self, int16_ops={**self.int16_ops, **tensors}, keep_float=keep)

    def only(self, layer: str, ranges: dict[str, tuple[float, float]]) -> QuantPlan:
        """This plan with one layer quantized and everything else left float."""
        return replace(self, layers={layer: self.layers[layer]}, activation_ranges=ranges,
                       quantize_rest=False)


def quantize_weight(layer: Layer, weight: np.ndarray, precision: Precision,
                    method: WeightMethod, block_size: int | None,
                    stats: LayerInputStats | None) -> tuple[WeightQuant, str]:
    """Codes for one layer; GPTQ needs the layer's Hessian, else round to nearest."""
    bits = BITS[precision]
    block = block_size if (block_size and layer.kind == LayerKind.DENSE
                           and weight.shape[1] % block_size == 0) else None
    usable = stats is not None and stats.hessian is not None and layer.int4_capable
    if method == WeightMethod.GPTQ and usable:
        return gptq_quantize(weight, stats.hessian, bits, block), "gptq"
    return quantize_rtn(weight, bits, block), "rtn"


def corrected_bias(layer: Layer, weight: np.ndarray, quant: WeightQuant,
                   bias: np.ndarray, mean_patch: np.ndarray) -> np.ndarray:
    """Remove the mean output shift that rounding the weights causes."""
    delta = quant.dequantize().astype(np.float64) - weight
    out = len(delta)
    if layer.kind in (LayerKind.CONV, LayerKind.DENSE):
        shift = delta.reshape(out, -1) @ mean_patch
    else:
        groups = layer.geometry.groups
        per_group = delta.reshape(out, -1).shape[1]
        means = mean_patch.reshape(groups, per_group)
        group_of = np.arange(out) // (out // groups)
        shift = np.einsum("ok,ok->o", delta.reshape(out, -1), means[group_of])
    return (bias.astype(np.float64) - shift).astype(np.float32)


def make_layer_plan(graph: CalibGraph, layer: Layer, precision: Precision,
                    method: WeightMethod, block_size: int | None,
                    stats: LayerInputStats | None, bias_correction: bool,
                    shared_bias: bool) -> LayerPlan:
    if precision not in BITS:
        return LayerPlan(precision)
    weight = graph.weights[layer.weight]
    quant, used = quantize_weight(layer, weight, precision, method, block_size, stats)
    bias = None
    if bias_correction and layer.bias and not shared_bias and stats is not None and stats.rows:
        bias = corrected_bias(layer, weight, quant, graph.biases[layer.bias], stats.mean)
    return LayerPlan(precision, quant, bias, used)
