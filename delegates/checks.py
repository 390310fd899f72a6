"""Checks every delegate uses, driven by the op's row in the delegate's table.

Each check returns ``(ok, detail)``; its docstring is the constraint the user reads.
Delegate modules add their own op-specific checks next to these.
"""

from __future__ import annotations

from edgeopt.delegates.rules import Verdict
from edgeopt.delegates.view import FLOAT_DTYPES, OpView

CONTROL_FLOW_OPS = frozenset({"WHILE", "IF", "CALL", "CALL_ONCE", "STABLEHLO_WHILE",
                              "STABLEHLO_CASE"})


def _names(tensors) -> str:
    return ", ".join(f"'{t.name}'" for t in tensors[:3]) + (" ..." if len(tensors) > 3 else "")


def not_flex(v: OpView) -> tuple[bool, str]:
    """TF Select (Flex) ops run in the TensorFlow kernel library on the CPU"""
    code = v.op.custom_code or ""
    return not code.startswith("Flex"), code


def not_custom(v: OpView) -> tuple[bool, str]:
    """Custom ops run on the CPU unless the delegate ships a kernel for that custom op"""
    if v.name != "CUSTOM":
        return True, ""
    return v.spec is not None, f"custom op '{v.op.custom_code}'"


def no_control_flow(v: OpView) -> tuple[bool, str]:
    """Control flow (WHILE, IF, CALL) runs in the CPU interpreter"""
    return v.name not in CONTROL_FLOW_OPS, v.name


def in_main_subgraph(v: OpView) -> tuple[bool, str]:
    """Only ops of the main graph are delegated; control-flow bodies run on the CPU"""
    return v.op.subgraph == 0, f"op is in subgraph {v.op.subgraph}"


def no_string_tensors(v: OpView) -> tuple[bool, str]:
    """String tensors are handled by the CPU kernels only"""
    bad = [t for t in v.inputs + v.outputs if t.dtype == "string"]
    return not bad, f"string tensor(s) {_names(bad)}" if bad else ""


def op_in_table(v: OpView) -> tuple[bool, str]:
    """Op type must be one the delegate implements"""
    return v.spec is not None, f"{v.name} is not supported by {v.delegate_title}"


def op_version(v: OpView) -> tuple[bool, str]:
    """Op version must not exceed the newest version the delegate implements"""
    limit = v.spec.max_version if v.spec else None
    ok = limit is None or v.op.version <= limit
    return ok, f"{v.name} version {v.op.version}, delegate implements up to {limit}"


def data_dtypes(v: OpView) -> tuple[bool, str]:
    """Run-time inputs and outputs must have a data type the delegate takes for this op"""
    allowed = v.spec.dtypes if v.spec else ()
    bad = [t for t in v.data_tensors if allowed and t.dtype not in allowed]
    if not bad:
        return True, ""
    return False, (f"{bad[0].dtype} tensor {_names(bad)}; {v.name} takes "
                   f"{', '.join(allowed)}")


def data_rank(v: OpView) -> tuple[bool, str]:
    """Run-time inputs and outputs must have a rank the delegate takes for this op"""
    low, high = v.spec.rank if v.spec else (0, 99)
    bad = [t for t in v.data_tensors if not low <= len(t.shape) <= high]
    if not bad:
        return True, ""
    return False, f"rank {len(bad[0].shape)} tensor {_names(bad)}; takes rank {low}..{high}"


def static_shapes(v: OpView) -> tuple[bool, str]:
    """Tensor shapes must be fixed at conversion time (no dynamic dimensions)"""
    bad = [t for t in v.inputs + v.outputs if t.is_dynamic]
    if not bad:
        return True, ""
    return False, f"{_names(bad)} has shape {list(bad[0].shape_signature)}"


def shape_input_constant(v: OpView) -> tuple[bool, str]:
    """Shape inputs (a RESHAPE target, a resize size) must be constants, not computed at run time"""
    position = v.param("shape_input", 1)
    if position >= len(v.op.inputs) or v.op.inputs[position] < 0:
        return bool(v.opt("new_shape")) or v.name != "RESHAPE", "empty target shape"
    return v.is_static(position), f"input {position} is computed at run time"


def softmax_beta_one(v: OpView) -> tuple[bool, str]:
    """SOFTMAX beta must be 1"""
    beta = v.opt("beta", 1.0)
    return beta == 1.0, f"beta is {beta}"


def block_above_one(v: OpView) -> tuple[bool, str]:
    """Block size must be > 1"""
    return v.opt("block_size", 0) > 1, f"block size {v.opt('block_size')}"


