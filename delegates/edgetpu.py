"""The Coral Edge TPU compiler (``edgetpu_compiler``) and runtime.

Follows coral.ai/docs/edgetpu/models-intro ("Supported operations": op names, minimum
runtime version, known limitations; "Model requirements": full 8-bit quantization, static
sizes, constant parameters, at most 3 dimensions larger than 1), libcoral's split_fc note
(a fully-connected layer too large for the parameter memory is cut) and the compiler's
partitioning rule: it maps the graph up to the first op it cannot run; that op and every op
after it run on the CPU, and only the first subgraph is compiled.
"""

from __future__ import annotations

from edgeopt.delegates import checks as generic
from edgeopt.delegates.rules import build_rules
from edgeopt.delegates.view import OpView

SOFTMAX_MAX_ELEMENTS = 16000


def _runtime(v: OpView) -> int:
    return int(v.settings.get("runtime_version", 14))


def _axes(v: OpView, position: int = 1) -> tuple[int, ...] | None:
    values = v.const(position)
    rank = v.rank(v.input(0))
    return None if values is None else tuple(a % rank if rank else a for a in values)


def runtime_level(v: OpView) -> tuple[bool, str]:
    """The op needs a newer Edge TPU compiler and runtime"""
    need = int(v.param("min_runtime", 0))
    return _runtime(v) >= need, f"{v.name} needs runtime {need}, target is {_runtime(v)}"


def innermost_3d(v: OpView) -> tuple[bool, str]:
    """Tensors may have more than 3 dimensions only if the outer ones are 1"""
    for t in v.data_tensors:
        if any(d > 1 for d in t.shape[:-3]):
            return False, f"'{t.name}' has shape {list(t.shape)}"
    return True, ""


def conv_same_dilation(v: OpView) -> tuple[bool, str]:
    """CONV_2D must use the same dilation in x and y"""
    h, w = v.opt("dilation_h_factor", 1), v.opt("dilation_w_factor", 1)
    return h == w, f"dilation {h}x{w}"


def depthwise_no_dilation(v: OpView) -> tuple[bool, str]:
    """DEPTHWISE_CONV_2D cannot be dilated"""
    h, w = v.opt("dilation_h_factor", 1), v.opt("dilation_w_factor", 1)
    return h == w == 1, f"dilation {h}x{w}"


def fully_connected_1d(v: OpView) -> tuple[bool, str]:
    """FULLY_CONNECTED: default weights format and a one-dimensional output"""
    if v.opt("weights_format", "DEFAULT") != "DEFAULT":
        return False, "non-default weights format"
    out = v.output(0)
    ok = out is not None and out.elements == (out.shape[-1] if out.shape else 1)
    return ok, f"output shape {list(out.shape) if out else '?'}"


def fully_connected_fits(v: OpView) -> tuple[bool, str]:
    """FULLY_CONNECTED weights must stay under the size the compiler cuts from the
    delegate (libcoral's split_fc)"""
    weights = v.input(1)
    limit = int(v.settings.get("fc_max_weights", 128_000_000))
    size = weights.elements if weights is not None else 0
    return size <= limit, f"{size:,} weights, over {limit:,}"


def concat_constant_zero(v: OpView) -> tuple[bool, str]:
    """A constant CONCATENATION input is allowed only as the second of 2 inputs, all zeros"""
    consts = [p for p in range(len(v.op.inputs)) if v.input(p) is not None and
              v.input(p).is_constant]
    if not consts:
        return True, ""
    if len(v.op.inputs) != 2:
        return False, f"{len(v.op.inputs)} inputs with a constant among them"
    tensor, values = v.input(consts[0]), v.const(consts[0])
    zero = tensor.quantization.zero_point[0] if tensor.quantization else 0
    ok = values is None or all(x == zero for x in values)
    return ok, "constant input is not all zeros"


def mean_axes(v: OpView) -> tuple[bool, str]:
    """MEAN cannot reduce the batch dimension; a channel reduction needs channels % 4 == 0 (runtime
    13+), x/y only before"""
    axes, rank = _axes(v), v.rank(v.input(0))
    if axes is None:
        return True, ""
    if 0 in axes and rank > 1:
        return False, f"reduces batch (axes {list(axes)})"
    if _runtime(v) < 13:
        return set(axes) <= {rank - 3, rank - 2}, f"axes {list(axes)} beyond x/y"
    channels = v.input(0).shape[-1] if rank else 1
    ok = (rank - 1) not in axes or channels % 4 == 0
    return ok, f"channel reduction over {channels} channels"


def no_batch_axis(v: OpView) -> tuple[bool, str]:
    """The op cannot work along the batch dimension"""
    if v.name in ("PACK", "SQUEEZE"):
        axes = (v.opt("axis", 1),) if v.name == "PACK" else tuple(v.opt("squeeze_dims") or ())
    else:
        axes = _axes(v, 0 if v.name == "SPLIT" else 1) or ()
    return 0 not in axes, f"axis 0 in {list(axes)}"


def pad_axes(v: OpView) -> tuple[bool, str]:
    """PAD cannot pad the batch dimension (only x/y before runtime 13)"""
    values = v.const(1)
    if values is None:
        return True, ""
    pairs = [values[i:i + 2] for i in range(0, len(values), 2)]
    padded = [i for i, pair in enumerate(pairs) if any(pair)]
    allowed = range(1, len(pairs)) if _runtime(v) >= 13 else range(1, 3)
    ok = all(i in allowed for i in padded)
    return ok, f"pads dimensions {padded}"


def softmax_1d(v: OpView) -> tuple[bool, str]:
    """SOFTMAX takes a 1-D input of at most 16,000 elements"""
    src = v.input(0)
    if src is None:
        return False, "no input"
    ok = src.elements == src.shape[-1] and src.elements <= SOFTMAX_MAX_ELEMENTS
    return ok, f"input shape {list(src.shape)}"


def strided_slice_unit(v: OpView) -> tuple[bool, str]:
    """STRIDED_SLICE: all strides 1, no ellipsis or new-axis mask"""
    if v.opt("ellipsis_mask", 0) or v.opt("new_axis_mask", 0):
        return False, "ellipsis or new-axis mask"
    strides = v.const(3)
    return strides is None or all(s == 1 for s in strides), f"strides {strides}"


CHECKS = {**generic.GENERIC, **{fn.__name__: fn for fn in (
    runtime_level, innermost_3d, conv_same_dilation, depthwise_no_dilation,
    fully_connected_1d, fully_connected_fits, concat_constant_zero, mean_axes, no_batch_axis,
    pad_axes, softmax_1d, strided_slice_unit)}}

RULES = build_rules("edgetpu.toml", CHECKS)
