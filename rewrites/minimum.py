"""MINIMUM with a constant written as c − RELU(c − x) (SUB, RELU, SUB): the same values,
and ops ai-edge-quantizer has int8 rules for — it leaves MINIMUM in float, which an
int8-only accelerator (the Edge TPU, the Pixel TPU, Ethos-U) cannot run (clamps such as
PaddleOCR's hard-sigmoid reach the converter as RELU + MINIMUM)."""

from __future__ import annotations

from typing import Any

from edgeopt.rewrites.edit import Edit

OPS = ("MINIMUM",)
# Not only a missing kernel: the float op the quantizer leaves behind is the fallback.
RULES = frozenset({"op_in_table", "float_op_in_integer_graph", "data_dtypes",
                   "precision_dtypes", "vela"})


def rewrite(edit: Edit, position: int, op: Any) -> bool:
    a, b = (int(i) for i in op.inputs)
    y = int(op.outputs[0])
    constant, x = (a, b) if edit.constant(a) is not None else (b, a)
    if edit.constant(constant) is None or edit.constant(x) is not None or \
            not (edit.is_float(x) and edit.is_float(constant)):
        return False
    gap, positive = edit.float_like(y, "c_minus_x"), edit.float_like(y, "relu")
    sub = edit.options("SubOptions")
    edit.replace(position, [
        edit.new_op("SUB", [constant, x], [gap], sub),
        edit.new_op("RELU", [gap], [positive]),
        edit.new_op("SUB", [constant, positive], [y], sub),
    ])
    return True
