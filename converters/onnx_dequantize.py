"""A dynamically quantized ONNX model rewritten into the float model it was made from.

onnxruntime's `quantize_dynamic` stores int8/uint8 weights with their scales and zero
points and quantizes the activations at run time (DynamicQuantizeLinear before each
ConvInteger/MatMulInteger, DynamicQuantizeLSTM). The weights dequantize exactly, so the
float model is recovered op by op: ConvInteger -> Conv, MatMulInteger -> MatMul (each with
the Cast/Mul that rescaled its integer output, and the bias added in integers), a
DynamicQuantizeLSTM -> LSTM, a DequantizeLinear of a constant -> the constant. The
result differs from the original only by the original's rounding of its activations;
edgeopt then quantizes the float model as usual. A statically quantized model (QDQ on
activations, QLinear* ops) keeps its scales fixed: it is refused as before.
"""

from __future__ import annotations

import numpy as np

from edgeopt.errors import ConversionError

DYNAMIC_OPS = {"DynamicQuantizeLinear", "DynamicQuantizeLSTM", "MatMulInteger",
               "ConvInteger", "DynamicQuantizeMatMul"}
# Ops that only a statically quantized model holds (scales fixed at calibration).
STATIC_OPS = {"QuantizeLinear", "QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearMul",
              "QGemm", "QAttention", "QLinearConcat", "QLinearSigmoid", "QLinearLeakyRelu",
              "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearSoftmax"}
_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def is_dynamically_quantized(model) -> bool:
    """Dynamic-quantization ops and no static quantization of activations."""
    ops = {node.op_type for node in model.graph.node}
    return bool(ops & DYNAMIC_OPS) and not ops & STATIC_OPS


class _Graph:
    """The main graph's constants, producers and consumers, edited in place."""

    def __init__(self, model) -> None:
        from onnx import numpy_helper

        self.model, self.graph = model, model.graph
        self.consts = {t.name: numpy_helper.to_array(t) for t in self.graph.initializer}
        for node in self.graph.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                self.consts[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
        self.producer = {out: n for n in self.graph.node for out in n.output}
        self.dropped: set[int] = set()
        self.added: list = []

    def consumers(self, tensor: str) -> list:
        return [n for n in self.graph.node if tensor in n.input and id(n) not in self.dropped]

    def only_consumer(self, tensor: str, op_type: str):
        users = self.consumers(tensor)
        if len(users) != 1 or users[0].op_type != op_type:
            return None
        return users[0]

    def const(self, tensor: str, what: str) -> np.ndarray:
        if tensor not in self.consts:
            raise ConversionError(f"{what} '{tensor}' is not a constant; the dynamically "
                                  "quantized model cannot be dequantized")
        return self.consts[tensor]

    def add_const(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), name))
        self.consts[name] = value
        return name

    def drop(self, *nodes) -> None:
        self.dropped.update(id(n) for n in nodes)

    def commit(self) -> None:
        """Remove the dropped nodes, place the new ones, then remove what nothing reads."""
        from onnx import helper

        kept = [n for n in self.graph.node if id(n) not in self.dropped]
        del self.graph.node[:]
        self.graph.node.extend(kept + self.added)
        _prune(self.graph)
        used = {t for n in self.graph.node for t in n.input} | {o.name for o in self.graph.output}
        inits = [t for t in self.graph.initializer if t.name in used]
        del self.graph.initializer[:]
        self.graph.initializer.extend(inits)
        self.model.graph.CopyFrom(helper.make_graph(  # topological order for the checker
            _sorted(self.graph), self.graph.name, self.graph.input, self.graph.output,
            self.graph.initializer, value_info=self.graph.value_info))


def _prune(graph) -> None:
    outputs = {o.name for o in graph.output}
    while True:
        read = {t for n in graph.node for t in n.input} | outputs
        kept = [n for n in graph.node if any(o in read for o in n.output if o)]
        if len(kept) == len(graph.node):
            return
        del graph.node[:]
        graph.node.extend(kept)


def _sorted(graph) -> list:
    ready = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    todo, order = list(graph.node), []
    while todo:
        left = [n for n in todo if not all(t in ready for t in n.input)]
        placed = [n for n in todo if all(t in ready for t in n.input)]
        if not placed:  # a tensor read from an outer scope: keep the rest as they are
            return order + left
        order += placed
        ready.update(o for n in placed for o in n.output)
        todo = left
    return order


def _dequantized(q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None,
                 axis: int) -> np.ndarray:
    """(q - zero) * scale, a 1-D scale and zero point broadcast along `axis`."""
    shape = [1] * q.ndim
    if np.ndim(scale) == 1 and scale.size > 1:
        shape[axis] = scale.size
    zero = np.zeros(1) if zero is None else zero
    return ((q.astype(np.float64) - np.reshape(zero, shape if np.size(zero) > 1 else [1]))
            * np.reshape(scale, shape if np.size(scale) > 1 else [1])).astype(np.float32)


def _rescale_chain(g: _Graph, node):
    """The ops after an integer Conv/MatMul: (bias Add or None, bias constant or None,
    Cast, output Mul, weight scale)."""
    out = node.output[0]
    bias_add = g.only_consumer(out, "Add")
    bias = None
    if bias_add is not None:
        other = next(t for t in bias_add.input if t != out)
        bias = _integer_bias(g, other)
        out = bias_add.output[0]
    cast = g.only_consumer(out, "Cast")
    mul = g.only_consumer(cast.output[0], "Mul") if cast is not None else None
    if mul is None:
        raise ConversionError(f"the integer output of {node.op_type} node {node.name or '?'} "
                              "is not rescaled by a Cast and a Mul as onnxruntime writes it; "
                              "the model cannot be dequantized")
    scales = g.producer.get(next(t for t in mul.input if t != cast.output[0]))
    if scales is None or scales.op_type != "Mul":
        raise ConversionError(f"{node.op_type} node {node.name or '?'}: its output scale is "
                              "not the product of the input and weight scales")
    weight_scale = next((g.consts[t] for t in scales.input if t in g.consts), None)
    if weight_scale is None:
        raise ConversionError(f"{node.op_type} node {node.name or '?'}: no constant weight "
                              "scale")
    return bias_add, bias, cast, mul, weight_scale


