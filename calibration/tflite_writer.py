"""Write a `QuantPlan` as a quantized `.tflite` with ai-edge-quantizer.

The core's decisions reach ai-edge-quantizer through its own public inputs:

* weights: the float model gets the dequantized values of our integer codes (and the
  corrected biases) written over its constants, and the calibration result carries each
  weight's per-channel (or per-block) min/max = +-scale*qmax, so ai-edge-quantizer's
  min-max rounding gives back exactly our codes and scales;
* activations: the calibration result holds our estimated range for every tensor;
* precision per layer: one recipe rule per layer, anchored on the layer's op scope.

Model IO stays float unless an integer `io_dtype` is asked for.
"""

from __future__ import annotations

import re

import numpy as np

from edgeopt.calibration.config import Mode, Precision
from edgeopt.calibration.divisors import risky_divisions
from edgeopt.calibration.graphspec import CalibGraph, Layer
from edgeopt.calibration.mixed_scales import mixed_scale_concats
from edgeopt.calibration.plan import QuantPlan
from edgeopt.calibration.quiet_libs import quiet_libraries
from edgeopt.calibration.tflite_aeq import set_io_dtype
from edgeopt.calibration.tflite_backend import to_native
from edgeopt.calibration.tflite_branches import branch_rules
from edgeopt.calibration.tflite_buffers import patch_constants, with_current_opcodes
from edgeopt.calibration.tflite_int8_islands import close_islands
from edgeopt.calibration.tflite_split_parts import integer_parts
from edgeopt.calibration.weights import qrange
from edgeopt.errors import ConversionError, first_line

MIN_MAX = "min_max_uniform_quantize"
FLOAT_CASTING = "float_casting"
NO_QUANTIZE = "no_quantize"
_INT4_OPS = ("CONV_2D", "FULLY_CONNECTED")


def _tensor_config(bits: int, symmetric: bool, granularity: str = "TENSORWISE") -> dict:
    return {"num_bits": bits, "symmetric": symmetric, "granularity": granularity,
            "dtype": "INT"}


def _weight_granularity(plan_layer) -> str:
    block = plan_layer.weight.block_size if plan_layer.weight is not None else None
    return "CHANNELWISE" if block is None else f"BLOCKWISE_{block}"


def _activation_config(bits: int) -> dict:
    """int8 activations are asymmetric; int16 ones symmetric with zero point 0, as
    LiteRT's 16x8 kernels require (their bias is int64)."""
    return _tensor_config(bits, bits == 16)


def _op_config(mode: Mode, precision: Precision, granularity: str,
               activation_bits: int = 8) -> tuple[str, dict]:
    """(algorithm key, op config) of one layer in ai-edge-quantizer's recipe format."""
    if precision == Precision.FLOAT:
        return NO_QUANTIZE, {}
    if precision == Precision.FP16:
        return FLOAT_CASTING, {"weight_tensor_config": {"num_bits": 16, "dtype": "FLOAT"},
                               "compute_precision": "FLOAT", "explicit_dequantize": True}
    weight = _tensor_config(4 if precision == Precision.INT4 else 8, True, granularity)
    if mode == Mode.STATIC:
        bits = 16 if precision == Precision.INT16 else activation_bits
        return MIN_MAX, {"activation_tensor_config": _activation_config(bits),
                         "weight_tensor_config": weight, "compute_precision": "INTEGER",
                         "explicit_dequantize": False}
    if mode == Mode.DYNAMIC or granularity != "CHANNELWISE":
        return MIN_MAX, {"weight_tensor_config": weight, "compute_precision": "INTEGER",
                         "explicit_dequantize": False}
    return MIN_MAX, {"weight_tensor_config": weight, "compute_precision": "FLOAT",
                     "explicit_dequantize": True}


def scope_regex(name: str) -> str:
    """ai-edge-quantizer matches `re.search` on 'out1;out2;' scopes: anchor on ours, the
    op's first output (a SPLIT kept float has 'split;split1;split2;' as its scope)."""
    return "^" + re.escape(name) + ";"


