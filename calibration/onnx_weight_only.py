"""Weight-only `.onnx`: our integer codes behind `DequantizeLinear` nodes (opset 21).

Each quantized layer's weight initializer is replaced by its int4/int8 codes, a scale
per output channel (or per block of a dense layer's inputs) and a `DequantizeLinear`
whose float output feeds the layer; fp16 layers get a float16 initializer and a `Cast`.
Compute stays float, as in LiteRT's weight-only kernels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeopt.calibration.config import Precision
from edgeopt.calibration.graphspec import CalibGraph
from edgeopt.calibration.onnx_backend import native_weight, weight_axis
from edgeopt.calibration.plan import QuantPlan
from edgeopt.errors import ConversionError, first_line

WEIGHT_ONLY_OPSET = 21


def _lift_opset(model):
    import onnx

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset >= WEIGHT_ONLY_OPSET:
        return model
    try:
        return onnx.version_converter.convert_version(model, WEIGHT_ONLY_OPSET)
    except Exception as exc:  # the converter raises its own C++ error types
        raise ConversionError(f"cannot lift the model from opset {opset} to "
                              f"{WEIGHT_ONLY_OPSET} for int4 DequantizeLinear: "
                              f"{first_line(exc)}") from exc


def _dequantize_node(node, layer, layer_plan):
    from onnx import TensorProto, helper

    quant = layer_plan.weight
    trans_b = any(a.name == "transB" and a.i for a in node.attribute)
    codes = native_weight(node.op_type, trans_b, quant.codes)
    axis = weight_axis(node.op_type, trans_b)
    kind = TensorProto.INT4 if layer_plan.precision == Precision.INT4 else TensorProto.INT8
    scale = quant.scale
    attributes = {"axis": axis}
    if quant.block_size is not None:
        attributes = {"axis": 1 - axis, "block_size": quant.block_size}
        scale = scale if axis == 0 else scale.T     # (O, K/b) -> the stored weight's layout
    name = layer.weight
    tensors = [helper.make_tensor(f"{name}_q", kind, codes.shape, codes.ravel().tolist()),
               helper.make_tensor(f"{name}_scale", TensorProto.FLOAT, scale.shape,
                                  scale.astype(np.float32).ravel().tolist()),
               helper.make_tensor(f"{name}_zero", kind, scale.shape,
                                  np.zeros(scale.size, np.int8).tolist())]
    dq = helper.make_node("DequantizeLinear", [t.name for t in tensors], [f"{name}_dq"],
                          name=f"{name}_DequantizeLinear", **attributes)
    return tensors, dq


def _cast_node(layer, weight: np.ndarray):
    from onnx import TensorProto, helper, numpy_helper

    tensor = numpy_helper.from_array(weight.astype(np.float16), f"{layer.weight}_fp16")
    cast = helper.make_node("Cast", [tensor.name], [f"{layer.weight}_dq"],
                            name=f"{layer.weight}_Cast", to=TensorProto.FLOAT)
    return [tensor], cast


def weight_only(model, graph: CalibGraph, plan: QuantPlan, tmp: Path) -> bytes:
    from onnx import numpy_helper

    model = _lift_opset(model)
    inits = {t.name: t for t in model.graph.initializer}
    by_output = {o: node for node in model.graph.node for o in node.output}
    new_nodes, replaced = [], set()
    for layer in graph.layers:
        layer_plan = plan.layers.get(layer.name)
        node = by_output[layer.output]
        if layer_plan is None or layer_plan.precision == Precision.FLOAT:
            continue
        if layer_plan.precision == Precision.FP16:
            tensors, dq = _cast_node(layer, numpy_helper.to_array(inits[layer.weight]))
        else:
            tensors, dq = _dequantize_node(node, layer, layer_plan)
        model.graph.initializer.extend(tensors)
        new_nodes.append(dq)
        node.input[1] = dq.output[0]
        replaced.add(layer.weight)
        if layer_plan.bias is not None:
            inits[layer.bias].CopyFrom(numpy_helper.from_array(layer_plan.bias, layer.bias))
    still_used = {i for node in model.graph.node for i in node.input}
    keep = [t for t in model.graph.initializer if t.name not in replaced or t.name in still_used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    nodes = new_nodes + list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model.SerializeToString()
