"""EXPAND_DIMS and SQUEEZE written as RESHAPE to the same fixed shape: only the shape
changes, never a value, and RESHAPE is the form GPU delegates and NPUs take."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.rewrites.edit import Edit

OPS = ("EXPAND_DIMS", "SQUEEZE")


def rewrite(edit: Edit, position: int, op: Any) -> bool:
    x, y = int(op.inputs[0]), int(op.outputs[0])
    shape = edit.static_shape(y)
    if shape is None or edit.static_shape(x) is None:
        return False  # a dynamic dimension: the reshape target is not known here
    target = edit.constant_tensor(np.asarray(shape, np.int32), "reshape/shape")
    edit.replace(position, [edit.new_op("RESHAPE", [x, target], [y],
                                        edit.options("ReshapeOptions", newShape=shape))])
    return True
