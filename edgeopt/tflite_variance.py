"""A `.tflite`'s variance written as E[x²] − E[x]² rewritten as E[(x − E[x])²].

The `.tflite` side of converters/onnx_variance (read its docstring for why): a model
exported from JAX/flax to TFLite carries flax's fast variance as MEAN (or SUM times or
divided by n) of SQUARE (or MUL(x, x)), minus the SQUARE of the MEAN. On int8 grids that
difference is mostly rounding. Per SUB of that shape, this writes
    SUB(x, mean(x)) -> MUL(d, d) -> the same reduction (and scale) as the graph's
reusing the graph's own mean(x) (put back to x's rank with EXPAND_DIMS when the reduction
dropped its axes); the ops left unused go. `tflite_prepare` runs it on every `.tflite`
source and checks the result against the original under LiteRT.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeopt.tflite_edit import constant, opcode_index, opcode_name, schema, set_constant

_NONE, _RELU = 0, 1  # the schema's ActivationFunctionType


@dataclass(frozen=True)
class _Mean:
    """`x` reduced by `reduce` (a MEAN or SUM op), then scaled by `scale` (a MUL or DIV op
    by a constant scalar; None for MEAN)."""

    x: int
    reduce: Any
    axes: tuple[int, ...]
    keep: bool
    scale: Any | None
    factor: float | None


class _Graph:
    """The subgraph's producers and constants, for matching."""

    def __init__(self, model: Any, subgraph: Any) -> None:
        self.model, self.subgraph = model, subgraph
        self.producer = {int(o): op for op in subgraph.operators or [] for o in op.outputs}

    def op(self, tensor: int) -> tuple[str, Any] | tuple[None, None]:
        op = self.producer.get(int(tensor))
        return (opcode_name(self.model, op)[0], op) if op is not None else (None, None)

    def scalar(self, tensor: int) -> float | None:
        values = constant(self.model, self.subgraph.tensors[int(tensor)])
        return float(values.reshape(-1)[0]) if values is not None and values.size == 1 \
            else None

    def square_of(self, tensor: int) -> int | None:
        name, op = self.op(tensor)
        if name == "SQUARE":
            return int(op.inputs[0])
        if name == "MUL" and int(op.inputs[0]) == int(op.inputs[1]) and _no_activation(op):
            return int(op.inputs[0])
        return None

    def reduction(self, op: Any) -> tuple[tuple[int, ...], bool] | None:
        axes = constant(self.model, self.subgraph.tensors[int(op.inputs[1])])
        if axes is None:
            return None
        keep = bool(op.builtinOptions.keepDims) if op.builtinOptions is not None else False
        rank = len(self.subgraph.tensors[int(op.inputs[0])].shape)
        return tuple(sorted(int(a) % rank for a in axes.reshape(-1))), keep

    def mean_of(self, tensor: int) -> _Mean | None:
        name, op = self.op(tensor)
        if name == "MEAN":
            reduction = self.reduction(op)
            return None if reduction is None else _Mean(int(op.inputs[0]), op, *reduction,
                                                        None, None)
        if name not in ("MUL", "DIV") or not _no_activation(op):
            return None
        sides = ((0, 1), (1, 0)) if name == "MUL" else ((0, 1),)
        for summed, by in sides:
            inner_name, inner = self.op(op.inputs[summed])
            factor = self.scalar(op.inputs[by])
            if inner_name == "SUM" and factor is not None:
                reduction = self.reduction(inner)
                if reduction is not None:
                    return _Mean(int(inner.inputs[0]), inner, *reduction, op, factor)
        return None


def _activation(op: Any) -> int:
    return int(getattr(op.builtinOptions, "fusedActivationFunction", 0) or 0)


def _no_activation(op: Any) -> bool:
    return _activation(op) == _NONE


def _same(a: _Mean, b: _Mean, graph: _Graph) -> bool:
    if (a.axes, a.keep) != (b.axes, b.keep) or (a.scale is None) != (b.scale is None):
        return False
    if opcode_name(graph.model, a.reduce)[0] != opcode_name(graph.model, b.reduce)[0]:
        return False
    return a.scale is None or (opcode_name(graph.model, a.scale)[0] ==
                               opcode_name(graph.model, b.scale)[0] and a.factor == b.factor)


def _tensor(subgraph: Any, like: Any, name: str, shape=None, signature=None) -> int:
    """A new float32 activation tensor shaped like `like` (or `shape`); its index."""
    generated = schema()
    tensor = generated.TensorT()
    tensor.name = name.encode()
    tensor.type = generated.TensorType.FLOAT32
    tensor.shape = list(like.shape) if shape is None else list(shape)
    signature = like.shapeSignature if signature is None else signature
    tensor.shapeSignature = None if signature is None else list(signature)
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def _op(model: Any, name: str, inputs: list[int], outputs: list[int], options=None,
        options_type: str | None = None) -> Any:
    generated = schema()
    op = generated.OperatorT()
    op.opcodeIndex = opcode_index(model, name, 1)
    op.inputs, op.outputs = list(inputs), list(outputs)
    if options is not None:
        op.builtinOptionsType = getattr(generated.BuiltinOptions, options_type)
        op.builtinOptions = options
    return op


