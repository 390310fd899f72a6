"""A zero PAD in front of a VALID convolution folded into the convolution as SAME padding
when it adds exactly the rows and columns SAME padding would (ONNX and PyTorch exports
write "same" padding as an explicit PAD): one op fewer, the same values, and no PAD left
for a delegate to refuse or to split the graph at."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.rewrites.edit import Edit
from edgeopt.tflite_edit import schema

OPS = ("PAD", "PADV2")
RULES = "any"  # whatever refused the PAD, folding it away removes the fallback
CONVOLUTIONS = ("CONV_2D", "DEPTHWISE_CONV_2D")


def rewrite(edit: Edit, position: int, op: Any) -> bool:
    x, padded = int(op.inputs[0]), int(op.outputs[0])
    consumer = edit.only_consumer(padded)
    shape, pads = edit.static_shape(x), _paddings(edit, op)
    if consumer is None or shape is None or pads is None or len(shape) != 4 \
            or not edit.is_float(x):
        return False
    conv = edit.subgraph.operators[consumer]
    if edit.op_name(conv) not in CONVOLUTIONS or int(conv.inputs[0]) != padded:
        return False
    options = conv.builtinOptions
    if int(options.padding) != schema().Padding.VALID or np.any(pads[[0, 3]]):
        return False
    kernel = edit.static_shape(int(conv.inputs[1]))
    if kernel is None or len(kernel) != 4:
        return False
    for axis, size, stride, dilation in ((1, kernel[1], options.strideH, options.dilationHFactor),
                                         (2, kernel[2], options.strideW, options.dilationWFactor)):
        if tuple(pads[axis]) != same_padding(shape[axis], size, int(stride), int(dilation)):
            return False
    options.padding = schema().Padding.SAME
    conv.inputs = [x, *[int(i) for i in conv.inputs[1:]]]
    edit.remove(position)
    return True


def same_padding(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """(before, after) that SAME padding adds along one axis (TFLite's rule: the extra row,
    when the total is odd, goes after)."""
    stride, dilation = max(stride, 1), max(dilation, 1)
    effective = (kernel - 1) * dilation + 1
    total = max((-(-size // stride) - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


def _paddings(edit: Edit, op: Any) -> np.ndarray | None:
    """The PAD's [rank, 2] paddings when constant and the pad value is zero, else None."""
    values = edit.constant(int(op.inputs[1]))
    if values is None or values.size != 8:
        return None
    if len(op.inputs) > 2 and int(op.inputs[2]) >= 0:  # PADV2: the constant pad value
        fill = edit.constant(int(op.inputs[2]))
        if fill is None or np.any(fill != 0):
            return None
    return values.reshape(4, 2).astype(np.int64)
