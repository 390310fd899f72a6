"""MINIMUM with a constant written as c − RELU(c − x) (SUB, RELU, SUB): the same values,
and ops ai-edge-quantizer has int8 rules for — it leaves MINIMUM in float, which an
int8-only accelerator (the Edge TPU, the Pixel TPU, Ethos-U) cannot run (clamps such as
PaddleOCR's hard-sigmoid reach the converter as RELU + MINIMUM). A MINIMUM with +inf or
FLT_MAX (a clip with no upper bound, as tf.clip_by_value(x, lo, np.inf) is written) is x
itself and is dropped."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.rewrites.edit import Edit

OPS = ("MINIMUM",)
# Not only a missing kernel: the float op the quantizer leaves behind is the fallback.
RULES = frozenset({"op_in_table", "float_op_in_integer_graph", "data_dtypes",
                   "precision_dtypes", "vela"})
# A bound this large is none: the TFLite converter writes tf.clip_by_value(x, lo, np.inf)'s
# +inf as FLT_MAX, onnx-tf keeps +inf.
UNBOUNDED = float(np.finfo(np.float32).max)


def rewrite(edit: Edit, position: int, op: Any) -> bool:
    a, b = (int(i) for i in op.inputs)
    y = int(op.outputs[0])
    constant, x = (a, b) if edit.constant(a) is not None else (b, a)
    values = edit.constant(constant)
    if values is None or edit.constant(x) is not None or \
            not (edit.is_float(x) and edit.is_float(constant)):
        return False
    if np.all(values >= UNBOUNDED):
        # c − RELU(c − x) is inf − inf = NaN for c = +inf, and 0 for c = FLT_MAX (c − x
        # rounds to c): no upper bound, so x itself
        return _drop(edit, position, x, y)
    if not np.all(np.isfinite(values)):
        return False
    gap, positive = edit.float_like(y, "c_minus_x"), edit.float_like(y, "relu")
    sub = edit.options("SubOptions")
    edit.replace(position, [
        edit.new_op("SUB", [constant, x], [gap], sub),
        edit.new_op("RELU", [gap], [positive]),
        edit.new_op("SUB", [constant, positive], [y], sub),
    ])
    return True


def _drop(edit: Edit, position: int, x: int, y: int) -> bool:
    """MINIMUM(x, +inf) = x: its readers read x instead. Not when y is a graph output (it
    keeps its tensor, so the op stays) or the constant broadcasts x to a larger shape."""
    shapes = [(list(t.shape), None if t.shapeSignature is None else list(t.shapeSignature))
              for t in (edit.tensor(x), edit.tensor(y))]
    if shapes[0] != shapes[1] or edit.is_output(y):
        return False
    edit.rewire(y, x)
    edit.remove(position)
    return True
