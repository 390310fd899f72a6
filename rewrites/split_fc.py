"""A FULLY_CONNECTED layer whose weights exceed the Edge TPU's parameter memory (about
8 MB of int8 weights) split along its output features into several smaller
FULLY_CONNECTED layers joined by CONCATENATION: each output is computed from the same row
of weights as before, so the values are the same; the Edge TPU compiler cuts a layer that
large from the delegate (Coral's split_fc tool does the same split by hand)."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.rewrites.edit import Edit

OPS = ("FULLY_CONNECTED",)
RULES = frozenset({"fully_connected_fits"})
# int8 weights (one byte each) one FULLY_CONNECTED may hold on the Edge TPU: libcoral's
# split_fc example (100,000 classes x 1,280 features) is cut, VGG16's 102.8 M-weight FC
# is not (Coral's published latency). The same figure is delegates/edgetpu.toml's
# fc_max_weights; tests/test_rewrites_fold.py checks they agree.
MAX_WEIGHTS = 128_000_000


def rewrite(edit: Edit, position: int, op: Any, max_weights: int = MAX_WEIGHTS) -> bool:
    x, y = int(op.inputs[0]), int(op.outputs[0])
    weights = edit.constant(int(op.inputs[1]))
    bias_index = int(op.inputs[2]) if len(op.inputs) > 2 else -1
    bias = edit.constant(bias_index) if bias_index >= 0 else None
    shape = edit.static_shape(y)
    if weights is None or weights.ndim != 2 or weights.dtype != np.float32 or \
            not edit.is_float(x) or shape is None or (bias_index >= 0 and bias is None) or \
            int(getattr(op.builtinOptions, "weightsFormat", 0) or 0) != 0:
        return False  # the rows are sliced as stored: default-format float weights only
    units, depth = weights.shape
    if units * depth <= max_weights or depth > max_weights:
        return False  # fits already, or one output row alone is too large
    rows = max_weights // depth
    pieces = [(start, min(start + rows, units)) for start in range(0, units, rows)]
    ops, outputs = [], []
    for number, (start, stop) in enumerate(pieces):
        inputs = [x, edit.constant_tensor(weights[start:stop], f"split_fc/weights_{number}")]
        if bias is not None:
            inputs.append(edit.constant_tensor(bias[start:stop], f"split_fc/bias_{number}"))
        part = edit.float_tensor([*shape[:-1], stop - start], f"split_fc/part_{number}")
        ops.append(edit.new_op("FULLY_CONNECTED", inputs, [part], _options(edit, op),
                               version=_version(edit, op)))
        outputs.append(part)
    ops.append(edit.new_op("CONCATENATION", outputs, [y],
                           edit.options("ConcatenationOptions", axis=len(shape) - 1)))
    edit.replace(position, ops)
    return True


def _options(edit: Edit, op: Any) -> tuple[str, Any]:
    """The layer's own options (fused activation, keep_num_dims) for every piece."""
    source = op.builtinOptions
    return edit.options(
        "FullyConnectedOptions",
        fusedActivationFunction=int(getattr(source, "fusedActivationFunction", 0) or 0),
        keepNumDims=bool(getattr(source, "keepNumDims", False)),
        asymmetricQuantizeInputs=bool(getattr(source, "asymmetricQuantizeInputs", False)))


def _version(edit: Edit, op: Any) -> int:
    return int(edit.model.operatorCodes[op.opcodeIndex].version or 1)
