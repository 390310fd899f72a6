"""XNNPACK, LiteRT's default CPU delegate.

Follows ``tflite/delegates/xnnpack/xnnpack_delegate.cc`` in google-ai-edge/LiteRT
(``Subgraph::VisitNode`` and the ``Visit*Node`` / ``Check*`` functions it calls, as built into
ai-edge-litert 2.x) and the XNNPACK delegate README. The op table is ``xnnpack.toml``;
checks that need more than a table row are below. Checked against the interpreter itself by
``benchmarks/delegates_xnnpack.py``.
"""

from __future__ import annotations

from edgeopt.delegates import checks as generic
from edgeopt.delegates.rules import build_rules
from edgeopt.delegates.view import FLOAT_DTYPES, OpView


def _scale(tensor) -> float | None:
    q = tensor.quantization if tensor is not None else None
    return q.scale[0] if q and q.scale else None


def _ratio_ok(ratio: float | None, low: float, high: float) -> bool:
    return ratio is None or low <= ratio < high


def conv_bias_static(v: OpView) -> tuple[bool, str]:
    """Convolution filter and bias must be constants, and the bias must be present"""
    if len(v.op.inputs) < 3 or v.op.inputs[2] < 0:
        return False, "no bias tensor"
    for position in (1, 2):
        if not v.is_static(position):
            return False, f"input {position} ('{v.input(position).name}') is computed at run time"
    return True, ""


def conv_types_match(v: OpView) -> tuple[bool, str]:
    """Input, filter and output types must agree; float input with int8 filter (dynamic
    quantization) only for CONV_2D"""
    src, filt, out = v.input(0), v.input(1), v.output(0)
    if src is None or filt is None or out is None:
        return False, "missing tensors"
    dynamic = v.param("dynamic_quantization", True) and src.dtype in FLOAT_DTYPES and \
        filt.dtype in ("int8", "int4")
    ok = src.dtype == out.dtype and (src.dtype == filt.dtype or dynamic
                                     or (src.dtype == "float32" and filt.dtype == "float16"))
    return ok, f"input {src.dtype}, filter {filt.dtype}, output {out.dtype}"


def filter_quantization(v: OpView) -> tuple[bool, str]:
    """Quantized filters must be per-tensor, or per-channel along the output-channel axis"""
    filt = v.input(1)
    if filt is None or filt.dtype not in ("int8", "int4", "uint8"):
        return True, ""
    q = filt.quantization
    if q is None:
        return False, "int filter without scale"
    axis = v.param("filter_axis", 0)
    if q.per_channel and q.axis != axis:
        return False, f"per-channel axis {q.axis}, expected {axis}"
    if filt.dtype == "uint8" and q.per_channel:
        return False, "uint8 filter with per-channel scales"
    return True, ""


def pool_stride_within_filter(v: OpView) -> tuple[bool, str]:
    """Pooling stride must not exceed the pooling window, and a 1x1 window cannot be strided"""
    sw, sh = v.opt("stride_w", 1), v.opt("stride_h", 1)
    fw, fh = v.opt("filter_width", 1), v.opt("filter_height", 1)
    if sw > fw or sh > fh:
        return False, f"stride {sh}x{sw} over window {fh}x{fw}"
    if fw == fh == 1 and max(sw, sh) > 1:
        return False, f"1x1 window with stride {sh}x{sw}"
    return True, ""


def binary_same_types(v: OpView) -> tuple[bool, str]:
    """Both inputs and the output must have the same data type"""
    types = {t.dtype for t in (v.input(0), v.input(1), v.output(0)) if t is not None}
    return len(types) == 1, f"mixed types {', '.join(sorted(types))}"


def add_scale_ratio(v: OpView) -> tuple[bool, str]:
    """Quantized ADD/SUB: each input scale / output scale must lie in [1/1024, 256)"""
    out = _scale(v.output(0))
    for t in (v.input(0), v.input(1)):
        s = _scale(t)
        if s is not None and out and not _ratio_ok(s / out, 1 / 1024, 256):
            return False, f"scale ratio {s / out:.3g}"
    return True, ""


def mul_scale_ratio(v: OpView) -> tuple[bool, str]:
    """Quantized MUL: input1 scale * input2 scale / output scale must lie in [1/65536, 256)"""
    a, b, out = _scale(v.input(0)), _scale(v.input(1)), _scale(v.output(0))
    if None in (a, b, out) or not out:
        return True, ""
    ratio = a * b / out
    return _ratio_ok(ratio, 1 / 65536, 256), f"scale ratio {ratio:.3g}"


def concat_inputs(v: OpView) -> tuple[bool, str]:
    """CONCATENATION takes 2 to 5 inputs, and uint8 inputs must share the output's scale"""
    n = len(v.op.inputs)
    if not 2 <= n <= 5:
        return False, f"{n} inputs"
    out = v.output(0)
    if out is not None and out.dtype == "uint8":
        if any(t.quantization != out.quantization for t in v.inputs):
            return False, "uint8 inputs with different scales"
    return True, ""


