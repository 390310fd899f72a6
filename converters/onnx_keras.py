"""ONNX <-> Keras layers, one layer per ONNX node, so ONNX models can be pruned and distilled.

onnx2tf's Keras output keeps every weight as a constant inside ``TFOpLambda`` layers
(``tf.nn.convolution(x, filters=<const>)``): no layer owns a kernel, so channels cannot be
grouped or removed and nothing can be trained. edgeopt therefore imports the CNN op set
that pruning handles (Conv, depthwise Conv, BatchNormalization, Relu/Clip/Sigmoid/
HardSwish, Add/Mul, Concat, pooling, Flatten, Gemm/MatMul, Softmax) into standard Keras
layers in NHWC, keeping a map from ONNX node to Keras layer. After pruning/distillation,
:func:`export_onnx` writes the Keras weights back into the *original* ONNX graph (same node
names, same NCHW layout, new channel counts), so an ONNX model comes back as ONNX; the
``.tflite`` route then goes through onnx2tf like any other ONNX model.

    >>> imported = import_onnx(onnx.load("model.onnx"))       # doctest: +SKIP
    >>> pruned = prune_structured(imported.model, 0.5)         # doctest: +SKIP
    >>> onnx_bytes = export_onnx(imported, pruned.model)       # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgeopt.converters.onnx_frozen import encode, layer_class, one_node_model, run_once
from edgeopt.errors import ConversionError
from edgeopt.tf_env import quiet_tensorflow

NCHW_TO_NHWC = (0, 2, 3, 1)


class UnsupportedNode(ConversionError):
    """An ONNX node that edgeopt cannot turn into a prunable Keras layer."""


@dataclass
class Imported:
    """The Keras model and how to write it back: ONNX node name -> Keras layer name."""

    model: Any
    proto: Any
    layers: dict[str, str] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    flatten_shapes: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    input_perms: dict[str, tuple[int, ...]] = field(default_factory=dict)
    frozen: dict[str, str] = field(default_factory=dict)  # node -> why it is kept whole


@dataclass
class _Value:
    tensor: Any
    rank: int
    flat_from: tuple[int, int, int] | None = None  # (h, w, c) when flattened from NHWC
    stacked: bool = False  # no batch axis first: one ONNX value per sample, stacked


class _Importer:
    def __init__(self, proto: Any) -> None:
        from onnx import numpy_helper

        self.proto = proto
        self.consts = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
        self.values: dict[str, _Value] = {}
        self.result = Imported(None, proto)
        self.consumers: dict[str, list[Any]] = {}
        for node in proto.graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.fused: set[str] = set()
        self.types = _value_types(proto)

    # -- helpers ---------------------------------------------------------------------
    def unsupported(self, node: Any, why: str) -> UnsupportedNode:
        return UnsupportedNode(f"cannot prune ONNX node '{node.name or node.output[0]}' "
                               f"({node.op_type}): {why}")

    def const(self, node: Any, index: int, required: bool = True) -> np.ndarray | None:
        if index >= len(node.input) or not node.input[index]:
            if required:
                raise self.unsupported(node, f"input {index} is missing")
            return None
        name = node.input[index]
        if name not in self.consts:
            raise self.unsupported(node, f"input '{name}' must be a constant weight")
        return self.consts[name]

    def value(self, node: Any, index: int = 0) -> _Value:
        name = node.input[index]
        if name not in self.values:
            raise self.unsupported(node, f"input '{name}' is not a tensor edgeopt imported")
        return self.values[name]

    def keep(self, node: Any, layer: Any, tensor: Any, rank: int, kind: str,
             flat_from: tuple[int, int, int] | None = None) -> None:
        self.values[node.output[0]] = _Value(tensor, rank, flat_from)
        if layer is not None:
            self.result.layers[node.name] = layer.name
            self.result.kinds[node.name] = kind

    def layer_name(self, node: Any) -> str:
        import re

        base = re.sub(r"[^A-Za-z0-9_]", "_", node.name or node.output[0]) or "node"
        return f"onnx_{base}"


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _pads(node: Any, attrs: dict, kernel: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, left, bottom, right); auto_pad SAME_* only for stride 1, where it is exact."""
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        if any(s != 1 for s in attrs.get("strides", [1, 1])):
            raise UnsupportedNode(f"cannot prune ONNX node '{node.name}': auto_pad {auto} "
                                  "with strides > 1")
        total = [k - 1 for k in kernel]
        return (total[0] // 2, total[1] // 2, total[0] - total[0] // 2,
                total[1] - total[1] // 2)
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    return pads[0], pads[1], pads[2], pads[3]


def _padded(imp: _Importer, node: Any, x: Any, pads, name: str) -> Any:
    import keras

    if not any(pads):
        return x
    top, left, bottom, right = pads
    return keras.layers.ZeroPadding2D(((top, bottom), (left, right)), name=f"{name}_pad")(x)


def _conv(imp: _Importer, node: Any) -> None:
    import keras

    src = imp.value(node)
    if src.rank != 4:
        raise imp.unsupported(node, "only 2-D convolutions (4-D tensors) are supported")
    weight, bias = imp.const(node, 1), imp.const(node, 2, required=False)
    attrs = _attrs(node)
    out_c, in_per_group, kh, kw = weight.shape
    group = int(attrs.get("group", 1))
    strides = tuple(attrs.get("strides", [1, 1]))
    dilation = tuple(attrs.get("dilations", [1, 1]))
    name = imp.layer_name(node)
    x = _padded(imp, node, src.tensor, _pads(node, attrs, (kh, kw)), name)
    common = {"strides": strides, "dilation_rate": dilation, "padding": "valid",
              "use_bias": True, "name": name}
    in_c = int(src.tensor.shape[-1])
    if group == 1:
        layer = keras.layers.Conv2D(out_c, (kh, kw), **common)
        kernel, kind = weight.transpose(2, 3, 1, 0), "conv"
    elif group == in_c and in_per_group == 1 and out_c == in_c:
        if strides[0] != strides[1]:  # TF's CPU kernel needs equal strides: subsample after
            common["strides"] = (1, 1)
        layer = keras.layers.DepthwiseConv2D((kh, kw), depth_multiplier=1, **common)
        kernel, kind = weight.transpose(2, 3, 0, 1), "depthwise"
    else:
        raise imp.unsupported(node, f"grouped convolution (group={group}) other than depthwise")
    y = layer(x)
    layer.set_weights([kernel, bias if bias is not None else np.zeros(out_c, "float32")])
    if common["strides"] != strides:
        y = keras.layers.MaxPooling2D((1, 1), strides=strides, name=f"{name}_stride")(y)
    imp.keep(node, layer, y, 4, kind)


def _batchnorm(imp: _Importer, node: Any) -> None:
    import keras

    src = imp.value(node)
    if src.rank not in (2, 4):  # elsewhere ONNX's channel axis is not Keras' last
        raise imp.unsupported(node, f"BatchNormalization of a {src.rank}-D tensor")
    gamma, beta, mean, var = (imp.const(node, i) for i in range(1, 5))
    eps = float(_attrs(node).get("epsilon", 1e-5))
    axis = -1 if src.rank == 4 else 1
    layer = keras.layers.BatchNormalization(axis=axis, epsilon=eps, name=imp.layer_name(node))
    y = layer(src.tensor)
    layer.set_weights([gamma, beta, mean, var])
    imp.keep(node, layer, y, src.rank, "batchnorm")


def _activation(kind: str) -> Callable[[_Importer, Any], None]:
    def handler(imp: _Importer, node: Any) -> None:
        import keras

        src = imp.value(node)
        name = imp.layer_name(node)
        if kind == "relu":
            layer = keras.layers.ReLU(name=name)
        elif kind == "clip":
            low, high = _clip_bounds(imp, node)
            if low != 0.0:
                raise imp.unsupported(node, f"Clip with a lower bound of {low} (only ReLU-style "
                                      "clips from 0)")
            layer = keras.layers.ReLU(max_value=high, name=name)
        elif kind == "leaky":
            layer = keras.layers.LeakyReLU(float(_attrs(node).get("alpha", 0.01)), name=name)
        else:
            layer = keras.layers.Activation(kind, name=name)
        imp.keep(node, layer, layer(src.tensor), src.rank, "activation")

    return handler


def _clip_bounds(imp: _Importer, node: Any) -> tuple[float, float | None]:
    attrs = _attrs(node)
    low = attrs.get("min")
    high = attrs.get("max")
    if len(node.input) > 1 and node.input[1]:
        low = float(imp.const(node, 1))
    if len(node.input) > 2 and node.input[2]:
        high = float(imp.const(node, 2))
    return float(low if low is not None else -np.inf), (None if high is None else float(high))


def _softmax(imp: _Importer, node: Any) -> None:
    import keras

    src = imp.value(node)
    axis = int(_attrs(node).get("axis", -1))
    if axis not in (-1, src.rank - 1) or src.rank != 2:
        raise imp.unsupported(node, "Softmax over anything but the last axis of a 2-D tensor")
    layer = keras.layers.Activation("softmax", name=imp.layer_name(node))
    imp.keep(node, layer, layer(src.tensor), 2, "activation")


def _scalar_arith(imp: _Importer, node: Any) -> None:
    """x + c, x - c, x * c, x / c (and c + x, c * x) with a one-element constant c."""
    import keras

    const_at = [i for i, name in enumerate(node.input) if name in imp.consts]
    if len(const_at) != 1:
        raise imp.unsupported(node, f"{node.op_type} of two tensors")
    c = imp.consts[node.input[const_at[0]]]
    if c.size != 1:
        raise imp.unsupported(node, f"{node.op_type} with a constant of shape {list(c.shape)} "
                              "(only one-element constants)")
    c = float(c.reshape(-1)[0])
    op, swapped = node.op_type, const_at[0] == 0
    if swapped and op in ("Sub", "Div"):
        raise imp.unsupported(node, f"{op} with the constant first")
    scale, offset = {"Add": (1.0, c), "Sub": (1.0, -c), "Mul": (c, 0.0),
                     "Div": (1.0 / c if c else np.inf, 0.0)}[op]
    if not np.isfinite(scale):
        raise imp.unsupported(node, "division by zero")
    src = imp.value(node, 1 if swapped else 0)
    layer = keras.layers.Rescaling(scale, offset, name=imp.layer_name(node))
    imp.keep(node, layer, layer(src.tensor), src.rank, "activation")


def _hard_sigmoid(imp: _Importer, node: Any) -> None:
    """max(0, min(1, alpha*x + beta)) as Rescaling then ReLU capped at 1."""
    import keras

    src = imp.value(node)
    attrs = _attrs(node)
    name = imp.layer_name(node)
    y = keras.layers.Rescaling(float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5)),
                               name=f"{name}_affine")(src.tensor)
    layer = keras.layers.ReLU(max_value=1.0, name=name)
    imp.keep(node, layer, layer(y), src.rank, "activation")


