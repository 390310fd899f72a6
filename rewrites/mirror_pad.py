"""MIRROR_PAD (REFLECT or SYMMETRIC) written as SLICE and CONCATENATION: each mirrored row
or column is a one-wide slice of the input, joined in mirrored order along its axis. The
same values exactly, from two ops the Pixel TPU and the Edge TPU have (padding with zeros
instead, the usual advice, changes the values at the borders)."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.rewrites.edit import Edit

OPS = ("MIRROR_PAD",)
MAX_SLICES = 16  # more mirrored rows than this and the chain of slices costs more than it saves
REFLECT = 0


def rewrite(edit: Edit, position: int, op: Any) -> bool:
    x, y = int(op.inputs[0]), int(op.outputs[0])
    paddings = edit.constant(int(op.inputs[1]))
    shape = edit.static_shape(x)
    if not edit.is_float(x) or paddings is None or shape is None:
        return False
    paddings = paddings.reshape(-1, 2).astype(np.int64)
    reflect = int(getattr(op.builtinOptions, "mode", REFLECT)) == REFLECT
    plan = [(axis, int(b), int(a)) for axis, (b, a) in enumerate(paddings) if b or a]
    if not plan or sum(b + a for _, b, a in plan) > MAX_SLICES or \
            any(not _fits(shape[axis], b, a, reflect) for axis, b, a in plan):
        return False
    ops, current, current_shape = [], x, list(shape)
    for number, (axis, before, after) in enumerate(plan):
        rows = _mirrored_rows(current_shape[axis], before, after, reflect)
        pieces = [_slice(edit, ops, current, current_shape, axis, row) for row in rows[0]]
        pieces += [current]
        pieces += [_slice(edit, ops, current, current_shape, axis, row) for row in rows[1]]
        current_shape[axis] += before + after
        last = number == len(plan) - 1
        joined = y if last else edit.float_tensor(current_shape, f"mirror_pad/axis{axis}")
        ops.append(edit.new_op("CONCATENATION", pieces, [joined],
                               edit.options("ConcatenationOptions", axis=axis)))
        current = joined
    edit.replace(position, ops)
    return True


def _fits(size: int, before: int, after: int, reflect: bool) -> bool:
    limit = size - 1 if reflect else size
    return 0 <= before <= limit and 0 <= after <= limit


def _mirrored_rows(size: int, before: int, after: int, reflect: bool):
    """The input rows copied before and after, in output order."""
    skip = 1 if reflect else 0
    head = [before - 1 + skip - i for i in range(before)]
    tail = [size - 1 - skip - i for i in range(after)]
    return head, tail


def _slice(edit: Edit, ops: list, source: int, shape: list[int], axis: int, row: int) -> int:
    begin = [0] * len(shape)
    begin[axis] = row
    size = list(shape)
    size[axis] = 1
    out = edit.float_tensor(size, f"mirror_pad/row{axis}_{row}")
    ops.append(edit.new_op("SLICE", [source,
                                     edit.constant_tensor(np.asarray(begin, np.int32), "begin"),
                                     edit.constant_tensor(np.asarray(size, np.int32), "size")],
                           [out], edit.options("SliceOptions")))
    return out