def reshape_params(v: OpView) -> tuple[bool, str]:
    """RESHAPE: new shape constant and not just [-1]; quantized input and output share scale"""
    src, out = v.input(0), v.output(0)
    if src is not None and out is not None and src.quantization != out.quantization:
        if out.dtype in ("int8", "uint8"):
            return False, "input and output quantization differ"
    if len(v.op.inputs) >= 2 and v.op.inputs[1] >= 0:
        if not v.is_static(1) or v.input(1).dtype != "int32":
            return False, "shape is computed at run time"
        shape = v.const(1)
    else:
        shape = tuple(v.opt("new_shape") or ())
    if shape is not None and tuple(shape) == (-1,):
        return False, "new shape is [-1]"
    return True, ""


def axes_constant(v: OpView) -> tuple[bool, str]:
    """Reduction axes must be a non-empty constant int32 vector"""
    axes = v.input(1)
    if axes is None or not v.is_static(1) or axes.dtype != "int32":
        return False, "axes are not a constant int32 tensor"
    if len(axes.shape) > 1 or axes.elements == 0:
        return False, f"axes shape {list(axes.shape)}"
    return True, ""


def paddings_constant(v: OpView) -> tuple[bool, str]:
    """Paddings must be a constant int32 [rank, 2] tensor with no negative values"""
    pads = v.input(1)
    if pads is None or not v.is_static(1) or pads.dtype != "int32":
        return False, "paddings are not a constant int32 tensor"
    values = v.const(1)
    if values is not None and min(values, default=0) < 0:
        return False, "negative padding"
    return True, ""


def resize_size_constant(v: OpView) -> tuple[bool, str]:
    """Output size must be a constant int32 [2] tensor"""
    size = v.input(1)
    ok = size is not None and v.is_static(1) and size.dtype == "int32" and size.shape == (2,)
    return ok, "size is computed at run time" if not ok else ""


def slice_params(v: OpView) -> tuple[bool, str]:
    """SLICE begin and size must be constants, begin >= 0 and size > 0 (no -1 'to the end')"""
    if not (v.is_static(1) and v.is_static(2)):
        return False, "begin/size computed at run time"
    begin, size = v.const(1), v.const(2)
    if begin is not None and min(begin, default=0) < 0:
        return False, f"begin {list(begin)}"
    if size is not None and min(size, default=1) <= 0:
        return False, f"size {list(size)}"
    return True, ""


def strided_slice_params(v: OpView) -> tuple[bool, str]:
    """STRIDED_SLICE: constant begin/end/strides, all strides 1, no ellipsis/new-axis/shrink
    masks"""
    if mask := v.set_slice_mask():
        return False, mask
    if not all(v.is_static(p) for p in (1, 2, 3)):
        return False, "begin/end/strides computed at run time"
    strides = v.const(3)
    if strides is not None and any(s != 1 for s in strides):
        return False, f"strides {list(strides)}"
    rank = v.rank(v.input(0))
    if any(v.rank(v.input(p)) != 1 or v.input(p).shape[0] != rank for p in (1, 2, 3)):
        return False, "begin/end/strides length differs from the input rank"
    return True, ""


def split_params(v: OpView) -> tuple[bool, str]:
    """SPLIT into 2 to 4 outputs along a constant axis"""
    n = len(v.op.outputs)
    if not 2 <= n <= 4:
        return False, f"{n} outputs"
    return v.is_static(0), "split axis computed at run time"


def transpose_perm_constant(v: OpView) -> tuple[bool, str]:
    """Permutation must be a constant"""
    return v.is_static(1), "permutation computed at run time"


def space_to_depth_block(v: OpView) -> tuple[bool, str]:
    """Block size must be > 1 and divide the input height and width"""
    block, src = v.opt("block_size", 0), v.input(0)
    if block <= 1:
        return False, f"block size {block}"
    if src is not None and len(src.shape) == 4 and (src.shape[1] % block or src.shape[2] % block):
        return False, f"input {list(src.shape)} not divisible by {block}"
    return True, ""


def transpose_conv_params(v: OpView) -> tuple[bool, str]:
    """TRANSPOSE_CONV: constant 4-element output shape, constant filter and bias"""
    shape = v.input(0)
    if shape is None or not v.is_static(0) or shape.shape != (4,):
        return False, "output shape is not a constant [4] tensor"
    if not v.is_static(1):
        return False, "filter computed at run time"
    if len(v.op.inputs) > 3 and v.op.inputs[3] >= 0 and not v.is_static(3):
        return False, "bias computed at run time"
    return True, ""