def _merge(kind: str) -> Callable[[_Importer, Any], None]:
    def handler(imp: _Importer, node: Any) -> None:
        import keras

        if any(name in imp.consts for name in node.input):
            _scalar_arith(imp, node)
            return
        values = [imp.value(node, i) for i in range(len(node.input))]
        if len({v.tensor.shape[-1] for v in values}) != 1 or len({v.rank for v in values}) != 1:
            raise imp.unsupported(node, f"{node.op_type} broadcasting over channels")
        layer = {"add": keras.layers.Add, "mul": keras.layers.Multiply}[kind](
            name=imp.layer_name(node))
        rank = max(v.rank for v in values)
        imp.keep(node, layer, layer([v.tensor for v in values]), rank, "merge")

    return handler


def _concat(imp: _Importer, node: Any) -> None:
    import keras

    values = [imp.value(node, i) for i in range(len(node.input))]
    axis = int(_attrs(node).get("axis", 1))
    rank = values[0].rank
    if rank not in (2, 4) or any(v.rank != rank for v in values):
        raise imp.unsupported(node, f"Concat of {rank}-D tensors")
    if axis not in (1, 1 - rank):
        raise imp.unsupported(node, f"Concat on axis {axis} (only the channel axis)")
    layer = keras.layers.Concatenate(axis=-1, name=imp.layer_name(node))
    imp.keep(node, layer, layer([v.tensor for v in values]), rank, "concat")


