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


def precision_dtypes(v: OpView) -> tuple[bool, str]:
    """Activations must be 8/16-bit quantized (float runs on the HTP only with precision fp16)"""
    allowed = set(QUANT_ACTIVATIONS) | set(v.param("extra_dtypes", ()))
    if v.settings.get("precision", "int8") == "fp16":
        allowed |= {"float32", "float16"}
    bad = [t for t in v.data_tensors if t.dtype not in allowed]
    if not bad:
        return True, ""
    where = "float op in an int8 graph" if bad[0].dtype in FLOAT_DTYPES and \
        v.index.integer_graph else f"{bad[0].dtype} tensor"
    return False, f"{where} '{bad[0].name}'"


CHECKS = {**generic.GENERIC, "precision_dtypes": precision_dtypes}

RULES = build_rules("qnn_htp.toml", CHECKS)
