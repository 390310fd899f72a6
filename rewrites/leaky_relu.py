"""LEAKY_RELU written as MAXIMUM(x, alpha · x) (MUL, MAXIMUM), exact for 0 ≤ alpha ≤ 1:
the Edge TPU compiler has no LEAKY_RELU kernel (YOLO-style detectors use it)."""

from __future__ import annotations

from typing import Any

from edgeopt.rewrites.edit import Edit

OPS = ("LEAKY_RELU",)


def rewrite(edit: Edit, position: int, op: Any) -> bool:
    x, y = int(op.inputs[0]), int(op.outputs[0])
    alpha = float(getattr(op.builtinOptions, "alpha", float("nan")))
    if not edit.is_float(x) or not 0.0 <= alpha <= 1.0:
        return False  # outside [0, 1] max(x, αx) is not the leaky ReLU
    scaled = edit.float_like(y, "alpha_x")
    edit.replace(position, [
        edit.new_op("MUL", [x, edit.scalar(alpha, "leaky_relu/alpha")], [scaled],
                    edit.options("MulOptions")),
        edit.new_op("MAXIMUM", [x, scaled], [y], edit.options("MaximumMinimumOptions")),
    ])
    return True