def _global_pool(kind: str) -> Callable[[_Importer, Any], None]:
    def handler(imp: _Importer, node: Any) -> None:
        import keras

        src = imp.value(node)
        if src.rank != 4:
            raise imp.unsupported(node, f"pooling a {src.rank}-D tensor")
        if node.op_type == "ReduceMean":
            attrs = _attrs(node)
            axes = attrs.get("axes") or (imp.const(node, 1).tolist() if len(node.input) > 1
                                         else None)
            if sorted(int(a) % 4 for a in (axes or [])) != [2, 3]:
                raise imp.unsupported(node, "ReduceMean over anything but the spatial axes")
            keep = bool(attrs.get("keepdims", 1))
        else:
            keep = True
        cls = {"avg": keras.layers.GlobalAveragePooling2D,
               "max": keras.layers.GlobalMaxPooling2D}[kind]
        layer = cls(keepdims=keep, name=imp.layer_name(node))
        imp.keep(node, layer, layer(src.tensor), 4 if keep else 2, "pool")

    return handler


def _pool(kind: str) -> Callable[[_Importer, Any], None]:
    def handler(imp: _Importer, node: Any) -> None:
        import keras

        src = imp.value(node)
        if src.rank != 4:
            raise imp.unsupported(node, f"pooling a {src.rank}-D tensor")
        attrs = _attrs(node)
        size = tuple(attrs["kernel_shape"])
        pads = _pads(node, attrs, size)
        if any(pads) or attrs.get("ceil_mode", 0):
            raise imp.unsupported(node, "pooling with padding or ceil_mode")
        cls = {"avg": keras.layers.AveragePooling2D, "max": keras.layers.MaxPooling2D}[kind]
        layer = cls(size, strides=tuple(attrs.get("strides", size)), padding="valid",
                    name=imp.layer_name(node))
        imp.keep(node, layer, layer(src.tensor), 4, "pool")

    return handler


