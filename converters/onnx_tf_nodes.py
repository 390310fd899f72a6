"""One ONNX node on float tensors as TensorFlow ops: the kept-whole node, differentiable.

A node the ONNX->Keras import keeps whole (converters/onnx_frozen.py) runs in onnxruntime
through ``tf.numpy_function``, which has no gradient: distillation and QAT cannot train
through it, and a model whose layer norm or softmax is written as Sub/Sqrt/Reciprocal/
ReduceSum (magika's) has no gradient at all. Here the same node, decoded from its one-node
model, is written with TensorFlow ops in the node's own (ONNX) semantics and layout, so
gradients flow and the values are onnxruntime's to float rounding.

Only nodes whose every tensor is float take this path (an integer or boolean tensor has no
gradient to give, and ONNX's integer semantics, e.g. Div's truncation, differ from
TensorFlow's); any op or attribute not listed here stays in onnxruntime.

    >>> fn = node_function(one_node_model_bytes)      # doctest: +SKIP
    >>> fn([x_in_onnx_layout]) -> [outputs]            # None when the node is not covered
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

FLOAT_TYPES = {1, 10, 11, 16}   # ONNX FLOAT, FLOAT16, DOUBLE, BFLOAT16
# ops whose constant inputs are values (all must be float), not shapes or axes
_VARIADIC_OPS = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "MatMul",
                 "Gemm", "Concat", "Where", "Clip")

NodeFn = Callable[[list[Any]], list[Any]]


@cache
def _unary() -> dict[str, Callable[[Any, Any, dict], Any]]:
    import tensorflow as tf

    def elu(x, a):
        return tf.where(x > 0, x, a.get("alpha", 1.0) * (tf.exp(x) - 1))

    def hard_sigmoid(x, a):
        return tf.clip_by_value(a.get("alpha", 0.2) * x + a.get("beta", 0.5), 0.0, 1.0)

    def gelu(x, a):
        return tf.nn.gelu(x, approximate=a.get("approximate", b"none") in (b"tanh", "tanh"))

    return {
        "Sqrt": lambda x, a: tf.sqrt(x), "Exp": lambda x, a: tf.exp(x),
        "Reciprocal": lambda x, a: 1.0 / x, "Abs": lambda x, a: tf.abs(x),
        "Neg": lambda x, a: -x, "Erf": lambda x, a: tf.math.erf(x),
        "Log": lambda x, a: tf.math.log(x), "Relu": lambda x, a: tf.nn.relu(x),
        "Sigmoid": lambda x, a: tf.sigmoid(x), "Tanh": lambda x, a: tf.tanh(x),
        "Softplus": lambda x, a: tf.nn.softplus(x), "Identity": lambda x, a: tf.identity(x),
        "Floor": lambda x, a: tf.floor(x), "Ceil": lambda x, a: tf.math.ceil(x),
        "Round": lambda x, a: tf.round(x), "Sign": lambda x, a: tf.sign(x),
        "Sin": lambda x, a: tf.sin(x), "Cos": lambda x, a: tf.cos(x),
        "Softsign": lambda x, a: tf.nn.softsign(x), "Elu": elu,
        "LeakyRelu": lambda x, a: tf.nn.leaky_relu(x, a.get("alpha", 0.01)),
        "HardSigmoid": hard_sigmoid, "HardSwish": lambda x, a: x * hard_sigmoid(
            x, {"alpha": 1 / 6, "beta": 0.5}), "Gelu": gelu,
    }


@cache
def _variadic() -> dict[str, Callable[[list], Any]]:
    import functools

    import tensorflow as tf

    def fold(op):
        return lambda xs: functools.reduce(op, xs)

    return {"Add": fold(tf.add), "Sub": fold(tf.subtract), "Mul": fold(tf.multiply),
            "Div": fold(tf.divide), "Pow": fold(tf.pow), "Max": fold(tf.maximum),
            "Min": fold(tf.minimum), "Sum": fold(tf.add),
            "Mean": lambda xs: functools.reduce(tf.add, xs) / len(xs)}


REDUCE = {"ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max",
          "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod"}


def _axes(node: Any, attrs: dict, consts: dict, index: int) -> list[int] | None:
    """Axes from the attribute (older opsets) or a constant input (newer); None: none given."""
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    if len(node.input) > index and node.input[index]:
        if node.input[index] not in consts:
            raise _NotCovered
        return [int(a) for a in consts[node.input[index]].reshape(-1)]
    return None


class _NotCovered(Exception):
    """This node (its op, attribute or a non-constant parameter) stays in onnxruntime."""


def _off_batch(axes: list[int], rank: int, batched: bool) -> list[int]:
    """Axes made positive; the batch axis (0) among them is not covered when ``batched``:
    the node was shaped for one sample and runs here on the whole batch."""
    found = [int(a) % rank for a in axes]
    if batched and 0 in found:
        raise _NotCovered
    return found


def _reduce(node: Any, attrs: dict, consts: dict, x: Any, batched: bool) -> Any:
    import tensorflow as tf

    axes = _axes(node, attrs, consts, 1)
    keep = bool(attrs.get("keepdims", 1))
    if axes is None or not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return tf.identity(x)
        if batched:
            raise _NotCovered  # all axes: the batch too
        axes = list(range(len(x.shape)))
    axes = _off_batch(axes, len(x.shape), batched)
    return getattr(tf.math, REDUCE[node.op_type])(x, axis=axes, keepdims=keep)


def _reshape(node: Any, attrs: dict, consts: dict, x: Any, batched: bool) -> Any:
    import tensorflow as tf

    shape = [int(v) for v in _const(node, consts, 1).reshape(-1)]
    if not batched:  # one sample's tensor: ONNX's own rule (0 copies the dimension)
        if not attrs.get("allowzero", 0):
            shape = [x.shape[i] if v == 0 else v for i, v in enumerate(shape)]
        return tf.reshape(x, shape)
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if v == 0 and i else v for i, v in enumerate(shape)]
    if not shape or shape[0] not in (0, 1, -1) or any(v is None for v in shape[1:]) or \
            (shape[0] == -1 and -1 in shape[1:]):
        raise _NotCovered
    if -1 not in shape[1:] and any(d is None for d in x.shape[1:]):
        raise _NotCovered
    return tf.reshape(x, [tf.shape(x)[0], *shape[1:]])


def _const(node: Any, consts: dict, index: int) -> np.ndarray:
    if len(node.input) <= index or node.input[index] not in consts:
        raise _NotCovered
    return consts[node.input[index]]


def _slice(node: Any, attrs: dict, consts: dict, x: Any, batched: bool) -> Any:
    rank = len(x.shape)
    starts = _const(node, consts, 1).reshape(-1)
    ends = _const(node, consts, 2).reshape(-1)
    axes = (_const(node, consts, 3).reshape(-1) if len(node.input) > 3 and node.input[3]
            else np.arange(len(starts)))
    steps = (_const(node, consts, 4).reshape(-1) if len(node.input) > 4 and node.input[4]
             else np.ones(len(starts), np.int64))
    _off_batch(list(axes), rank, batched)
    index = [slice(None)] * rank
    for s, e, a, st in zip(starts, ends, axes, steps):
        dim = x.shape[int(a) % rank]
        if dim is None:
            raise _NotCovered
        # numpy's slice clamps as ONNX does (INT_MAX/INT_MIN ends, negative starts)
        index[int(a) % rank] = slice(*slice(int(s), int(e), int(st)).indices(dim))
    return x[tuple(index)]


def _expand(node: Any, attrs: dict, consts: dict, x: Any, batched: bool) -> Any:
    import tensorflow as tf

    target = [int(v) for v in _const(node, consts, 1).reshape(-1)]
    if not batched:
        return tf.broadcast_to(x, np.broadcast_shapes(tuple(x.shape), tuple(target)))
    if len(target) != len(x.shape) or target[0] != 1 or any(d is None for d in x.shape[1:]):
        raise _NotCovered  # the batch must stay the first axis, of its own size
    rest = np.broadcast_shapes(tuple(x.shape[1:]), tuple(target[1:]))
    return tf.broadcast_to(x, [tf.shape(x)[0], *rest])


def _matmul(node: Any, attrs: dict, xs: list) -> Any:
    import tensorflow as tf

    a, b = xs
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise _NotCovered
    if len(a.shape) != len(b.shape):  # ONNX broadcasts the batch dims as numpy does
        lead = max(len(a.shape), len(b.shape))
        a = tf.reshape(a, [1] * (lead - len(a.shape)) + list(a.shape))
        b = tf.reshape(b, [1] * (lead - len(b.shape)) + list(b.shape))
    return tf.linalg.matmul(a, b)


def _gemm(node: Any, attrs: dict, xs: list, batched: bool) -> Any:
    import tensorflow as tf

    a, b = xs[0], xs[1]
    if batched and attrs.get("transA"):
        raise _NotCovered  # the batch would move off the first axis
    y = attrs.get("alpha", 1.0) * tf.linalg.matmul(a, b, transpose_a=bool(attrs.get("transA")),
                                                   transpose_b=bool(attrs.get("transB")))
    return y + attrs.get("beta", 1.0) * xs[2] if len(xs) > 2 else y


def _softmax(node: Any, attrs: dict, x: Any, opset: int, log: bool, batched: bool) -> Any:
    import tensorflow as tf

    rank = len(x.shape)
    axis = int(attrs.get("axis", -1 if opset >= 13 else 1)) % rank
    _off_batch([axis], rank, batched)
    if opset < 13 and axis != rank - 1:  # the old flattening semantics: not covered
        raise _NotCovered
    return tf.nn.log_softmax(x, axis) if log else tf.nn.softmax(x, axis)


def _split(node: Any, attrs: dict, consts: dict, x: Any, batched: bool) -> list:
    import tensorflow as tf

    axis = _off_batch([int(attrs.get("axis", 0))], len(x.shape), batched)[0]
    if "split" in attrs:
        sizes = [int(v) for v in attrs["split"]]
    elif len(node.input) > 1 and node.input[1]:
        sizes = [int(v) for v in _const(node, consts, 1).reshape(-1)]
    else:
        count = len([o for o in node.output])
        if x.shape[axis] is None or x.shape[axis] % count:
            raise _NotCovered
        sizes = [x.shape[axis] // count] * count
    return tf.split(x, sizes, axis=axis)


def _one(node: Any, attrs: dict, consts: dict, xs: list, opset: int, batched: bool) -> list:
    """The node's outputs; raises _NotCovered for anything not written here. ``batched``:
    the tensors carry the whole batch where the node has its batch of 1, so the batch axis
    must stay untouched; otherwise they are one sample's, as the node was shaped."""
    import tensorflow as tf

    op = node.op_type
    unary, variadic = _unary(), _variadic()
    if op in unary:
        return [unary[op](xs[0], attrs)]
    if op in variadic:
        return [variadic[op](xs)]
    if op == "Clip":
        low = xs[1] if len(xs) > 1 and xs[1] is not None else attrs.get("min")
        high = xs[2] if len(xs) > 2 and xs[2] is not None else attrs.get("max")
        y = xs[0] if low is None else tf.maximum(xs[0], low)
        return [y if high is None else tf.minimum(y, high)]
    if op in REDUCE:
        return [_reduce(node, attrs, consts, xs[0], batched)]
    if op == "Reshape":
        return [_reshape(node, attrs, consts, xs[0], batched)]
    if op == "Transpose":
        perm = [int(p) for p in attrs.get("perm", list(range(len(xs[0].shape)))[::-1])]
        if batched and perm[0] != 0:
            raise _NotCovered
        return [tf.transpose(xs[0], perm)]
    if op in ("Squeeze", "Unsqueeze"):
        axes = _axes(node, attrs, consts, 1)
        if op == "Squeeze":
            rank = len(xs[0].shape)
            if axes is None:
                if batched:
                    raise _NotCovered  # every 1-sized axis: the batch of one too
                return [tf.squeeze(xs[0])]
            return [tf.squeeze(xs[0], _off_batch(axes, rank, batched))]
        if axes is None:
            raise _NotCovered
        y, rank = xs[0], len(xs[0].shape) + len(axes)
        for a in sorted(_off_batch(axes, rank, batched)):
            y = tf.expand_dims(y, a)
        return [y]
    if op == "Flatten":
        rank = max(len(xs[0].shape), 1)
        axis, shape = int(attrs.get("axis", 1)) % rank, xs[0].shape
        if not batched:
            return [tf.reshape(xs[0], [int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))])]
        if axis != 1 or any(d is None for d in shape[1:]):
            raise _NotCovered
        return [tf.reshape(xs[0], [tf.shape(xs[0])[0], int(np.prod(shape[1:]))])]
    if op == "Concat":
        axis = _off_batch([int(attrs["axis"])], len(xs[0].shape), batched)[0]
        return [tf.concat(xs, axis=axis)]
    if op == "Slice":
        return [_slice(node, attrs, consts, xs[0], batched)]
    if op == "Expand":
        return [_expand(node, attrs, consts, xs[0], batched)]
    if op == "Split":
        return _split(node, attrs, consts, xs[0], batched)
    if op == "MatMul":
        return [_matmul(node, attrs, xs)]
    if op == "Gemm":
        return [_gemm(node, attrs, xs, batched)]
    if op in ("Softmax", "LogSoftmax"):
        return [_softmax(node, attrs, xs[0], opset, op == "LogSoftmax", batched)]
    if op in ("GlobalMaxPool", "GlobalAveragePool"):
        axes = list(range(2, len(xs[0].shape)))
        reduce = tf.reduce_max if op == "GlobalMaxPool" else tf.reduce_mean
        return [reduce(xs[0], axis=axes, keepdims=True)]
    if op == "Where":
        return [tf.where(tf.cast(xs[0], tf.bool), xs[1], xs[2])]
    if op == "Cast":
        return [tf.identity(xs[0])]  # float to float only (see node_function)
    raise _NotCovered