def _copy_op(op: Any, inputs: list[int], outputs: list[int]) -> Any:
    new = copy.deepcopy(op)
    new.inputs, new.outputs = list(inputs), list(outputs)
    return new


def _replacement(model: Any, subgraph: Any, sub: Any, mean_out: int, mean: _Mean,
                 squares: _Mean) -> list:
    """The ops computing SUB's output in two passes."""
    generated = schema()
    x_tensor = subgraph.tensors[mean.x]
    base = (subgraph.tensors[int(sub.outputs[0])].name or b"variance").decode(
        "utf-8", "replace") + "/two_pass"
    ops, broadcast = [], mean_out
    if not mean.keep:  # put the reduced axes back, one EXPAND_DIMS each, lowest first
        shape = list(subgraph.tensors[mean_out].shape)
        signature = subgraph.tensors[mean_out].shapeSignature
        signature = None if signature is None else list(signature)
        for axis in mean.axes:
            shape.insert(axis, 1)
            if signature is not None:
                signature.insert(axis, 1)
            axis_tensor = generated.TensorT()
            axis_tensor.name = f"{base}/axis{axis}".encode()
            axis_tensor.type, axis_tensor.shape = generated.TensorType.INT32, [1]
            set_constant(model, axis_tensor, np.array([axis], np.int32))
            subgraph.tensors.append(axis_tensor)
            axis_index = len(subgraph.tensors) - 1
            out = _tensor(subgraph, x_tensor, f"{base}/mean{axis}", shape, signature)
            ops.append(_op(model, "EXPAND_DIMS", [broadcast, axis_index], [out],
                           generated.ExpandDimsOptionsT(), "ExpandDimsOptions"))
            broadcast = out
    centred = _tensor(subgraph, x_tensor, f"{base}/centred")
    sub_options = generated.SubOptionsT()
    ops.append(_op(model, "SUB", [mean.x, broadcast], [centred], sub_options, "SubOptions"))
    squared = _tensor(subgraph, x_tensor, f"{base}/squares")
    ops.append(_op(model, "MUL", [centred, centred], [squared], generated.MulOptionsT(),
                   "MulOptions"))
    target = int(sub.outputs[0])
    reduced = target if squares.scale is None else _tensor(
        subgraph, subgraph.tensors[int(squares.reduce.outputs[0])], f"{base}/sum")
    ops.append(_copy_op(squares.reduce, [squared, int(squares.reduce.inputs[1])], [reduced]))
    if squares.scale is None:
        return ops
    position = 0 if int(squares.scale.inputs[0]) == int(squares.reduce.outputs[0]) else 1
    inputs = [int(i) for i in squares.scale.inputs]
    inputs[position] = reduced
    ops.append(_copy_op(squares.scale, inputs, [target]))
    return ops


def _drop_dead_ops(model: Any, subgraph: Any) -> None:
    """Ops none of whose outputs is read by an op, a subgraph output or a signature."""
    index = (model.subgraphs or []).index(subgraph)
    kept_outputs = {int(i) for i in subgraph.outputs}
    for signature in model.signatureDefs or []:
        if signature.subgraphIndex == index:
            kept_outputs.update(int(m.tensorIndex) for m in signature.outputs or [])
    while True:
        read = set(kept_outputs)
        for op in subgraph.operators or []:
            read.update(int(i) for i in op.inputs)
        dead = [op for op in subgraph.operators if not any(int(o) in read for o in op.outputs)]
        if not dead:
            return
        subgraph.operators = [op for op in subgraph.operators if op not in dead]


def two_pass_variances(model: Any, subgraph: Any) -> int:
    """Rewrite each fast variance of `subgraph` in place; returns how many."""
    graph = _Graph(model, subgraph)
    rewritten = 0
    for sub in list(subgraph.operators or []):
        # flax clamps the variance at 0: the converter fuses that as the SUB's RELU, which
        # a mean of squares needs no more
        if opcode_name(model, sub)[0] != "SUB" or len(sub.inputs) != 2 or \
                _activation(sub) not in (_NONE, _RELU):
            continue
        squares = graph.mean_of(sub.inputs[0])  # mean(x · x)
        mean_out = graph.square_of(sub.inputs[1])  # the tensor mean(x)
        mean = None if mean_out is None else graph.mean_of(mean_out)
        if squares is None or mean is None or graph.square_of(squares.x) != mean.x or \
                not _same(squares, mean, graph) or \
                _type(subgraph, mean.x) != schema().TensorType.FLOAT32:
            continue
        at = subgraph.operators.index(sub)
        replacement = _replacement(model, subgraph, sub, mean_out, mean, squares)
        subgraph.operators[at:at + 1] = replacement
        rewritten += 1
    if rewritten:
        _drop_dead_ops(model, subgraph)
    return rewritten


def _type(subgraph: Any, tensor: int) -> int:
    return subgraph.tensors[int(tensor)].type