def _flatten(imp: _Importer, node: Any) -> None:
    import keras

    src = imp.value(node)
    if src.rank not in (2, 4):
        raise imp.unsupported(node, f"flattening a {src.rank}-D tensor")
    if node.op_type == "Reshape":
        shape = imp.const(node, 1).tolist()
        if len(shape) != 2 or shape[1] not in (-1, int(np.prod(src.tensor.shape[1:]))):
            raise imp.unsupported(node, f"Reshape to {shape} (only flattening to [N, -1])")
        imp.result.kinds[node.name] = "reshape"  # its shape constant names a channel count
        if _attrs(node).get("allowzero", 0):
            raise imp.unsupported(node, "Reshape with allowzero=1")
    elif int(_attrs(node).get("axis", 1)) != 1:
        raise imp.unsupported(node, "Flatten on an axis other than 1")
    if src.rank == 2:
        imp.values[node.output[0]] = src
        return
    h, w, c = (int(d) for d in src.tensor.shape[1:])
    layer = keras.layers.Flatten(name=imp.layer_name(node))
    kind = "reshape" if node.op_type == "Reshape" else "flatten"
    imp.keep(node, layer, layer(src.tensor), 2, kind, (h, w, c) if h * w > 1 else None)


def _resize(imp: _Importer, node: Any) -> None:
    """Integer-scale upsampling (an FPN's nearest x2, bilinear with half-pixel centres) as
    UpSampling2D: channels pass through it. Other resizes are kept whole (onnx_frozen)."""
    import keras

    src = imp.value(node)
    scales = imp.const(node, 2, required=False) if len(node.input) > 2 else None
    if src.rank != 4 or scales is None or scales.size != 4 or (len(node.input) > 3
                                                                and node.input[3]):
        raise imp.unsupported(node, "Resize other than by constant scales of an image")
    factors = [float(v) for v in scales.reshape(-1)]
    if factors[:2] != [1.0, 1.0] or any(f < 1 or f != int(f) for f in factors[2:]):
        raise imp.unsupported(node, f"Resize by scales {factors} (only integer upsampling)")
    interpolation = _resize_interpolation(_attrs(node), max(factors[2:]))
    if interpolation is None:
        raise imp.unsupported(node, "Resize with a mode/coordinate transform that is not a "
                              "plain repeat or half-pixel bilinear")
    layer = keras.layers.UpSampling2D((int(factors[2]), int(factors[3])),
                                      interpolation=interpolation, name=imp.layer_name(node))
    imp.keep(node, layer, layer(src.tensor), 4, "resize")


def _resize_interpolation(attrs: dict, scale: float) -> str | None:
    """'nearest' where ONNX's rounding repeats each pixel, 'bilinear' where ONNX samples at
    half-pixel centres as TensorFlow does; None otherwise."""
    def text(key: str, default: str) -> str:
        value = attrs.get(key, default)
        return value.decode() if isinstance(value, bytes) else value

    mode = text("mode", "nearest")
    transform = text("coordinate_transformation_mode", "half_pixel")
    if mode == "linear":
        return "bilinear" if transform in ("half_pixel", "pytorch_half_pixel") else None
    if mode != "nearest":
        return None
    rounding = text("nearest_mode", "round_prefer_floor")
    if transform in ("half_pixel", "pytorch_half_pixel"):  # offsets stay within +-0.5
        return "nearest" if rounding.startswith("round") else None
    if transform == "asymmetric":
        ok = rounding == "floor" or (rounding == "round_prefer_floor" and scale <= 2)
        return "nearest" if ok else None
    return None


def _chw_rows_to_hwc(flat_from: tuple[int, int, int] | None) -> np.ndarray | None:
    """Row order that turns a CHW-flattened weight into an HWC-flattened one."""
    if flat_from is None:
        return None
    h, w, c = flat_from
    return np.arange(c * h * w).reshape(c, h, w).transpose(1, 2, 0).reshape(-1)


