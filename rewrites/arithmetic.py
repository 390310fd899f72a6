"""NEG, SQUARE and SQUARED_DIFFERENCE written with MUL and SUB (−1 · x, x · x, (a − b)²),
and DIV by a constant as MUL by its reciprocal: the same values (the reciprocal to one
rounding) from the two arithmetic ops every delegate has."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.rewrites.edit import Edit

OPS = ("NEG", "SQUARE", "SQUARED_DIFFERENCE", "DIV")


def rewrite(edit: Edit, position: int, op: Any) -> bool:
    inputs, y = [int(i) for i in op.inputs], int(op.outputs[0])
    if not all(edit.is_float(i) for i in inputs):
        return False
    name = edit.op_name(op)
    mul = edit.options("MulOptions")
    if name == "NEG":
        ops = [edit.new_op("MUL", [inputs[0], edit.scalar(-1.0, "neg/minus_one")], [y], mul)]
    elif name == "SQUARE":
        ops = [edit.new_op("MUL", [inputs[0], inputs[0]], [y], mul)]
    elif name == "SQUARED_DIFFERENCE":
        difference = edit.float_like(y, "difference")
        ops = [edit.new_op("SUB", inputs, [difference], edit.options("SubOptions")),
               edit.new_op("MUL", [difference, difference], [y], mul)]
    else:
        reciprocal = _reciprocal(edit, inputs[1])
        if reciprocal is None:
            return False
        activation = int(getattr(op.builtinOptions, "fusedActivationFunction", 0) or 0)
        ops = [edit.new_op("MUL", [inputs[0], edit.constant_tensor(reciprocal, "div/reciprocal")],
                           [y], edit.options("MulOptions", fusedActivationFunction=activation))]
    edit.replace(position, ops)
    return True


def _reciprocal(edit: Edit, divisor: int) -> np.ndarray | None:
    """1 / the constant divisor; None when it is not a constant or holds 0 / non-finite."""
    values = edit.constant(divisor)
    if values is None or values.dtype != np.float32 or not np.all(np.isfinite(values)) \
            or np.any(values == 0):
        return None
    return (1.0 / values.astype(np.float64)).astype(np.float32)
