"""A variance written as E[x²] − E[x]² rewritten as E[(x − E[x])²], its two-pass form.

Flax's LayerNorm and GroupNorm compute the variance the "fast" way (mean of the squares
minus the square of the mean: `use_fast_variance`, on by default), and jax2tf exports it
as written; hand-written normalisations in PyTorch often do the same. The two are equal in
exact arithmetic, but the difference of two close numbers cancels: in float32 it loses a
few digits, and once each of the two means sits on an int8 grid the difference is mostly
rounding. magika's file-type model (jax2tf, two layer norms) lost 7–21 points of top-1 under
full-integer post-training quantization for this reason alone (its sum of squares' int8
grid by itself took it from 94 % to 49 %); the two-pass form quantizes the centred values,
whose squares' mean is the variance itself, and nothing cancels.

The rewrite matches, per `Sub(P, Q)` of the main graph:
    P = mean(x · x)   and   Q = mean(x) · mean(x)     (the same x, axes and keepdims)
where a mean is a ReduceMean, or a ReduceSum times 1/n (or divided by n) with n constant,
and a square is `Mul(a, a)` or `Pow(a, 2)`. It replaces the Sub by
    mean((x − mean(x)) · (x − mean(x)))
with the same reduction and scale, reusing the graph's own mean(x); nodes left unused are
dropped. Every rewrite is checked against the original in onnxruntime
(converters/onnx_adapt).

    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    >>> v = helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 1])
    >>> nodes = [helper.make_node("Mul", ["x", "x"], ["xx"]),
    ...          helper.make_node("ReduceMean", ["xx"], ["p"], axes=[1]),
    ...          helper.make_node("ReduceMean", ["x"], ["m"], axes=[1]),
    ...          helper.make_node("Mul", ["m", "m"], ["q"]),
    ...          helper.make_node("Sub", ["p", "q"], ["v"])]
    >>> model = helper.make_model(helper.make_graph(nodes, "g", [x], [v]),
    ...                           opset_imports=[helper.make_opsetid("", 13)])
    >>> two_pass_variance(model)
    1
    >>> [n.op_type for n in model.graph.node]
    ['ReduceMean', 'Sub', 'Mul', 'ReduceMean']
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeopt.converters.onnx_tidy import constants

_SUFFIX = "__two_pass"


@dataclass(frozen=True)
class _Mean:
    """`x` reduced over `axes`: a ReduceMean (scale None) or a ReduceSum times or divided
    by a constant (`scale`: the node's op type and the constant's name)."""

    x: str
    axes: tuple[int, ...] | None
    keepdims: int
    scale: tuple[str, str] | None


def _opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _attr(node, name: str, default):
    from onnx import helper

    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _reduction(node, values) -> tuple[tuple[int, ...] | None, int] | None:
    """(axes, keepdims) of a ReduceMean/ReduceSum, axes as an attribute or a constant
    input; None when they are not constants or an empty axes input means "no-op"."""
    axes = _attr(node, "axes", None)
    if axes is None and len(node.input) > 1 and node.input[1]:
        if node.input[1] not in values:
            return None
        axes = values[node.input[1]].reshape(-1).tolist()
    if axes is not None and not axes and _attr(node, "noop_with_empty_axes", 0):
        return None
    return (None if axes is None else tuple(int(a) for a in axes)), int(_attr(node, "keepdims", 1))


def _mean(name: str, producer, values) -> _Mean | None:
    node = producer.get(name)
    if node is None:
        return None
    if node.op_type == "ReduceMean":
        reduction = _reduction(node, values)
        return None if reduction is None else _Mean(node.input[0], *reduction, None)
    if node.op_type not in ("Mul", "Div"):
        return None
    sides = ((0, 1), (1, 0)) if node.op_type == "Mul" else ((0, 1),)
    for summed, constant in sides:
        total = producer.get(node.input[summed])
        scale = values.get(node.input[constant])
        if total is None or total.op_type != "ReduceSum" or scale is None or scale.size != 1:
            continue
        reduction = _reduction(total, values)
        if reduction is not None:
            return _Mean(total.input[0], *reduction, (node.op_type, node.input[constant]))
    return None


def _square(name: str, producer, values) -> str | None:
    node = producer.get(name)
    if node is None:
        return None
    if node.op_type == "Mul" and node.input[0] == node.input[1]:
        return node.input[0]
    if node.op_type == "Pow" and node.input[1] in values and \
            values[node.input[1]].size == 1 and float(values[node.input[1]].reshape(())) == 2.0:
        return node.input[0]
    return None


def _replacement(sub, mean_name: str, mean: _Mean, opset: int, graph) -> list:
    """The nodes computing Sub's output in two passes from x and the graph's mean(x)."""
    from onnx import helper, numpy_helper

    tag = sub.output[0] + _SUFFIX
    nodes = []

    def axes_input(role: str) -> str:
        name = f"{tag}_{role}"
        graph.initializer.append(numpy_helper.from_array(np.array(mean.axes, np.int64), name))
        return name

    broadcast = mean_name
    if not mean.keepdims and mean.axes is not None:  # put the reduced axes back
        broadcast = f"{tag}_mean"
        if opset >= 13:
            nodes.append(helper.make_node("Unsqueeze", [mean_name, axes_input("unsqueeze")],
                                          [broadcast]))
        else:
            nodes.append(helper.make_node("Unsqueeze", [mean_name], [broadcast],
                                          axes=list(mean.axes)))
    nodes.append(helper.make_node("Sub", [mean.x, broadcast], [f"{tag}_centred"]))
    nodes.append(helper.make_node("Mul", [f"{tag}_centred", f"{tag}_centred"],
                                  [f"{tag}_squares"]))
    op = "ReduceMean" if mean.scale is None else "ReduceSum"
    out = sub.output[0] if mean.scale is None else f"{tag}_sum"
    axes_as_input = op == "ReduceSum" and opset >= 13 or op == "ReduceMean" and opset >= 18
    if mean.axes is None:
        nodes.append(helper.make_node(op, [f"{tag}_squares"], [out], keepdims=mean.keepdims))
    elif axes_as_input:
        nodes.append(helper.make_node(op, [f"{tag}_squares", axes_input("axes")], [out],
                                      keepdims=mean.keepdims))
    else:
        nodes.append(helper.make_node(op, [f"{tag}_squares"], [out], axes=list(mean.axes),
                                      keepdims=mean.keepdims))
    if mean.scale is not None:
        nodes.append(helper.make_node(mean.scale[0], [out, mean.scale[1]], [sub.output[0]]))
    for node in nodes:
        node.name = node.output[0]
    return nodes


def _drop_unused(graph) -> None:
    """Remove nodes none of whose outputs is read (by a node, a subgraph or the graph)."""
    outputs = {o.name for o in graph.output}
    while True:
        read = set(outputs)
        for node in graph.node:
            read.update(node.input)
            for attribute in node.attribute:  # a subgraph may read outer names
                for body in [attribute.g] if attribute.HasField("g") else attribute.graphs:
                    read.update(i for n in body.node for i in n.input)
        dead = [n for n in graph.node if not any(o in read for o in n.output if o)]
        if not dead:
            return
        for node in dead:
            graph.node.remove(node)


def _same_reduction(a: _Mean, b: _Mean, values) -> bool:
    if (a.axes, a.keepdims) != (b.axes, b.keepdims) or (a.scale is None) != (b.scale is None):
        return False
    return a.scale is None or (a.scale[0] == b.scale[0] and
                               np.array_equal(values[a.scale[1]], values[b.scale[1]]))


def two_pass_variance(model) -> int:
    """Rewrite every fast variance of the main graph in place; returns how many."""
    graph = model.graph
    values = constants(graph)
    producer = {o: n for n in graph.node for o in n.output if o}
    opset = _opset(model)
    rewritten = 0
    for sub in [n for n in graph.node if n.op_type == "Sub"]:
        squares = _mean(sub.input[0], producer, values)  # mean(x · x)
        mean_out = _square(sub.input[1], producer, values)  # the tensor mean(x)
        mean = None if mean_out is None else _mean(mean_out, producer, values)
        if squares is None or mean is None or \
                _square(squares.x, producer, values) != mean.x or \
                not _same_reduction(squares, mean, values):
            continue
        at = list(graph.node).index(sub)
        replacement = _replacement(sub, mean_out, mean, opset, graph)
        graph.node.remove(sub)
        for offset, node in enumerate(replacement):
            graph.node.insert(at + offset, node)
        rewritten += 1
    if rewritten:
        _drop_unused(graph)
    return rewritten