def _dense(imp: _Importer, node: Any) -> None:
    import keras

    src = imp.value(node)
    if src.rank not in (2, 3) or (src.rank == 3 and node.op_type != "MatMul"):
        # a 3-D tensor keeps ONNX's layout: MatMul contracts its last axis, as Dense does
        raise imp.unsupported(node, f"matrix products on {src.rank}-D tensors")
    weight = imp.const(node, 1)
    if weight.ndim != 2:
        raise imp.unsupported(node, "a matrix product with a batched weight")
    bias = None
    if node.op_type == "Gemm":
        attrs = _attrs(node)
        if attrs.get("transA", 0):
            raise imp.unsupported(node, "Gemm with transA")
        weight = weight.T if attrs.get("transB", 0) else weight
        weight = weight * float(attrs.get("alpha", 1.0))
        c = imp.const(node, 2, required=False)
        bias = None if c is None else np.broadcast_to(c * float(attrs.get("beta", 1.0)),
                                                      (weight.shape[1],))
    else:
        bias = _fused_bias(imp, node, weight.shape[1])
    rows = _chw_rows_to_hwc(src.flat_from)
    if rows is not None:
        weight = weight[rows]
        imp.result.flatten_shapes[node.name] = src.flat_from
    layer = keras.layers.Dense(weight.shape[1], name=imp.layer_name(node))
    y = layer(src.tensor)
    layer.set_weights([weight.astype("float32"),
                       np.zeros(weight.shape[1], "float32") if bias is None
                       else np.asarray(bias, "float32")])
    imp.keep(node, layer, y, src.rank, "dense")


def _fused_bias(imp: _Importer, node: Any, units: int) -> np.ndarray | None:
    """MatMul followed only by Add(constant): one Dense; the Add's output is aliased."""
    users = imp.consumers.get(node.output[0], [])
    if len(users) != 1 or users[0].op_type != "Add":
        return None
    add = users[0]
    other = [n for n in add.input if n != node.output[0]]
    if len(other) != 1 or other[0] not in imp.consts:
        return None
    bias = imp.consts[other[0]].reshape(-1)
    if bias.size != units:
        return None
    imp.fused.add(add.name)
    imp.result.kinds[add.name] = "fused_bias"
    imp.result.layers[add.name] = node.name  # the MatMul node that owns the bias
    return bias


def _passthrough(imp: _Importer, node: Any) -> None:
    imp.values[node.output[0]] = imp.value(node)


# -- nodes kept whole (converters/onnx_frozen.py) -----------------------------------------

# Ops that act on each element alone: the channel layout passes through them.
ELEMENTWISE = {"Sqrt", "Exp", "Reciprocal", "Abs", "Neg", "Erf", "Softplus", "Log", "Floor",
               "Ceil", "Round", "Sign", "Elu", "Selu", "Gelu", "Mish", "Sin", "Cos", "Relu",
               "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "LeakyRelu", "Clip", "Cast",
               "Identity", "Softsign", "ThresholdedRelu"}


