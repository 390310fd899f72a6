"""RELU_0_TO_1 written as MINIMUM(RELU(x), 1): the same clamp to [0, 1] from two ops that
every delegate has (the Edge TPU compiler, the Pixel TPU and QNN have no RELU_0_TO_1;
MediaPipe's landmark models end in it)."""

from __future__ import annotations

from typing import Any

from edgeopt.rewrites.edit import Edit

OPS = ("RELU_0_TO_1",)


def rewrite(edit: Edit, position: int, op: Any) -> bool:
    x, y = int(op.inputs[0]), int(op.outputs[0])
    if not edit.is_float(x):
        return False
    positive = edit.float_like(y, "relu")
    edit.replace(position, [
        edit.new_op("RELU", [x], [positive]),
        edit.new_op("MINIMUM", [positive, edit.scalar(1.0, "relu_0_to_1/one")], [y],
                    edit.options("MaximumMinimumOptions")),
    ])
    return True
