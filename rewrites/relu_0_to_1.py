"""RELU_0_TO_1 written as 1 − RELU(1 − RELU(x)) (RELU, SUB, RELU, SUB): the same clamp to
[0, 1] from ops every delegate has and every int8 quantizer takes (the Edge TPU compiler,
the Pixel TPU and QNN have no RELU_0_TO_1; MediaPipe's and PaddleOCR's models end in it;
MINIMUM, the shorter form, has no int8 rule in ai-edge-quantizer)."""

from __future__ import annotations

from typing import Any

from edgeopt.rewrites.edit import Edit

OPS = ("RELU_0_TO_1",)


def rewrite(edit: Edit, position: int, op: Any) -> bool:
    x, y = int(op.inputs[0]), int(op.outputs[0])
    if not edit.is_float(x):
        return False
    positive, flipped, gap = (edit.float_like(y, s) for s in ("relu", "one_minus", "relu2"))
    sub = edit.options("SubOptions")
    edit.replace(position, [
        edit.new_op("RELU", [x], [positive]),
        edit.new_op("SUB", [edit.scalar(1.0, "relu_0_to_1/one"), positive], [flipped], sub),
        edit.new_op("RELU", [flipped], [gap]),
        edit.new_op("SUB", [edit.scalar(1.0, "relu_0_to_1/one"), gap], [y], sub),
    ])
    return True