def _value_types(proto: Any) -> dict[str, tuple[int, list[int]]]:
    """ONNX element type and dims (-1 unknown) of every tensor shape inference reaches."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # shape inference raises several types; then only declared ones
        inferred = proto
    graph = inferred.graph
    types = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor = value.type.tensor_type
        if not tensor.HasField("shape"):
            continue
        types[value.name] = (tensor.elem_type, [d.dim_value if d.HasField("dim_value") else -1
                                                for d in tensor.shape.dim])
    return types


def _axes_off_channel(imp: _Importer, node: Any, rank: int) -> bool:
    """Whether a rank-4 Slice/Split/Pad/Resize/Transpose leaves the channel axis alone."""
    op, attrs = node.op_type, _attrs(node)
    if op == "Transpose":
        perm = list(attrs.get("perm", range(rank)[::-1]))
        return perm[:2] == [0, 1]
    if op == "Split":
        return int(attrs.get("axis", 0)) % rank not in (0, 1)
    if op == "Slice":
        if len(node.input) < 4 or not node.input[3] or node.input[3] not in imp.consts:
            return False
        return not {int(a) % rank for a in imp.consts[node.input[3]].reshape(-1)} & {0, 1}
    if op == "Pad":
        pads = imp.consts.get(node.input[1]) if len(node.input) > 1 else None
        return pads is not None and not pads.reshape(-1)[[0, 1, rank, rank + 1]].any()
    if op == "Resize":
        scales = imp.consts.get(node.input[2]) if len(node.input) > 2 else None
        sizes = len(node.input) > 3 and node.input[3]
        return (not sizes and scales is not None and scales.size == 4
                and scales[0] == 1 and scales[1] == 1)
    return False


def _passes_channels(imp: _Importer, node: Any, tensors: list[str]) -> bool:
    if len(tensors) != 1:
        return False
    rank = imp.values[tensors[0]].rank
    if node.op_type in ELEMENTWISE:
        return True
    if node.op_type == "Pow":
        exponent = imp.consts.get(node.input[1])
        return exponent is not None and exponent.size == 1
    return rank == 4 and _axes_off_channel(imp, node, rank)


def _fold_constant(imp: _Importer, node: Any) -> None:
    """A node of constants only (a shape computation onnxslim left): its value, now."""
    outputs = [(name, imp.types.get(name, (1, []))[0], None) for name in node.output if name]
    content = one_node_model(node, imp.proto, [], imp.consts, outputs, None)
    for name, array in zip([n for n in node.output if n], run_once(content, {})):
        imp.consts[name] = np.asarray(array)


def _frozen(imp: _Importer, node: Any, why: str) -> None:
    """Keep ``node`` whole (see converters/onnx_frozen.py); refuse what cannot run alone."""
    if any(a.type in (5, 10) for a in node.attribute):  # GRAPH / GRAPHS: If, Loop, Scan
        raise imp.unsupported(node, f"{why}; a node with subgraphs cannot be kept whole "
                              "either (fix the input shapes or values with --input-shape / "
                              "--input-value so onnxslim folds it, or prune the model "
                              "before exporting it to ONNX)")
    tensors = [name for name in node.input if name and name not in imp.consts]
    if not tensors:
        _fold_constant(imp, node)
        return
    missing = [name for name in tensors if name not in imp.values]
    if missing:
        raise imp.unsupported(node, f"input '{missing[0]}' is not a tensor edgeopt imported")
    ins = [(name, *_typed(imp, node, name)) for name in tensors]
    outs = [(name, *_typed(imp, node, name)) for name in node.output if name]
    batched = all(_batched(dims) and not imp.values[n].stacked for n, _, dims in ins) and \
        all(_batched(dims) for _, _, dims in outs)
    passthrough = batched and _passes_channels(imp, node, tensors)
    convs = []
    for name in tensors:
        value = imp.values[name]
        convs.append("stack" if value.stacked else "nchw" if value.rank == 4 else
                     "none" if value.flat_from is None or passthrough
                     else "flat:" + ",".join(str(v) for v in value.flat_from))
    channel_axis = None
    if passthrough:
        channel_axis = 1 if imp.values[tensors[0]].rank == 4 else len(ins[0][2]) - 1
    content = encode(one_node_model(node, imp.proto, ins, imp.consts, outs, channel_axis))
    cls = layer_class()
    args = [imp.values[name].tensor for name in tensors]
    for index, (name, _, dims) in enumerate(outs):
        rank, stacked = len(dims), not _batched(dims)
        conv = "stack" if stacked else "nchw" if rank == 4 else "none"
        layer = cls(content, [i[0] for i in ins], [_numpy_type(i[1]) for i in ins], convs,
                    index, [1, *dims] if stacked else _keras_dims(dims), conv, passthrough,
                    node.name, name=imp.layer_name(node) + (f"_{index}" if index else ""))
        y = layer(args if len(args) > 1 else args[0])
        flat = imp.values[tensors[0]].flat_from if passthrough else None
        imp.values[name] = _Value(y, rank, flat, stacked)
    imp.result.frozen[node.name] = ("channels pass through: " if passthrough else
                                    "channels kept: ") + why
    imp.result.kinds[node.name] = "passthrough" if passthrough else "frozen"


def _typed(imp: _Importer, node: Any, name: str) -> tuple[int, list[int]]:
    """(ONNX dtype, dims) of a tensor the node reads or writes: static, batch first."""
    found = imp.types.get(name)
    if found is None or any(d < 0 for d in found[1]):
        raise imp.unsupported(node, f"the shape of '{name}' is not known statically, so the "
                              "node cannot be kept whole; fix the input shapes with "
                              "--input-shape")
    return found


def _batched(dims: list[int]) -> bool:
    """Batch first (compress fixes the batch to 1)."""
    return bool(dims) and dims[0] == 1


def _keras_dims(dims: list[int]) -> list[int]:
    return [dims[0], dims[2], dims[3], dims[1]] if len(dims) == 4 else list(dims)


def _numpy_type(onnx_type: int) -> str:
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type)).name


HANDLERS: dict[str, Callable[[_Importer, Any], None]] = {
    "Conv": _conv, "BatchNormalization": _batchnorm, "Relu": _activation("relu"),
    "Clip": _activation("clip"), "Sigmoid": _activation("sigmoid"),
    "HardSwish": _activation("hard_silu"), "HardSigmoid": _hard_sigmoid,
    "LeakyRelu": _activation("leaky"), "Tanh": _activation("tanh"), "Softmax": _softmax,
    "Add": _merge("add"), "Mul": _merge("mul"), "Sub": _scalar_arith, "Div": _scalar_arith,
    "Concat": _concat,
    "GlobalAveragePool": _global_pool("avg"), "GlobalMaxPool": _global_pool("max"),
    "ReduceMean": _global_pool("avg"), "MaxPool": _pool("max"), "AveragePool": _pool("avg"),
    "Flatten": _flatten, "Reshape": _flatten, "Gemm": _dense, "MatMul": _dense,
    "Dropout": _passthrough, "Identity": _passthrough, "Resize": _resize,
}


def _inputs(imp: _Importer) -> list[Any]:
    import keras

    initializers = set(imp.consts)
    tensors = []
    for value in imp.proto.graph.input:
        if value.name in initializers:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else -1
                for d in value.type.tensor_type.shape.dim]
        if len(dims) == 4 and all(d > 0 for d in dims[1:]):
            shape, perm = (dims[2], dims[3], dims[1]), NCHW_TO_NHWC
        elif len(dims) in (2, 3) and all(d > 0 for d in dims[1:]) and dims[0] in (-1, 1):
            shape, perm = tuple(dims[1:]), None
        else:
            raise UnsupportedNode(_input_refusal(value.name, dims))
        tensor = keras.Input(shape, name=value.name)
        imp.values[value.name] = _Value(tensor, len(dims))
        if perm:
            imp.result.input_perms[value.name] = perm
        tensors.append(tensor)
    return tensors


def _import_node(imp: _Importer, node: Any) -> None:
    """A Keras layer per node; a node with none (or none for its attributes) is kept whole."""
    handler = HANDLERS.get(node.op_type)
    if handler is None:
        _frozen(imp, node, "this op has no prunable Keras equivalent")
        return
    if any(imp.values[n].stacked for n in node.input if n in imp.values):
        _frozen(imp, node, "an input has no batch axis first")
        return
    try:
        handler(imp, node)
    except (UnsupportedNode, ValueError) as exc:  # ValueError: Keras refused the shapes
        imp.result.kinds.pop(node.name, None)
        imp.result.layers.pop(node.name, None)
        _frozen(imp, node, str(exc).split("): ", 1)[-1].splitlines()[0])


def _input_refusal(name: str, dims: list[int]) -> str:
    """The one-line reason an input cannot be pruned, and what the user can do."""
    head = f"cannot prune: input '{name}' has shape {dims}"
    if any(d < 0 for d in dims[1:]):
        return (f"{head}; pruning needs static non-batch dimensions: fix them with "
                f"--input-shape {name}:1,...")
    if len(dims) in (2, 3, 4):  # batch not first: a recurrent state ([layers, N, hidden])
        return (f"{head}, its batch not on the first axis (a recurrent state?); edgeopt "
                "prunes only batch-first inputs (an NCHW image, [N, features], [N, steps, "
                "features]): prune the network in its training framework before it is "
                "exported with this input, or build it unpruned with `edgeopt build`")
    return (f"{head}; edgeopt prunes NCHW images, [N, features] and [N, steps, features] "
            "inputs: build this model unpruned with `edgeopt build`")


def import_onnx(proto: Any) -> Imported:
    """Build the Keras model of an ONNX graph; UnsupportedNode names the first bad node."""
    quiet_tensorflow()
    import keras

    imp = _Importer(proto)
    inputs = _inputs(imp)
    for index, node in enumerate(proto.graph.node):  # all named first: a MatMul looks ahead
        if not node.name:                              # to fuse the Add after it, by name
            node.name = f"{node.op_type}_{index}"
    for node in proto.graph.node:
        if node.name in imp.fused:
            imp.values[node.output[0]] = imp.values[node.input[0]] if node.input[0] in \
                imp.values else imp.values[node.input[1]]
            continue
        if node.op_type == "Constant":
            from onnx import numpy_helper

            imp.consts[node.output[0]] = numpy_helper.to_array(_attrs(node)["value"])
            continue
        _import_node(imp, node)
    outputs = []
    for value in proto.graph.output:
        if value.name not in imp.values:
            raise UnsupportedNode(f"cannot prune: output '{value.name}' is not computed "
                                  "from the model's inputs; build the model unpruned with "
                                  "`edgeopt build`")
        outputs.append(imp.values[value.name].tensor)
    imp.result.model = keras.Model(inputs, outputs, name="onnx_import")
    return imp.result


# -- export --------------------------------------------------------------------------------

def _new_initializer(graph: Any, node: Any, index: int, array: np.ndarray, suffix: str) -> None:
    from onnx import numpy_helper

    name = f"{node.name}_{suffix}_edgeopt"
    if array.dtype != np.int64:
        array = np.ascontiguousarray(array, "float32")
    graph.initializer.append(numpy_helper.from_array(array, name))
    while len(node.input) <= index:
        node.input.append("")
    node.input[index] = name


def _set_attr(node: Any, name: str, value: Any) -> None:
    from onnx import helper

    for i, attr in enumerate(node.attribute):
        if attr.name == name:
            del node.attribute[i]
            break
    node.attribute.append(helper.make_attribute(name, value))


def _hwc_rows_to_chw(flat: tuple[int, int, int], c: int) -> np.ndarray:
    h, w, _ = flat
    return np.arange(h * w * c).reshape(h, w, c).transpose(2, 0, 1).reshape(-1)


def _export_node(graph: Any, node: Any, kind: str, layer: Any, imported: Imported) -> None:
    weights = layer.get_weights()
    if kind == "conv":
        _new_initializer(graph, node, 1, weights[0].transpose(3, 2, 0, 1), "W")
        _new_initializer(graph, node, 2, weights[1], "B")
        _set_attr(node, "kernel_shape", list(weights[0].shape[:2]))
    elif kind == "depthwise":
        _new_initializer(graph, node, 1, weights[0].transpose(2, 3, 0, 1), "W")
        _new_initializer(graph, node, 2, weights[1], "B")
        _set_attr(node, "group", int(weights[0].shape[2]))
    elif kind == "batchnorm":
        for i, (array, suffix) in enumerate(zip(weights, ("scale", "B", "mean", "var")), 1):
            _new_initializer(graph, node, i, array, suffix)
    elif kind == "dense":
        kernel = weights[0]
        flat = imported.flatten_shapes.get(node.name)
        if flat is not None:  # rows back to ONNX's CHW order, at the pruned channel count
            kernel = kernel[_hwc_rows_to_chw(flat, kernel.shape[0] // (flat[0] * flat[1]))]
        if node.op_type == "Gemm":
            transposed = bool(_attrs(node).get("transB", 0))
            _new_initializer(graph, node, 1, kernel.T if transposed else kernel, "W")
            _new_initializer(graph, node, 2, weights[1], "B")
            _set_attr(node, "alpha", 1.0)
            _set_attr(node, "beta", 1.0)
        else:
            _new_initializer(graph, node, 1, kernel, "W")


def _export_fused_bias(graph: Any, add: Any, matmul: Any, layer: Any) -> None:
    bias = layer.get_weights()[1]
    index = 0 if add.input[1] == matmul.output[0] else 1
    _new_initializer(graph, add, index, bias, "B")


def _drop_unused_initializers(graph: Any) -> None:
    """Remove the replaced weights (and graph inputs that only declared them)."""
    used = {name for node in graph.node for name in node.input} | {v.name for v in graph.output}
    dropped = {t.name for t in graph.initializer if t.name not in used}
    keep = [t for t in graph.initializer if t.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    inputs = [v for v in graph.input if v.name not in dropped]
    del graph.input[:]
    graph.input.extend(inputs)


def export_onnx(imported: Imported, model: Any) -> bytes:
    """The original ONNX graph carrying ``model``'s (pruned, trained) weights."""
    import onnx

    proto = onnx.ModelProto()
    proto.CopyFrom(imported.proto)
    graph = proto.graph
    by_name = {node.name: node for node in graph.node}
    for index, node in enumerate(graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{index}"
            by_name[node.name] = node
    for node_name, kind in imported.kinds.items():
        node = by_name[node_name]
        if kind == "fused_bias":
            owner = by_name[imported.layers[node_name]]
            _export_fused_bias(graph, node, owner,
                               model.get_layer(imported.layers[owner.name]))
            continue
        if kind == "reshape":  # [N, C*H*W] -> [0, -1] (keep N): right at any channel count
            _new_initializer(graph, node, 1, np.array([0, -1], "int64"), "shape")
            continue
        if kind in ("conv", "depthwise", "batchnorm", "dense"):
            _export_node(graph, node, kind, model.get_layer(imported.layers[node_name]),
                         imported)
    _drop_unused_initializers(graph)
    del graph.value_info[:]
    try:
        proto = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
        onnx.checker.check_model(proto)
    except Exception as exc:  # the checker raises several types
        raise ConversionError(f"the pruned ONNX graph does not check: {exc}") from exc
    return proto.SerializeToString()