def _integer_bias(g: _Graph, tensor: str) -> np.ndarray:
    """The float bias behind onnxruntime's `Cast(Floor(bias / scale))` (Reshape optional)."""
    node = g.producer.get(tensor)
    while node is not None and node.op_type in ("Reshape", "Cast", "Floor", "Round"):
        node = g.producer.get(node.input[0])
    if node is None or node.op_type != "Div" or node.input[0] not in g.consts:
        raise ConversionError(f"the integer bias '{tensor}' is not a constant divided by "
                              "the scales; the model cannot be dequantized")
    return g.consts[node.input[0]]


def _integer_op(g: _Graph, node) -> str:
    from onnx import helper

    quant = g.producer.get(node.input[0])
    if quant is None or quant.op_type != "DynamicQuantizeLinear":
        raise ConversionError(f"{node.op_type} node {node.name or '?'} reads an input that "
                              "DynamicQuantizeLinear did not quantize; only dynamically "
                              "quantized models are dequantized")
    bias_add, bias, cast, mul, scale = _rescale_chain(g, node)
    zero = g.const(node.input[3], "weight zero point") if len(node.input) > 3 and \
        node.input[3] else None
    is_conv = node.op_type == "ConvInteger"
    weight = _dequantized(g.const(node.input[1], "weight"), scale, zero,
                          0 if is_conv else 1)
    name = node.name or node.output[0]
    inputs = [quant.input[0], g.add_const(f"{name}_dequantized_weight", weight)]
    if is_conv:
        if bias is not None:
            inputs.append(g.add_const(f"{name}_dequantized_bias", bias.reshape(-1)))
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
                 if a.name in _CONV_ATTRS}
        g.added.append(helper.make_node("Conv", inputs, [mul.output[0]], name, **attrs))
    elif bias is None:
        g.added.append(helper.make_node("MatMul", inputs, [mul.output[0]], name))
    else:
        g.added.append(helper.make_node("MatMul", inputs, [f"{name}_float"], name))
        g.added.append(helper.make_node("Add", [f"{name}_float", g.add_const(
            f"{name}_dequantized_bias", bias)], [mul.output[0]], f"{name}_bias"))
    g.drop(node, cast, mul, *([bias_add] if bias_add is not None else []))
    return node.op_type


def _lstm(g: _Graph, node) -> str:
    """DynamicQuantizeLSTM(X, W, R, B, seq, h0, c0, P, W_scale, W_zp, R_scale, R_zp):
    W [dirs, input, 4*hidden] quantized per direction (or per gate column) -> ONNX LSTM's
    W [dirs, 4*hidden, input]."""
    from onnx import helper

    inputs = list(node.input) + [""] * (12 - len(node.input))
    name = node.name or node.output[0]
    floats = []
    for at, what, scale_at in ((1, "W", 8), (2, "R", 10)):
        q = g.const(inputs[at], f"LSTM {what}")
        scale = g.const(inputs[scale_at], f"LSTM {what} scale")
        zero = g.const(inputs[scale_at + 1], f"LSTM {what} zero point")
        shape = (q.shape[0], 1, -1)
        deq = (q.astype(np.float64) - np.reshape(zero, shape)) * np.reshape(scale, shape)
        floats.append(g.add_const(f"{name}_dequantized_{what}",
                                  deq.transpose(0, 2, 1).astype(np.float32)))
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    lstm_inputs = [inputs[0], *floats, *inputs[3:8]]
    while lstm_inputs and not lstm_inputs[-1]:
        lstm_inputs.pop()
    g.added.append(helper.make_node("LSTM", lstm_inputs, list(node.output), name, **attrs))
    g.drop(node)
    return "DynamicQuantizeLSTM"


def _dequantize_constant(g: _Graph, node) -> str:
    from onnx import helper

    axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 1)
    q = g.const(node.input[0], "DequantizeLinear input")
    scale = g.const(node.input[1], "DequantizeLinear scale")
    zero = g.consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    g.add_const(node.output[0], _dequantized(q, scale, zero, axis % max(q.ndim, 1)))
    g.drop(node)
    return "DequantizeLinear"


def dequantize(model) -> dict[str, int]:
    """Rewrite a dynamically quantized model into float ops (in place); the count of each
    op kind replaced. Raises ConversionError for a pattern it does not know."""
    g = _Graph(model)
    done: dict[str, int] = {}
    rewrites = {"ConvInteger": _integer_op, "MatMulInteger": _integer_op,
                "DynamicQuantizeLSTM": _lstm, "DequantizeLinear": _dequantize_constant}
    for node in list(model.graph.node):
        rewrite = rewrites.get(node.op_type)
        if rewrite is not None:
            kind = rewrite(g, node)
            done[kind] = done.get(kind, 0) + 1
    g.commit()
    left = sorted({n.op_type for n in model.graph.node} & (DYNAMIC_OPS | {"DequantizeLinear"}))
    if left:
        raise ConversionError(f"the dynamically quantized model still holds {', '.join(left)} "
                              "after dequantization; give the float model")
    return done
