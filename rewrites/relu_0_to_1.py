"""RELU_0_TO_1 written as RELU6(6 · x) · 1/6 (MUL, RELU6, MUL): the same clamp to [0, 1]
from ops every delegate has and every int8 quantizer takes (the Edge TPU compiler, the
Pixel TPU and QNN have no RELU_0_TO_1; MediaPipe's and PaddleOCR's models end in it). In
int8 each step keeps the input's resolution: RELU6's output steps are 6/255, one 255th of
[0, 1] after the last MUL, as the op's own output."""

from __future__ import annotations

from typing import Any

from edgeopt.rewrites.edit import Edit

OPS = ("RELU_0_TO_1",)


def rewrite(edit: Edit, position: int, op: Any) -> bool:
    x, y = int(op.inputs[0]), int(op.outputs[0])
    if not edit.is_float(x):
        return False
    scaled, clipped = edit.float_like(y, "times6"), edit.float_like(y, "relu6")
    mul = edit.options("MulOptions")
    edit.replace(position, [
        edit.new_op("MUL", [x, edit.scalar(6.0, "relu_0_to_1/six")], [scaled], mul),
        edit.new_op("RELU6", [scaled], [clipped]),
        edit.new_op("MUL", [clipped, edit.scalar(1.0 / 6.0, "relu_0_to_1/sixth")], [y], mul),
    ])
    return True
