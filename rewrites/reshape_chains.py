"""RESHAPE chains collapsed: a RESHAPE whose only reader is another RESHAPE becomes one
RESHAPE to the final shape, and a RESHAPE back to its input's own shape is removed. Only
shapes change, never a value; each RESHAPE removed is one a delegate cannot refuse
(several limit reshapes by size or rank) or cut the graph at."""

from __future__ import annotations

from typing import Any

from edgeopt.rewrites.edit import Edit

OPS = ("RESHAPE",)
RULES = "any"


def rewrite(edit: Edit, position: int, op: Any) -> bool:
    x, y = int(op.inputs[0]), int(op.outputs[0])
    if edit.static_shape(x) is None or edit.static_shape(y) is None or not edit.is_float(x):
        return False  # a dynamic dimension: the final shape is not known here
    follower = edit.only_consumer(y)
    if follower is not None and edit.op_name(edit.subgraph.operators[follower]) == "RESHAPE":
        z = int(edit.subgraph.operators[follower].outputs[0])
        if edit.static_shape(z) is None:
            return False
        edit.replace(follower, [edit.reshape(x, z)])
        edit.remove(position)
        _drop_identity(edit, follower - 1)  # the merged RESHAPE, one place earlier now
        return True
    return _drop_identity(edit, position)


def _drop_identity(edit: Edit, position: int) -> bool:
    """Remove the RESHAPE at `position` when its output has its input's shape."""
    op = edit.subgraph.operators[position]
    x, y = int(op.inputs[0]), int(op.outputs[0])
    if edit.static_shape(x) != edit.static_shape(y) or edit.is_output(y):
        return False
    edit.rewire(y, x)
    edit.remove(position)
    return True