def build_recipe(graph: CalibGraph, plan: QuantPlan) -> list[dict]:
    rules = []
    bits = plan.activation_bits or 8
    if plan.mode == Mode.STATIC and plan.quantize_rest:
        key, config = _op_config(Mode.STATIC, Precision.INT8, "CHANNELWISE", bits)
        rules.append({"regex": ".*", "operation": "*", "algorithm_key": key,
                      "op_config": config})
        if plan.io_dtype != "int8":  # ai-edge-quantizer's own IO is int8
            for io in ("INPUT", "OUTPUT"):
                rules.append({"regex": ".*", "operation": io, "algorithm_key": NO_QUANTIZE,
                              "op_config": {}})
        key16, config16 = _op_config(Mode.STATIC, Precision.INT16, "CHANNELWISE")
        for tensor in plan.int16_ops:
            rules.append({"regex": scope_regex(tensor), "operation": "*",
                          "algorithm_key": key16, "op_config": config16})
        for tensor in float_reasons(graph, plan):
            rules.append({"regex": scope_regex(tensor), "operation": "*",
                          "algorithm_key": NO_QUANTIZE, "op_config": {}})
    for layer in graph.layers:
        layer_plan = plan.layers.get(layer.name)
        if layer_plan is None:
            continue
        key, config = _op_config(plan.mode, layer_plan.precision,
                                 _weight_granularity(layer_plan), bits)
        if key == NO_QUANTIZE and plan.mode != Mode.STATIC:
            continue
        rules.append({"regex": scope_regex(layer.name), "operation": layer.op,
                      "algorithm_key": key, "op_config": config})
    return rules


def float_reasons(graph: CalibGraph, plan: QuantPlan) -> dict[str, str]:
    """Ops (by output tensor) the writer keeps float although the scheme is integer."""
    if plan.mode != Mode.STATIC or not plan.quantize_rest:
        return {}
    found = {**risky_divisions(graph, plan.activation_ranges),
             **mixed_scale_concats(graph, plan.activation_ranges, plan.activation_bits or 8),
             **plan.keep_float}
    return {t: why for t, why in found.items() if t not in plan.int16_ops}


def _weight_qsv(layer: Layer, quant) -> dict[str, np.ndarray]:
    _, qmax = qrange(quant.bits)
    bound = quant.scale.astype(np.float64) * qmax
    if quant.block_size is not None:
        shape = bound.shape                       # (O, I / block)
    elif layer.op == "CONV_2D":
        shape = (len(bound), 1, 1, 1)
    elif layer.op == "DEPTHWISE_CONV_2D":
        shape = (1, 1, 1, len(bound))
    else:
        shape = (len(bound), 1)
    bound = bound.reshape(shape).astype(np.float32)
    return {"min": -bound, "max": bound}


def calibration_result(graph: CalibGraph, plan: QuantPlan) -> dict[str, dict]:
    qsvs = {}
    for name, (lo, hi) in plan.activation_ranges.items():
        shape = (1,) * max(len(graph.shapes.get(name, ())), 1)
        qsvs[name] = {"min": np.full(shape, lo, np.float32), "max": np.full(shape, hi, np.float32)}
    for layer in graph.layers:
        layer_plan = plan.layers.get(layer.name)
        if layer_plan is not None and layer_plan.weight is not None:
            qsvs[layer.weight] = _weight_qsv(layer, layer_plan.weight)
    return qsvs


def new_constants(graph: CalibGraph, plan: QuantPlan) -> dict[str, np.ndarray]:
    values = {}
    for layer in graph.layers:
        layer_plan = plan.layers.get(layer.name)
        if layer_plan is None or layer_plan.weight is None:
            continue
        values[layer.weight] = to_native(layer.op, layer_plan.weight.dequantize())
        if layer_plan.bias is not None:
            values[layer.bias] = layer_plan.bias
    return values


def write(float_model: bytes, graph: CalibGraph, plan: QuantPlan) -> bytes:
    """The quantized `.tflite` bytes for `plan` (not yet checked by the runtime)."""
    if plan.mode == Mode.FLOAT:
        return bytes(float_model)
    from ai_edge_quantizer import quantizer

    patched = patch_constants(with_current_opcodes(float_model), new_constants(graph, plan))
    rules = build_recipe(graph, plan)
    if plan.mode == Mode.STATIC and plan.quantize_rest:  # IF/WHILE bodies have no ranges
        rules += branch_rules(float_model, NO_QUANTIZE)
    try:
        with quiet_libraries():
            qt = quantizer.Quantizer(bytearray(patched), rules)
            qsvs = calibration_result(graph, plan)
            result = qt.quantize(qsvs if qsvs else None, enable_progress_bar=False,
                                 enable_progress_report=False)
        model = bytes(result.quantized_model)
    except (ValueError, RuntimeError, KeyError, TypeError, AttributeError, IndexError) as exc:
        # AttributeError/IndexError: the quantizer's own code on a model it cannot handle
        # (an unnamed tensor, an index past a table), found by the fuzz suite
        raise ConversionError(f"ai-edge-quantizer could not write the {plan.mode} model: "
                              f"{first_line(exc)}") from exc
    if plan.mode == Mode.STATIC and plan.quantize_rest:
        model = integer_parts(close_islands(model, set(plan.keep_float)))
    if plan.io_dtype == "uint8" and plan.mode == Mode.STATIC:
        return set_io_dtype(model, "uint8")
    return model
