"""Android NNAPI through LiteRT's NNAPI delegate, by NNAPI feature level (Android API level).

Follows google-ai-edge/LiteRT ``tflite/delegates/nnapi/nnapi_delegate.cc``
(``NNAPIDelegateKernel::Validate``: per-op version limits, minimum Android SDK version,
operand types and ranks) and ``nnapi_delegate_kernel.h`` (feature-level constants: 27 =
NNAPI 1.0, 28 = 1.1, 29 = 1.2, 30 = 1.3, 31 = feature level 5). The driver on a given phone
may still refuse an op the delegate accepts; these rules say what the delegate offers it.
NNAPI is deprecated from Android 15; the rules stay useful for devices that ship it.
"""

from __future__ import annotations

from edgeopt.delegates import checks as generic
from edgeopt.delegates.rules import build_rules
from edgeopt.delegates.view import FLOAT_DTYPES, OpView


def _api(v: OpView) -> int:
    return int(v.settings.get("api_level", 30))


def feature_level(v: OpView) -> tuple[bool, str]:
    """The op needs a minimum NNAPI feature level (Android API level)"""
    need = int(v.param("min_api", 27))
    return _api(v) >= need, f"{v.name} needs API {need}, target is API {_api(v)}"


def quant_level(v: OpView) -> tuple[bool, str]:
    """The quantized form of the op needs a newer feature level than its float form"""
    need = int(v.param("min_api_quant", 27))
    quantized = any(t.dtype in ("int8", "uint8") for t in v.data_tensors)
    return not quantized or _api(v) >= need, f"quantized {v.name} needs API {need}"


def int32_arithmetic_level(v: OpView) -> tuple[bool, str]:
    """int32 ADD/MUL need NNAPI 1.3 (API 30) and no fused activation"""
    if not any(t.dtype == "int32" for t in v.data_tensors):
        return True, ""
    if _api(v) < 30:
        return False, f"int32 {v.name} on API {_api(v)}"
    act = v.opt("fused_activation_function", "NONE")
    return act == "NONE", f"int32 {v.name} with fused {act}"


def conv_bias_present(v: OpView) -> tuple[bool, str]:
    """Convolution must have a bias input (NNAPI has no bias-less CONV_2D)"""
    ok = len(v.op.inputs) >= 3 and v.op.inputs[2] >= 0
    return ok, "bias omitted"


def dilation_level(v: OpView) -> tuple[bool, str]:
    """Dilated convolutions need NNAPI 1.2 (API 29)"""
    dilated = v.opt("dilation_w_factor", 1) != 1 or v.opt("dilation_h_factor", 1) != 1
    return not dilated or _api(v) >= 29, "dilated convolution before API 29"


def per_channel_level(v: OpView) -> tuple[bool, str]:
    """Per-channel quantized weights need NNAPI 1.2 (API 29)"""
    filt = v.input(1)
    per_channel = filt is not None and filt.quantization is not None and \
        filt.quantization.per_channel
    return not per_channel or _api(v) >= 29, "per-channel weights before API 29"


def hybrid_level(v: OpView) -> tuple[bool, str]:
    """Hybrid ops (float activations, 8-bit weights) need NNAPI 1.2 (API 29)"""
    src, filt = v.input(0), v.input(1)
    hybrid = src is not None and filt is not None and src.dtype in FLOAT_DTYPES and \
        filt.dtype in ("int8", "uint8")
    return not hybrid or _api(v) >= 29, "hybrid op before API 29"


def keep_num_dims_level(v: OpView) -> tuple[bool, str]:
    """FULLY_CONNECTED with keep_num_dims needs NNAPI 1.3 (API 30)"""
    return not v.opt("keep_num_dims") or _api(v) >= 30, "keep_num_dims before API 30"


def softmax_rank(v: OpView) -> tuple[bool, str]:
    """SOFTMAX input is at most 4-D (only 2-D or 4-D before API 29)"""
    rank = v.rank(v.input(0))
    if rank > 4:
        return False, f"rank {rank}"
    return _api(v) >= 29 or rank in (2, 4), f"rank {rank} before API 29"


def resize_params(v: OpView) -> tuple[bool, str]:
    """Resize: 4-D input, constant size; align_corners / half_pixel_centers need API 30"""
    if v.rank(v.input(0)) != 4:
        return False, f"rank {v.rank(v.input(0))} input"
    if len(v.op.inputs) < 2 or not v.is_static(1):
        return False, "size computed at run time"
    corners = v.opt("align_corners") or v.opt("half_pixel_centers")
    return not corners or _api(v) > 29, "align_corners/half_pixel_centers before API 30"


def quant_pool_window(v: OpView) -> tuple[bool, str]:
    """Quantized AVERAGE_POOL_2D window must have at most 256 elements (CPU reference path)"""
    src = v.input(0)
    if src is None or src.dtype not in ("int8", "uint8") or v.settings.get("accelerator"):
        return True, ""
    area = v.opt("filter_width", 1) * v.opt("filter_height", 1)
    return area <= 256, f"window of {area} elements"


def batch_matmul_params(v: OpView) -> tuple[bool, str]:
    """BATCH_MATMUL: same input types, rank 2..4, no batch broadcasting (API 31)"""
    a, b = v.input(0), v.input(1)
    if a is None or b is None or a.dtype != b.dtype:
        return False, "input types differ"
    if not 2 <= len(a.shape) <= 4 or len(a.shape) != len(b.shape):
        return False, f"ranks {len(a.shape)} and {len(b.shape)}"
    return a.shape[:-2] == b.shape[:-2], "broadcast batch dimensions"


CHECKS = {**generic.GENERIC, **{fn.__name__: fn for fn in (
    feature_level, quant_level, int32_arithmetic_level, conv_bias_present, dilation_level,
    per_channel_level, hybrid_level, keep_num_dims_level, softmax_rank, resize_params,
    quant_pool_window, batch_matmul_params)}}

RULES = build_rules("nnapi.toml", CHECKS)
