"""The LiteRT GPU delegate (OpenCL / OpenGL / Metal back ends share the op checks).

Follows google-ai-edge/LiteRT ``tflite/delegates/gpu/common/model_builder.cc``
(``NewOperationParser``, each parser's ``IsSupported`` with its op-version limit,
``GetOpsToReplace``: non-constant tensors float32/float16, or int8/uint8 with quantized
models enabled, at most 4-D; largest partition only) and
``tflite/tools/versioning/gpu_compatibility.cc`` (``CheckGpuDelegateCompatibility``).
"""

from __future__ import annotations

from edgeopt.delegates import checks as generic
from edgeopt.delegates.rules import build_rules
from edgeopt.delegates.view import OpView


def _runtime_count(v: OpView) -> int:
    return len(v.runtime_inputs)


def gpu_activation(v: OpView) -> tuple[bool, str]:
    """Fused activation must not be SIGN_BIT"""
    act = v.opt("fused_activation_function", "NONE")
    return act != "SIGN_BIT", f"fused {act}"


def one_runtime_input(v: OpView) -> tuple[bool, str]:
    """The op must have exactly one run-time input (the others constant) and one output"""
    n, outs = _runtime_count(v), len(v.op.outputs)
    return n == 1 and outs == 1, f"{n} run-time inputs, {outs} outputs"


def one_or_two_operands(v: OpView) -> tuple[bool, str]:
    """Binary ops take two run-time inputs, or one run-time input and one constant"""
    n = _runtime_count(v)
    return len(v.op.inputs) == 2 and n in (1, 2), f"{n} run-time of {len(v.op.inputs)} inputs"


def conv_runtime_inputs(v: OpView) -> tuple[bool, str]:
    """Convolutions take 1 or 2 run-time inputs (weights may be a run-time tensor) and one output"""
    n = _runtime_count(v)
    return 1 <= n <= 2 and len(v.op.outputs) == 1, f"{n} run-time inputs"


def strides_dilation_positive(v: OpView) -> tuple[bool, str]:
    """Strides and dilations must be positive"""
    values = [v.opt(k, 1) for k in ("stride_h", "stride_w", "dilation_h_factor",
                                    "dilation_w_factor")]
    return min(values) > 0, f"strides/dilations {values}"


def depthwise_shapes(v: OpView) -> tuple[bool, str]:
    """DEPTHWISE_CONV_2D: 4-D tensors, output channels = input channels x depth multiplier"""
    src, filt, out = v.input(0), v.input(1), v.output(0)
    if any(t is None or len(t.shape) != 4 for t in (src, filt, out)):
        return False, "input, filter and output must be 4-D"
    multiplier = v.opt("depth_multiplier", 1) or 1
    ok = filt.shape[3] == out.shape[3] and out.shape[3] == src.shape[3] * multiplier
    return ok, f"input {src.shape[3]} ch x {multiplier} != output {out.shape[3]} ch"


def broadcast_supported(v: OpView) -> tuple[bool, str]:
    """ADD/MUL broadcasting between ranks > 1 only as 4-D with 3-D (batch 1), or 4-D with [1, 1] /
    [batch, channels]"""
    a, b = v.input(0), v.input(1)
    if a is None or b is None or len(v.op.inputs) != 2:
        return False, "needs two inputs"
    long, short = (a.shape, b.shape) if len(a.shape) >= len(b.shape) else (b.shape, a.shape)
    if len(long) == len(short) or len(short) <= 1:
        return True, ""
    ok = (len(long) == 4 and len(short) == 3 and long[0] == 1) or (
        len(long) == 4 and len(short) == 2 and (
            short == (1, 1) and long[0] == 1 or (long[0] == short[0] and long[3] == short[1])))
    return ok, f"shapes {list(a.shape)} and {list(b.shape)}"


def fully_connected_gpu(v: OpView) -> tuple[bool, str]:
    """FULLY_CONNECTED: default weights format, run-time input first, at most 2 run-time inputs"""
    if v.opt("weights_format", "DEFAULT") != "DEFAULT":
        return False, "non-default weights format"
    src = v.input(0)
    if src is None or src.is_constant or _runtime_count(v) > 2:
        return False, "constant input or too many run-time inputs"
    out = v.output(0)
    if v.opt("keep_num_dims") and out is not None and len(out.shape) != len(src.shape):
        return False, "keep_num_dims with a rank change"
    return True, ""