def batch_matmul_params(v: OpView) -> tuple[bool, str]:
    """BATCH_MATMUL: both inputs rank >= 2; int8 right-hand side needs zero point 0"""
    a, b = v.input(0), v.input(1)
    if a is None or b is None or len(a.shape) < 2 or len(b.shape) < 2:
        return False, "input rank below 2"
    if b.dtype == "int8" and a.dtype == "int8":
        if b.quantization is None or any(b.quantization.zero_point):
            return False, "int8 right-hand side with a non-zero zero point"
    dynamic = a.dtype in FLOAT_DTYPES and b.dtype == "int8"
    return a.dtype == b.dtype or dynamic, f"inputs {a.dtype} and {b.dtype}"


def fully_connected_params(v: OpView) -> tuple[bool, str]:
    """FULLY_CONNECTED: default weights format, constant 2-D filter, bias of one value per unit"""
    if v.op.version == 8 or v.opt("weights_format", "DEFAULT") != "DEFAULT":
        return False, "sparse / shuffled weights format"
    filt = v.input(1)
    if filt is None or len(filt.shape) != 2:
        return False, "filter is not 2-D"
    if not v.is_static(1) and filt.dtype != "float32":
        return False, "filter computed at run time"
    bias = v.input(2)
    if bias is not None and bias.elements != filt.shape[0]:
        return False, f"bias has {bias.elements} values for {filt.shape[0]} units"
    if filt.dtype == "int4" and filt.shape[1] % 2:
        return False, f"int4 filter with odd input channels ({filt.shape[1]})"
    return True, ""


def fully_connected_types(v: OpView) -> tuple[bool, str]:
    """FULLY_CONNECTED input and output types must agree; float input with int weights is dynamic
    quantization"""
    src, filt, out = v.input(0), v.input(1), v.output(0)
    if src is None or filt is None or out is None:
        return False, "missing tensors"
    dynamic = src.dtype in FLOAT_DTYPES and filt.dtype in ("int8", "int4")
    static_int = src.dtype == "int8" and filt.dtype in ("int8", "int4")
    ok = src.dtype == out.dtype and (src.dtype == filt.dtype or dynamic or static_int
                                     or (src.dtype == "float32" and filt.dtype == "float16"))
    if ok and static_int and filt.quantization and any(filt.quantization.zero_point):
        return False, "int8 filter with a non-zero zero point"
    return ok, f"input {src.dtype}, filter {filt.dtype}, output {out.dtype}"


def leaky_relu_params(v: OpView) -> tuple[bool, str]:
    """LEAKY_RELU: alpha non-zero; quantized scale ratios within XNNPACK's range"""
    alpha = v.opt("alpha", 0.0)
    if not alpha:
        return False, "alpha is 0"
    src, out = _scale(v.input(0)), _scale(v.output(0))
    if src and out:
        positive = src / out
        negative = positive * alpha
        if not 1 / 256 <= positive <= 128 or not 1 / 256 <= abs(negative) <= 128:
            return False, f"scale ratios {positive:.3g} / {negative:.3g}"
    return True, ""


def quantize_params(v: OpView) -> tuple[bool, str]:
    """QUANTIZE from float, or re-quantize within one type with an input/output scale ratio in
    [1/256, 128]"""
    src, out = v.input(0), v.output(0)
    if src is None or out is None or src.dtype in FLOAT_DTYPES:
        return True, ""
    if src.dtype != out.dtype:
        return False, f"{src.dtype} -> {out.dtype}"
    a, b = _scale(src), _scale(out)
    ok = a is None or not b or 1 / 256 <= a / b <= 128
    return ok, f"scale ratio {a / b:.3g}" if not ok else ""


def dequantize_params(v: OpView) -> tuple[bool, str]:
    """DEQUANTIZE of run-time int8/uint8 tensors with per-tensor scale to float"""
    src, out = v.input(0), v.output(0)
    if src is None or out is None or out.dtype not in FLOAT_DTYPES:
        return False, "output is not float"
    if src.dtype not in ("int8", "uint8") or src.quantization is None:
        return False, f"{src.dtype} input"
    return not src.quantization.per_channel, "per-channel input"


CHECKS = {**generic.GENERIC, **{fn.__name__: fn for fn in (
    conv_bias_static, conv_types_match, filter_quantization, pool_stride_within_filter,
    binary_same_types, add_scale_ratio, mul_scale_ratio, concat_inputs,
    reshape_params, axes_constant, paddings_constant, resize_size_constant, slice_params,
    strided_slice_params, split_params, transpose_perm_constant, space_to_depth_block,
    transpose_conv_params, batch_matmul_params, fully_connected_params,
    fully_connected_types, leaky_relu_params, quantize_params, dequantize_params)}}


RULES = build_rules("xnnpack.toml", CHECKS, finalize=generic.unpack_static_weights)