def per_tensor_activations(v: OpView) -> tuple[bool, str]:
    """Quantized activations must use one scale per tensor (per-tensor quantization)"""
    bad = [t for t in v.data_tensors if t.quantization is not None and t.quantization.per_channel]
    return not bad, f"per-channel activation {_names(bad)}" if bad else ""


def quantized_activations(v: OpView) -> tuple[bool, str]:
    """Quantized tensors must carry scale and zero point"""
    bad = [t for t in v.data_tensors
           if t.dtype in ("int8", "uint8", "int16") and t.quantization is None]
    return not bad, f"int tensor without quantization parameters {_names(bad)}" if bad else ""


def fused_activation(v: OpView) -> tuple[bool, str]:
    """Fused activation must be one the delegate implements for this op"""
    act = v.opt("fused_activation_function", "NONE")
    allowed = v.param("activations") or v.settings.get("activations")
    if not allowed or act in allowed:
        return True, ""
    return False, f"fused {act}; takes {', '.join(allowed)}"


def weights_constant(v: OpView) -> tuple[bool, str]:
    """Weights and biases must be constants known at conversion time"""
    positions = v.param("weights", (1, 2))
    bad = [p for p in positions if p < len(v.op.inputs) and v.op.inputs[p] >= 0
           and not v.is_static(p)]
    if not bad:
        return True, ""
    return False, f"input {bad[0]} ('{v.input(bad[0]).name}') is computed at run time"


def float_op_in_integer_graph(v: OpView) -> tuple[bool, str]:
    """Every op must be quantized: float ops cannot run on an integer-only accelerator"""
    floats = [t for t in v.data_tensors if t.dtype in FLOAT_DTYPES]
    if not floats:
        return True, ""
    where = "float op in an int8 graph" if v.index.integer_graph else "float model"
    return False, f"{where}: {floats[0].dtype} tensor {_names(floats)}"


def weight_quantization(v: OpView) -> tuple[bool, str]:
    """Quantized weights: signed 8-bit (4-bit for CONV_2D / FULLY_CONNECTED), zero offset when
    per-channel, per-channel only along output channels"""
    filt = v.input(1)
    if filt is None or filt.dtype in FLOAT_DTYPES:
        return True, ""
    q = filt.quantization
    if filt.dtype == "int4" and v.name not in ("CONV_2D", "FULLY_CONNECTED"):
        return False, f"int4 weights on {v.name}"
    if filt.dtype not in ("int8", "uint8", "int4") or q is None:
        return False, f"{filt.dtype} weights"
    if q.per_channel and (filt.dtype == "uint8" or any(q.zero_point)):
        return False, "per-channel weights with non-zero offsets"
    axis = v.param("filter_axis", 0)
    return not q.per_channel or q.axis == axis, f"per-channel axis {q.axis}, expected {axis}"


def unpack_static_weights(rules, views: dict, verdicts: dict) -> dict:
    """DEQUANTIZE/DENSIFY of a constant is folded into the delegate when every consumer is
    delegated (the delegate unpacks the weights at init: XNNPACK's static unpacking, the
    GPU delegate's FP16 partition helper); otherwise it stays on the CPU."""
    out = dict(verdicts)
    for index, view in views.items():
        if not _is_static_unpack(view):
            continue
        consumers = view.consumers_of_outputs()
        if consumers and all(verdicts.get(c, Verdict(False)).ok for c in consumers):
            out[index] = Verdict(True)
        else:
            out[index] = Verdict(False, "static_unpack_consumers",
                                 "Weight unpacking (DEQUANTIZE of a constant) is delegated only "
                                 "when every consumer is delegated")
    return out


def _is_static_unpack(view: OpView) -> bool:
    if view.name not in ("DEQUANTIZE", "DENSIFY") or not view.is_static(0):
        return False
    src, out = view.input(0), view.output(0)
    if src is None or out is None:
        return False
    if view.name == "DENSIFY":
        return src.dtype == out.dtype
    int8_ok = src.dtype == "int8" and src.quantization is not None
    return out.dtype == "float32" and (src.dtype == "float16" or int8_ok)



GENERIC = {fn.__name__: fn for fn in (
    not_flex, not_custom, no_control_flow, in_main_subgraph, no_string_tensors, op_in_table,
    op_version, data_dtypes, data_rank, static_shapes, shape_input_constant, softmax_beta_one,
    block_above_one,
    per_tensor_activations,
    quantized_activations, fused_activation, weights_constant, float_op_in_integer_graph,
    weight_quantization)}