def reduce_axes_constant(v: OpView) -> tuple[bool, str]:
    """Reductions take one run-time input and constant int32 axes"""
    axes = v.input(1)
    ok = _runtime_count(v) == 1 and axes is not None and v.is_static(1) and axes.dtype == "int32"
    return ok, "axes are not a constant int32 tensor"


def slice_rank_3_or_4(v: OpView) -> tuple[bool, str]:
    """SLICE / STRIDED_SLICE inputs must be 3-D or 4-D, without ellipsis, new-axis or shrink
    masks"""
    if mask := v.set_slice_mask():
        return False, mask
    rank = v.rank(v.input(0))
    return rank in (3, 4), f"rank {rank} input"


def pad_shape(v: OpView) -> tuple[bool, str]:
    """PAD: one run-time input, paddings [3, 2] or [4, 2]; MIRROR_PAD in REFLECT mode only"""
    if v.name == "MIRROR_PAD" and v.opt("mode", "REFLECT") != "REFLECT":
        return False, f"mode {v.opt('mode')}"
    pads = v.input(1)
    if _runtime_count(v) != 1 or pads is None:
        return False, "paddings computed at run time"
    ok = len(pads.shape) == 2 and pads.shape[0] in (3, 4) and pads.shape[1] == 2
    return ok, f"paddings shape {list(pads.shape)}"


def resize_corners(v: OpView) -> tuple[bool, str]:
    """RESIZE_BILINEAR cannot combine align_corners with half_pixel_centers"""
    both = v.opt("align_corners") and v.opt("half_pixel_centers")
    return not both, "align_corners and half_pixel_centers both set"


def dequantize_not_int16(v: OpView) -> tuple[bool, str]:
    """DEQUANTIZE from int16 is not supported"""
    src = v.input(0)
    return src is not None and src.dtype != "int16", "int16 input"


def gather_indices(v: OpView) -> tuple[bool, str]:
    """GATHER indices must be a 1-D int32 tensor"""
    idx = v.input(1)
    ok = idx is not None and len(idx.shape) == 1 and idx.dtype == "int32"
    return ok, "indices are not 1-D int32"


def cumsum_float(v: OpView) -> tuple[bool, str]:
    """CUMSUM: float input and output, constant int32 axis"""
    src, axis = v.input(0), v.input(1)
    ok = src is not None and src.dtype in ("float32", "float16") and axis is not None \
        and v.is_static(1) and axis.dtype == "int32"
    return ok, "non-float input or run-time axis"


def cast_combination(v: OpView) -> tuple[bool, str]:
    """CAST between bool and float, or between float32 and int32"""
    src, out = v.input(0), v.output(0)
    if src is None or out is None:
        return False, "missing tensors"
    pair = (src.dtype, out.dtype)
    floats = ("float32", "float16")
    ok = (pair[0] == "bool" and pair[1] in floats) or (pair[0] in floats and pair[1] == "bool") \
        or (pair[0] in ("float32", "int32") and pair[1] in ("float32", "int32"))
    return ok, f"{pair[0]} -> {pair[1]}"


def logical_feeds_float(v: OpView) -> tuple[bool, str]:
    """Comparison/logical ops are taken only when their single consumer is a CAST or SELECT to
    float"""
    consumers = v.consumers_of_outputs()
    if len(consumers) != 1:
        return False, f"{len(consumers)} consumers"
    nxt = v.index.graph.ops[consumers[0]]
    out = v.tensor(nxt.outputs[0]) if nxt.outputs else None
    ok = nxt.op in ("CAST", "SELECT", "SELECT_V2") and out is not None and \
        out.dtype in ("float32", "float16")
    return ok, f"consumer {nxt.op}"


def add_n_two_inputs(v: OpView) -> tuple[bool, str]:
    """ADD_N takes exactly two inputs"""
    return len(v.op.inputs) == 2, f"{len(v.op.inputs)} inputs"


CHECKS = {**generic.GENERIC, **{fn.__name__: fn for fn in (
    gpu_activation, one_runtime_input, one_or_two_operands, conv_runtime_inputs,
    strides_dilation_positive, depthwise_shapes, broadcast_supported, fully_connected_gpu,
    reduce_axes_constant, slice_rank_3_or_4, pad_shape, resize_corners,
    dequantize_not_int16, gather_indices, cumsum_float, cast_combination,
    logical_feeds_float, add_n_two_inputs)}}

RULES = build_rules("gpu.toml", CHECKS, finalize=generic.unpack_static_weights)
