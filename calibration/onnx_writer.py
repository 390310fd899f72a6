"""Write a `QuantPlan` as a quantized `.onnx` with onnxruntime.quantization.

* static (w8a8, w4a8): `quantize_static` in QDQ format. Our activation ranges go in as
  onnxruntime's own calibration cache (so it runs no calibration of its own), our
  weight scales as per-channel `TensorQuantOverrides` (int4 weights as `QInt4`). 8-bit
  tensors are stored as uint8, weights around zero point 128: the same grids as int8,
  shifted, without the int8-weight saturation of onnxruntime's x86 kernels (see
  `onnx_backend.WEIGHT_UINT8_ZERO_POINT`). The initializers hold the dequantized values
  of our codes, so onnxruntime's rounding gives back exactly our codes. Float layers are
  excluded nodes.
* dynamic: `quantize_dynamic` over our rounded weights. Its `ConvInteger` takes one
  scale per tensor, so onnxruntime re-rounds conv weights to per-tensor int8 (dense
  layers keep per-channel); scale overrides are refused there.
* weight-only (w4a16, w4afp32): onnxruntime.quantization has no weight-only path for
  Conv/Gemm, so the writer itself puts our codes behind `DequantizeLinear` nodes
  (opset 21; blockwise for dense layers).
* fp16: onnxruntime's float16 converter; per-layer fp16 weights elsewhere are stored as
  float16 initializers followed by a `Cast`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from edgeopt.calibration.config import Mode, Precision
from edgeopt.calibration.graphspec import CalibGraph
from edgeopt.calibration.mixed_scales import LAYOUT_OPS, mixed_scale_concats
from edgeopt.calibration.onnx_backend import (
    WEIGHT_UINT8_ZERO_POINT,
    native_weight,
    weight_axis,
)
from edgeopt.calibration.onnx_weight_only import weight_only
from edgeopt.calibration.plan import QuantPlan
from edgeopt.calibration.quiet_libs import quiet_libraries
from edgeopt.errors import ConversionError, first_line


def _nodes(model) -> dict[str, object]:
    """Output tensor -> node; unnamed nodes get stable names (onnxruntime excludes by name)."""
    by_output = {}
    for index, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{index}"
        for output in node.output:
            by_output[output] = node
    return by_output


def _trans_b(node) -> bool:
    return any(a.name == "transB" and a.i for a in node.attribute)


def _set_initializer(model, name: str, values: np.ndarray) -> None:
    from onnx import numpy_helper

    for i, tensor in enumerate(model.graph.initializer):
        if tensor.name == name:
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(
                values.astype(numpy_helper.to_array(tensor).dtype), name))
            return
    raise ConversionError(f"initializer '{name}' not found")


_BIAS_OPS = ("Conv", "Gemm", "ConvTranspose")


def own_biases(model) -> None:
    """Give each Conv/Gemm its own copy of a bias initializer it shares with other nodes.

    onnxruntime's quantizer copies a shared bias itself, as `{name}{N}` checked against
    initializer names only: basic-pitch's bias '.../conv1d_25' became '.../conv1d_252',
    the name of an activation, and onnxruntime refused its own QDQ model ("Transpose ...
    Invalid attribute perm {0, 2, 3, 1}, input shape = {36}"). Our copies are named apart
    from every tensor, and each layer's corrected bias goes into its own copy (into one
    shared tensor, the last layer's correction would win)."""
    from onnx import numpy_helper

    uses: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    inits = {t.name: t for t in model.graph.initializer}
    taken = set(uses) | set(inits) | {o for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        if node.op_type not in _BIAS_OPS or len(node.input) < 3:
            continue
        bias = node.input[2]
        if bias not in inits or uses[bias] < 2:
            continue
        copy = next(f"{bias}__{node.op_type.lower()}_bias{k}" for k in range(len(uses) + 1)
                    if f"{bias}__{node.op_type.lower()}_bias{k}" not in taken)
        taken.add(copy)
        model.graph.initializer.append(numpy_helper.from_array(
            numpy_helper.to_array(inits[bias]), copy))
        node.input[2] = copy
        uses[bias] -= 1


def embed_weights(model, graph: CalibGraph, plan: QuantPlan) -> None:
    """Dequantized codes and corrected biases into the float initializers (each layer's
    bias its own: `own_biases`)."""
    own_biases(model)
    nodes = _nodes(model)
    for layer in graph.layers:
        layer_plan = plan.layers.get(layer.name)
        if layer_plan is None or layer_plan.weight is None:
            continue
        node = nodes[layer.output]
        _set_initializer(model, layer.weight, native_weight(
            node.op_type, _trans_b(node), layer_plan.weight.dequantize()))
        if layer_plan.bias is not None:  # the node's bias: own_biases may have renamed it
            _set_initializer(model, node.input[2] if layer.bias else layer.bias,
                             layer_plan.bias)


def node_names(model) -> dict[str, str]:
    """Output tensor -> the name of the node writing it, as the QDQ model keeps it (the
    name onnxruntime excludes by and `float_islands.float_ops` lists)."""
    return {tensor: node.name for tensor, node in _nodes(model).items()}


def float_reasons(graph: CalibGraph, plan: QuantPlan) -> dict[str, str]:
    """Ops (by output tensor) kept float although the scheme is integer: concatenations of
    mixed scales, and the plan's own (`QuantPlan.keep_float`: a collapse rescue's float
    tail, an op the runtime refused in int8)."""
    if plan.mode != Mode.STATIC or not plan.quantize_rest:
        return {}
    return {**mixed_scale_concats(graph, plan.activation_ranges), **plan.keep_float}


def float_followers(graph: CalibGraph, kept: dict[str, str],
                    names: dict[str, str]) -> dict[str, str]:
    """Why an op reading a tensor of `kept` may run in float too (the float-op list uses it
    only for the ops the file shows in float): onnxruntime.quantization gives a layout op
    (Slice, Reshape...) a QDQ pair only where its input is quantized, so a Slice of a
    float Gemm stays float, and so do the layout ops after it. `names`: tensor -> node."""
    source = {t: t for t in kept}         # float tensor -> the kept op's output it comes from
    found: dict[str, str] = {}
    for op in graph.ops:                  # execution order
        origin = next((source[t] for t in op.inputs if t in source), None)
        if origin is None or not op.outputs or op.outputs[0] in kept:
            continue
        node = names.get(origin, origin)
        found[op.outputs[0]] = (f"{op.op} reads the float output of '{node}' (kept float on "
                                "purpose); onnxruntime.quantization leaves it float")
        if op.op in LAYOUT_OPS:
            source.update({t: origin for t in op.outputs})
    return found


def excluded_nodes(model, graph: CalibGraph, plan: QuantPlan) -> list[str]:
    """Nodes onnxruntime leaves float (`nodes_to_exclude`): no QDQ pair of their own, their
    inputs read after the producer's DequantizeLinear, their outputs float and quantized
    again only where a quantized node reads them. A node without weights between a
    DequantizeLinear and a QuantizeLinear and nothing else is fused back into a QLinear
    kernel by onnxruntime (and `float_islands.float_ops`, reading the file, does not list
    it); a rescue's float tail never makes one: each of its nodes feeds a float node or an
    output."""
    nodes = _nodes(model)
    chosen = [nodes[la.output].name for la in graph.layers
              if plan.layers.get(la.name) is not None
              and plan.layers[la.name].precision in (Precision.FP16, Precision.FLOAT)]
    kept = [nodes[t].name for t in float_reasons(graph, plan) if t in nodes]
    return list(dict.fromkeys(chosen + kept))


def weight_overrides(model, graph: CalibGraph, plan: QuantPlan) -> dict:
    from onnxruntime.quantization import QuantType

    nodes = _nodes(model)
    overrides = {}
    for layer in graph.layers:
        layer_plan = plan.layers.get(layer.name)
        if layer_plan is None or layer_plan.weight is None:
            continue
        node = nodes[layer.output]
        int4 = layer_plan.precision == Precision.INT4
        qtype, zero = ((QuantType.QInt4, 0) if int4
                       else (QuantType.QUInt8, WEIGHT_UINT8_ZERO_POINT))
        axis = weight_axis(node.op_type, _trans_b(node))
        overrides[layer.weight] = [{"axis": axis, "scale": float(s), "zero_point": zero,
                                    "quant_type": qtype} for s in layer_plan.weight.scale]
    return overrides


def _ranges_cache(plan: QuantPlan, path: Path) -> None:
    from onnxruntime.quantization.calibrate import (
        CalibrationMethod,
        TensorsData,
        save_tensors_data,
    )

    data = {name: (np.array(lo, np.float32), np.array(hi, np.float32))
            for name, (lo, hi) in plan.activation_ranges.items()}
    save_tensors_data(TensorsData(CalibrationMethod.MinMax, data), path)


def _static(model, graph: CalibGraph, plan: QuantPlan, tmp: Path) -> bytes:
    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.calibrate import CalibrationMethod

    embed_weights(model, graph, plan)
    options = {"ActivationSymmetric": False, "WeightSymmetric": True,
               "TensorQuantOverrides": weight_overrides(model, graph, plan),
               "QDQDisableWeightAdjustForInt32Bias": True}
    exclude = excluded_nodes(model, graph, plan)
    quantize_only = None
    if not plan.quantize_rest:
        nodes = _nodes(model)
        quantize_only = [nodes[graph.layer(n).output].name for n in plan.layers]
    onnx.save(model, str(tmp / "float.onnx"))
    _ranges_cache(plan, tmp / "ranges.json")
    quantize_static(str(tmp / "float.onnx"), str(tmp / "q.onnx"), None,
                    quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QUInt8,
                    nodes_to_exclude=exclude, nodes_to_quantize=quantize_only,
                    calibrate_method=CalibrationMethod.MinMax, extra_options=options,
                    calibration_cache_path=str(tmp / "ranges.json"))
    return (tmp / "q.onnx").read_bytes()


def _dynamic(model, graph: CalibGraph, plan: QuantPlan, tmp: Path) -> bytes:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    embed_weights(model, graph, plan)
    exclude = excluded_nodes(model, graph, plan)
    onnx.save(model, str(tmp / "float.onnx"))
    quantize_dynamic(str(tmp / "float.onnx"), str(tmp / "q.onnx"), per_channel=True,
                     weight_type=QuantType.QInt8, nodes_to_exclude=exclude)
    return (tmp / "q.onnx").read_bytes()


def _fp16(model, graph: CalibGraph, plan: QuantPlan, tmp: Path) -> bytes:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    nodes = _nodes(model)
    keep = [nodes[la.output].name for la in graph.layers
            if la.name in plan.layers and plan.layers[la.name].precision == Precision.FLOAT]
    return convert_float_to_float16(model, keep_io_types=True,
                                    node_block_list=keep).SerializeToString()


def write(float_model: bytes, graph: CalibGraph, plan: QuantPlan) -> bytes:
    """The quantized `.onnx` bytes for `plan` (not yet checked by the runtime)."""
    import onnx

    if plan.mode == Mode.FLOAT:
        return bytes(float_model)

    writers = {Mode.STATIC: _static, Mode.DYNAMIC: _dynamic, Mode.FP16: _fp16,
               Mode.WEIGHT_ONLY: weight_only}
    model = onnx.load_from_string(float_model)
    with tempfile.TemporaryDirectory(prefix="edgeopt-ortq-") as tmp, quiet_libraries():
        try:
            return writers[plan.mode](model, graph, plan, Path(tmp))
        except ConversionError:
            raise
        except Exception as exc:  # onnxruntime.quantization raises many types
            raise ConversionError(f"onnxruntime.quantization could not write the "
                                  f"{plan.mode} model: {first_line(exc)}") from exc