def node_function(content: bytes, batched: bool = True) -> NodeFn | None:
    """A TensorFlow function of the one-node model ``content`` on a whole batch (inputs: its
    non-constant inputs in order, in the node's layout with the batch first where the node
    has 1; outputs: all of the node's outputs, float32), or None when the node touches a
    non-float tensor, mixes the batch axis with others, or is not covered here.

    ``batched=False``: the function of one sample's tensors, shaped exactly as the node
    declares them (its batch of 1 included), for a node that moves or merges the batch
    axis (PP-OCR's attention: Transpose [1, T, 3, H, D] -> [3, 1, H, T, D], then Slice and
    Squeeze axis 0); the caller maps it over the batch (onnx_frozen's OnnxOp)."""
    import onnx
    import tensorflow as tf
    from onnx import helper, numpy_helper

    model = onnx.load_from_string(content)
    graph = model.graph
    node = graph.node[0]
    types = [v.type.tensor_type.elem_type for v in [*graph.input, *graph.output]]
    if any(t not in FLOAT_TYPES for t in types):
        return None
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    if any(c.dtype.kind not in "f" for name, c in consts.items()
           if name in list(node.input)[:1] or node.op_type in _VARIADIC_OPS):
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                default=13)
    tensor_inputs = [v.name for v in graph.input]

    def run(xs: list) -> list:
        feeds = dict(zip(tensor_inputs, xs))
        args = []
        for name in node.input:
            if not name:
                args.append(None)
            elif name in feeds:
                args.append(feeds[name])
            else:
                args.append(tf.constant(consts[name].astype(np.float32)
                                        if consts[name].dtype.kind == "f" else consts[name]))
        outs = _one(node, attrs, consts, args, opset, batched)
        return [tf.cast(y, tf.float32) for y in outs]

    # probe the shapes once: anything not covered (or TensorFlow refusing) stays in ORT
    probe = [tf.zeros([d if d > 0 else 1 for d in
                       [x.dim_value for x in v.type.tensor_type.shape.dim]], tf.float32)
             for v in graph.input]
    try:
        run(probe)
    except (_NotCovered, ValueError, TypeError, tf.errors.InvalidArgumentError):
        return None
    return run

