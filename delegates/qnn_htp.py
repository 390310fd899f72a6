"""Qualcomm Hexagon NPU (HTP) through the QNN delegate / QNN execution provider.

Follows Qualcomm's QNN documentation (docs.qualcomm.com, "Qualcomm AI Engine Direct SDK"):
the HTP backend op definition supplement (datatypes per op: 8/16-bit fixed point, FP16 on
v69 and newer), the "Supported Operations" table mapping TFLite ops to QNN ops, and the
HTP op-support revision history. Weights are signed 8-bit (or 4-bit for Conv2d and
FullyConnected), per-tensor or per-channel along the output channels with zero offset;
graphs are compiled ahead of time, so shapes must be static and control flow stays on the
CPU. The QNN delegate is closed source: these rules follow the published op definitions,
not delegate code.
"""

from __future__ import annotations

from edgeopt.delegates import checks as generic
from edgeopt.delegates.rules import build_rules
from edgeopt.delegates.view import FLOAT_DTYPES, OpView

QUANT_ACTIVATIONS = ("int8", "uint8", "int16")


def runs_fp16(v: OpView) -> bool:
    """Float ops run in fp16 on the HTP: with precision fp16, or precision auto (the default)
    in a float graph, as the phones run float models (AI Hub compiles them to fp16 on the NPU;
    onnxruntime's QNN EP enables HTP fp16 by default; QNN 2.35 made fp16 the HTP default)."""
    precision = v.settings.get("precision", "auto")
    return precision == "fp16" or (precision == "auto" and not v.index.integer_graph)


def precision_dtypes(v: OpView) -> tuple[bool, str]:
    """Activations must be 8/16-bit quantized, or float in a float graph (run in fp16;
    precision int8 keeps float on the CPU)"""
    allowed = set(QUANT_ACTIVATIONS) | set(v.param("extra_dtypes", ()))
    if runs_fp16(v):
        allowed |= {"float32", "float16"}
    bad = [t for t in v.data_tensors if t.dtype not in allowed]
    if not bad:
        return True, ""
    where = "float op in an int8 graph" if bad[0].dtype in FLOAT_DTYPES and \
        v.index.integer_graph else f"{bad[0].dtype} tensor"
    return False, f"{where} '{bad[0].name}'"


def op_precision(v: OpView) -> str:
    """float16 for a float op the HTP runs in fp16, else "" (the op's own dtype)."""
    floats = any(t.dtype in FLOAT_DTYPES for t in v.data_tensors)
    return "float16" if floats and runs_fp16(v) else ""


CHECKS = {**generic.GENERIC, "precision_dtypes": precision_dtypes}

RULES = build_rules("qnn_htp.toml", CHECKS, precision=op_precision)
