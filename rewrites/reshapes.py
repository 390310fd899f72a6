"""EXPAND_DIMS and SQUEEZE written as RESHAPE to the same shape (a dynamic batch left to
RESHAPE to infer): only the shape changes, never a value, and RESHAPE is the form GPU
delegates and NPUs take."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.rewrites.edit import Edit

OPS = ("EXPAND_DIMS", "SQUEEZE")


def rewrite(edit: Edit, position: int, op: Any) -> bool:
    x, y = int(op.inputs[0]), int(op.outputs[0])
    shape = edit.reshape_target(x, y)  # a −1 batch stays −1: RESHAPE infers it
    if shape is None:
        return False  # more than one dynamic dimension: the target is not known here
    target = edit.constant_tensor(np.asarray(shape, np.int32), "reshape/shape")
    edit.replace(position, [edit.new_op("RESHAPE", [x, target], [y],
                                        edit.options("ReshapeOptions", newShape=shape))])
    return True
