"""TRANSPOSE folded: two in a row that cancel are removed (a layout change and its inverse,
as NCHW/NHWC converters leave them), two that do not cancel become one, and a TRANSPOSE
that moves only size-1 dimensions becomes the RESHAPE it is (the elements keep their
order). The same values exactly; delegates such as the Edge TPU have no TRANSPOSE."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.rewrites.edit import Edit

OPS = ("TRANSPOSE",)
RULES = "any"


def rewrite(edit: Edit, position: int, op: Any) -> bool:
    x, y = int(op.inputs[0]), int(op.outputs[0])
    perm = _perm(edit, op)
    if perm is None or not edit.is_float(x):
        return False
    follower = edit.only_consumer(y)
    second = edit.subgraph.operators[follower] if follower is not None else None
    if second is not None and edit.op_name(second) == "TRANSPOSE" and _perm(edit, second):
        return _fold_pair(edit, position, follower, perm, _perm(edit, second))
    shape = edit.static_shape(x)
    if shape is None or edit.static_shape(y) is None or not _moves_only_ones(shape, perm):
        return False
    edit.replace(position, [edit.reshape(x, y)])
    return True


def _fold_pair(edit: Edit, first: int, second: int, p1: list[int], p2: list[int]) -> bool:
    """T2(T1(x)) = T(x) with perm p1[p2]: nothing when that is the identity."""
    x = int(edit.subgraph.operators[first].inputs[0])
    z = int(edit.subgraph.operators[second].outputs[0])
    composed = [p1[i] for i in p2]
    if composed == list(range(len(composed))):
        if edit.is_output(z):  # the graph's output tensor stays: an identity RESHAPE makes it
            if edit.static_shape(z) is None:
                return False
            edit.replace(second, [edit.reshape(x, z)])
        else:
            edit.rewire(z, x)
            edit.remove(second)
        edit.remove(first)
        return True
    perm = edit.constant_tensor(np.asarray(composed, np.int32), "transpose/perm")
    edit.replace(second, [edit.new_op("TRANSPOSE", [x, perm], [z],
                                      edit.options("TransposeOptions"))])
    edit.remove(first)
    return True


def _perm(edit: Edit, op: Any) -> list[int] | None:
    values = edit.constant(int(op.inputs[1])) if len(op.inputs) > 1 else None
    if values is None:
        return None
    perm = [int(v) for v in values.reshape(-1)]
    return perm if sorted(perm) == list(range(len(perm))) else None


def _moves_only_ones(shape: list[int], perm: list[int]) -> bool:
    """The dimensions larger than 1 keep their order: the transpose copies nothing."""
    kept = [axis for axis in perm if shape[axis] != 1]
    return kept == sorted(kept)

