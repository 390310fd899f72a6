"""The kernels an ONNX graph runs, as the latency estimator costs them (the same device cost
model as .tflite artifacts: op kinds, rooflines, per-op overheads, fitted efficiencies).

`cost_view` returns a `Graph` with the ONNX graph's op indices (so a placement of the ONNX
nodes applies to it unchanged) in which:

* each node carries the TFLite builtin name of its kind (``onnx_op_kinds.toml``); Conv
  filters are re-laid out as TFLite's ``[out, kh, kw, in]`` (depthwise: ``[1, kh, kw, out]``)
  and Gemm/MatMul on a constant as FULLY_CONNECTED ``[units, depth]``;
* QDQ groups are folded as every onnxruntime EP runs them: a node reads the quantized
  tensor its DequantizeLinear inputs dequantize and writes what its QuantizeLinear outputs
  quantize; constant DequantizeLinear weights count as int8 parameters;
* nodes that run inside another kernel (Identity, Dropout, a BatchNormalization or
  activation fused into the Conv before it, the folded Q/DQ) are moved out of subgraph 0
  (``subgraph = -1``), which the estimator does not cost.

    >>> view = cost_view(read_onnx("model.onnx"))       # doctest: +SKIP
    >>> [op.op for op in view.ops_in_subgraph(0)][:2]    # doctest: +SKIP
    ['CONV_2D', 'DEPTHWISE_CONV_2D']
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources

from edgeopt.graph import Graph, Op, Tensor

NOT_COSTED = -1
MAC_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "QLinearConv", "QLinearMatMul"})
# QOperator nodes: the position of their weight input (the data input is 0).
QLINEAR_WEIGHT = {"QLinearConv": 3, "QLinearMatMul": 3}


@cache
def kinds() -> dict:
    text = resources.files("edgeopt.delegates").joinpath("onnx_op_kinds.toml").read_text("utf-8")
    return tomllib.loads(text)


@dataclass
class _Index:
    graph: Graph
    producers: dict[int, int]
    consumers: dict[int, list[int]]

    @classmethod
    def build(cls, graph: Graph) -> _Index:
        producers, consumers = {}, {}
        for op in graph.ops:
            producers.update({t: op.index for t in op.outputs if t >= 0})
            for t in op.inputs:
                if t >= 0:
                    consumers.setdefault(t, []).append(op.index)
        return cls(graph, producers, consumers)

    def producer(self, t: int) -> Op | None:
        i = self.producers.get(t)
        return None if i is None else self.graph.ops[i]

    def users(self, t: int) -> list[Op]:
        return [self.graph.ops[i] for i in self.consumers.get(t, [])]


def cost_view(graph: Graph) -> Graph:
    """The ONNX ``graph`` as the kernels the runtime runs (see the module doc)."""
    index = _Index.build(graph)
    folded = _folded(index)
    tensors = list(graph.tensors)
    ops = tuple(_costed_op(index, op, folded, tensors) if op.index not in folded
                else replace(op, subgraph=NOT_COSTED) for op in graph.ops)
    return replace(graph, format="onnx-kernels", tensors=tuple(tensors), ops=ops)


def folded_at_load(graph: Graph) -> set[int]:
    """Main-graph nodes onnxruntime removes when it loads the model: Identity, Dropout,
    Constant, and nodes whose inputs are all constants (constant folding), or a Shape of a
    fixed-size tensor (graph order, so chains fold too)."""
    removed = set(kinds()["absorbed"])
    constant = {i for i, t in enumerate(graph.tensors) if t.is_constant}
    folded: set[int] = set()
    for op in graph.ops_in_subgraph(0):
        inputs = [t for t in op.inputs if t >= 0]
        static_shape = op.op == "Shape" and inputs and _fixed(graph.tensors[inputs[0]])
        if op.op in removed or static_shape or (inputs and all(t in constant for t in inputs)
                                                and op.op not in kinds()["not_folded"]):
            folded.add(op.index)
            constant.update(t for t in op.outputs if t >= 0)
    return folded


def _fixed(tensor: Tensor) -> bool:
    return tensor.shape_signature is not None and not tensor.is_dynamic


def _folded(index: _Index) -> set[int]:
    """Nodes that run inside another kernel or not at all."""
    table = kinds()
    outputs = set(index.graph.outputs)
    folded = folded_at_load(index.graph)
    for op in index.graph.ops:
        if op.subgraph != 0 or op.index in folded:
            continue
        if _folded_qdq(index, op, outputs):
            folded.add(op.index)
        elif op.op in table["fused_after_mac"] and _after_mac(index, op, folded):
            folded.add(op.index)
    return folded


def _folded_qdq(index: _Index, op: Op, outputs: set[int]) -> bool:
    if op.op == "DequantizeLinear":
        source = index.graph.tensors[op.inputs[0]]
        users = index.users(op.outputs[0])
        return source.is_constant or (bool(users) and op.outputs[0] not in outputs and
                                      all(u.op not in ("QuantizeLinear",) for u in users))
    if op.op == "QuantizeLinear":
        producer = index.producer(op.inputs[0])
        return producer is not None and producer.op not in ("DequantizeLinear",
                                                             "QuantizeLinear")
    return False


def _after_mac(index: _Index, op: Op, folded: set[int]) -> bool:
    """Its data input comes from a MAC node (or a node fused into one) it alone reads."""
    producer = index.producer(op.inputs[0])
    while producer is not None and producer.index in folded and \
            producer.op not in ("DequantizeLinear", "QuantizeLinear"):
        if producer.op in MAC_OPS:
            break
        producer = index.producer(producer.inputs[0])
    return (producer is not None and producer.op in MAC_OPS and
            len(index.users(op.inputs[0])) == 1)


def _resolve_input(index: _Index, t: int, folded: set[int]) -> int:
    """The tensor a kernel really reads: through folded DQ / fused / removed nodes."""
    for _ in range(16):
        producer = index.producer(t) if t >= 0 else None
        if producer is None or producer.index not in folded or not producer.inputs or \
                producer.op == "QuantizeLinear":  # its output is the quantized tensor
            return t
        t = producer.inputs[0]
    return t


def _resolve_output(index: _Index, t: int, folded: set[int]) -> int:
    """The tensor a kernel really writes: through the fused nodes and Q nodes after it."""
    for _ in range(16):
        users = index.users(t)
        if not users or not all(u.index in folded for u in users):
            return t
        t = users[0].outputs[0]
    return t


def _costed_op(index: _Index, op: Op, folded: set[int], tensors: list[Tensor]) -> Op:
    inputs = tuple(_resolve_input(index, t, folded) for t in op.inputs)
    outputs = tuple(_resolve_output(index, t, folded) for t in op.outputs)
    op = replace(op, inputs=inputs, outputs=outputs)
    if op.op in ("Conv", "QLinearConv", "ConvTranspose"):
        return _conv(op, tensors)
    if op.op in ("Gemm", "MatMul", "QLinearMatMul"):
        return _matmul(op, tensors)
    name = kinds()["builtins"].get(op.op, op.op)
    options = dict(op.options)
    if op.op in ("MaxPool", "AveragePool") and len(options.get("kernel_shape", ())) == 2:
        options["filter_height"], options["filter_width"] = options["kernel_shape"]
    return replace(op, op=name, options=options)


def _weight_position(op: Op) -> int:
    return QLINEAR_WEIGHT.get(op.op, 1)


def _relaid(tensors: list[Tensor], t: int, shape: tuple[int, ...]) -> int:
    """A copy of tensor ``t`` with ``shape`` (its bytes unchanged), appended to ``tensors``."""
    tensors.append(replace(tensors[t], shape=shape, shape_signature=shape))
    return len(tensors) - 1


def _kernel_inputs(op: Op, weight: int) -> tuple[int, ...]:
    """Data, weight, then any bias: the TFLite input order."""
    bias = op.inputs[8] if op.op == "QLinearConv" and len(op.inputs) > 8 else (
        op.inputs[2] if op.op in ("Conv", "Gemm", "ConvTranspose") and len(op.inputs) > 2
        else -1)
    return (op.inputs[0], weight) + ((bias,) if bias >= 0 else ())


def _conv(op: Op, tensors: list[Tensor]) -> Op:
    position = _weight_position(op)
    if position >= len(op.inputs) or op.inputs[position] < 0:
        return replace(op, op="CONV_2D")
    w = op.inputs[position]
    shape = tensors[w].shape
    if len(shape) != 4:
        return replace(op, op="CONV_2D", inputs=_kernel_inputs(op, w))
    group = int(op.options.get("group", 1))
    if op.op == "ConvTranspose":
        cin, cout_g, kh, kw = shape
        relaid = _relaid(tensors, w, (cout_g * group, kh, kw, cin // max(group, 1)))
        return replace(op, op="TRANSPOSE_CONV", inputs=_kernel_inputs(op, relaid))
    out, per_group, kh, kw = shape
    if group > 1 and per_group == 1 and group == out:
        relaid, name = _relaid(tensors, w, (1, kh, kw, out)), "DEPTHWISE_CONV_2D"
    else:
        relaid, name = _relaid(tensors, w, (out, kh, kw, per_group)), "CONV_2D"
    return replace(op, op=name, inputs=_kernel_inputs(op, relaid))


def _matmul(op: Op, tensors: list[Tensor]) -> Op:
    position = _weight_position(op)
    w = op.inputs[position] if position < len(op.inputs) else -1
    if w < 0 or not tensors[w].is_constant or len(tensors[w].shape) != 2:
        return replace(op, op="BATCH_MATMUL")
    k, n = tensors[w].shape
    if op.op == "Gemm" and op.options.get("transB", 0):
        n, k = k, n
    return replace(op, op="FULLY_CONNECTED",
                   inputs=_kernel_inputs(op, _relaid(tensors, w, (n, k))))
