"""The folding rewrites and the fully-connected split (edgeopt.rewrites: fold_pad,
transposes, reshape_chains, split_fc), each on a tiny float .tflite the TFLite converter
made, checked in LiteRT against the model before the rewrite.

Today's converter folds a PAD into a convolution and cancels TRANSPOSE and RESHAPE chains
itself; ONNX exporters (onnx2tf), older converters and apps' shipped files do not. The
tests write those forms into a converter-made model with the same editor the rewrites use
(an op between them removed, or the chain inserted), as such files hold them."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from importlib import resources

import numpy as np
import pytest
from test_rewrites import _ops, _same_values, _tflite

from edgeopt import rewrites
from edgeopt.rewrites import split_fc
from edgeopt.rewrites.edit import Edit
from edgeopt.tflite_edit import opcode_name, pack, unpack


def _without(content: bytes, name: str) -> bytes:
    """The model with every `name` op removed, its readers reading its input instead."""
    model = unpack(content)
    edit = Edit(model, model.subgraphs[0])
    for position in range(len(edit.subgraph.operators) - 1, -1, -1):
        op = edit.subgraph.operators[position]
        if opcode_name(model, op)[0] == name:
            edit.rewire(int(op.outputs[0]), int(op.inputs[0]))
            edit.remove(position)
    return pack(model)


def _inserted(content: bytes, after: str, chain: Callable[[Edit, int], tuple[list, int]]):
    """The model with `chain(edit, x) -> (ops, y)` between the first `after` op (output x)
    and the ops that read x, which then read y."""
    model = unpack(content)
    edit = Edit(model, model.subgraphs[0])
    operators = edit.subgraph.operators
    position = next(p for p, op in enumerate(operators) if opcode_name(model, op)[0] == after)
    x = int(operators[position].outputs[0])
    readers = [operators[p] for p in edit.consumers(x)]
    ops, y = chain(edit, x)
    for op in readers:
        op.inputs = [y if int(i) == x else int(i) for i in op.inputs]
    operators[position + 1:position + 1] = ops
    return pack(model)


def _transpose(edit: Edit, x: int, perm: list[int], name: str) -> tuple[object, int]:
    shape = [int(edit.tensor(x).shape[p]) for p in perm]
    y = edit.float_tensor(shape, name)
    constant = edit.constant_tensor(np.asarray(perm, np.int32), f"{name}/perm")
    return edit.new_op("TRANSPOSE", [x, constant], [y], edit.options("TransposeOptions")), y


def _reshape(edit: Edit, x: int, shape: list[int], name: str) -> tuple[object, int]:
    y = edit.float_tensor(shape, name)
    return edit.reshape(x, y), y


def _chain(*steps):
    """steps: ("T", perm) or ("R", shape), applied in order."""
    def make(edit: Edit, x: int):
        ops = []
        for number, (kind, arg) in enumerate(steps):
            op, x = (_transpose if kind == "T" else _reshape)(edit, x, arg, f"chain_{number}")
            ops.append(op)
        return ops, x
    return make


def _applied(original: bytes, name: str) -> tuple[bytes, int]:
    rewritten, applied = rewrites.apply(original, [name])
    assert [a.name for a in applied] == [name]
    return rewritten, applied[0].count


SHAPE = (1, 4, 6, 3)


def _relu_times_two(shape=SHAPE) -> bytes:
    import tensorflow as tf

    return _tflite(lambda x: tf.nn.relu(x) * 2.0, shape)


# ---------------------------------------------------------------------------- PAD + conv

def _padded_conv(depthwise: bool, stride: int, pads: list[int], shape=(1, 6, 6, 4)):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    paddings = [[0, 0], pads[:2], pads[2:], [0, 0]]
    if depthwise:
        kernel = tf.constant(rng.standard_normal((3, 3, shape[-1], 1)).astype(np.float32))

        def conv(x):
            return tf.nn.depthwise_conv2d(x, kernel, [1, stride, stride, 1], "VALID")
    else:
        kernel = tf.constant(rng.standard_normal((3, 3, shape[-1], 5)).astype(np.float32))

        def conv(x):
            return tf.nn.conv2d(x, kernel, stride, "VALID")
    # a RELU between keeps the converter from folding the PAD; removing it leaves the
    # PAD -> VALID convolution an ONNX export writes
    made = _tflite(lambda x: conv(tf.nn.relu(tf.pad(x, paddings))), shape)
    return _without(made, "RELU")


@pytest.mark.parametrize("depthwise", [False, True])
def test_a_pad_that_is_same_padding_folds_into_the_convolution(depthwise):
    original = _padded_conv(depthwise, 1, [1, 1, 1, 1])
    assert _ops(original)[0] == "PAD"
    assert rewrites.wanted([("PAD", "op_in_table")]) == ["fold_pad"]
    rewritten, count = _applied(original, "fold_pad")
    assert count == 1 and "PAD" not in _ops(rewritten)
    conv = unpack(rewritten).subgraphs[0].operators[0]
    assert conv.builtinOptions.padding == 0  # SAME
    _same_values(original, rewritten, [(1, 6, 6, 4)], rtol=1e-6)


def test_a_pad_other_than_same_padding_stays():
    # stride 2 on 6 rows: SAME pads 0 before and 1 after, not 1 and 1
    original = _padded_conv(False, 2, [1, 1, 1, 1])
    assert rewrites.apply(original, ["fold_pad"]) == (original, [])
    # stride 2 with SAME's own (0, 1): folded
    folded, count = _applied(_padded_conv(False, 2, [0, 1, 0, 1]), "fold_pad")
    assert count == 1 and "PAD" not in _ops(folded)


# ---------------------------------------------------------------------------- TRANSPOSE

def test_a_transpose_and_its_inverse_are_removed():
    original = _inserted(_relu_times_two(), "RELU", _chain(("T", [0, 3, 1, 2]),
                                                           ("T", [0, 2, 3, 1])))
    assert _ops(original).count("TRANSPOSE") == 2
    assert rewrites.wanted([("TRANSPOSE", "op_in_table")]) == ["transposes"]
    rewritten, _ = _applied(original, "transposes")
    assert _ops(rewritten) == ["RELU", "MUL"]
    _same_values(original, rewritten, [SHAPE], rtol=0.0)


def test_two_transposes_that_do_not_cancel_become_one():
    original = _inserted(_relu_times_two(), "RELU", _chain(
        ("T", [0, 3, 1, 2]), ("T", [0, 1, 3, 2]), ("R", list(SHAPE))))
    rewritten, _ = _applied(original, "transposes")
    assert _ops(rewritten).count("TRANSPOSE") == 1
    _same_values(original, rewritten, [SHAPE], rtol=0.0)


def test_a_transpose_of_size_one_dimensions_becomes_a_reshape_and_others_stay():
    shape = (1, 1, 5, 8)
    original = _inserted(_relu_times_two(shape), "RELU", _chain(("T", [0, 2, 1, 3]),
                                                                ("R", list(shape))))
    rewritten, _ = _applied(original, "transposes")
    assert "TRANSPOSE" not in _ops(rewritten) and _ops(rewritten).count("RESHAPE") == 2
    _same_values(original, rewritten, [shape], rtol=0.0)
    moving = _inserted(_relu_times_two(), "RELU", _chain(("T", [0, 2, 1, 3]),
                                                         ("R", list(SHAPE))))
    assert rewrites.apply(moving, ["transposes"]) == (moving, [])  # it moves data


# ---------------------------------------------------------------------------- RESHAPE

def test_a_reshape_chain_back_to_the_input_shape_goes():
    original = _inserted(_relu_times_two(), "RELU", _chain(("R", [1, 24, 3]), ("R", [1, 72]),
                                                           ("R", [1, 4, 18]),
                                                           ("R", list(SHAPE))))
    assert _ops(original).count("RESHAPE") == 4
    assert rewrites.wanted([("RESHAPE", "reshape_params")]) == ["reshape_chains"]
    rewritten, _ = _applied(original, "reshape_chains")
    assert _ops(rewritten) == ["RELU", "MUL"]  # the chain ends at the shape it started at
    _same_values(original, rewritten, [SHAPE], rtol=0.0)


def test_a_reshape_chain_becomes_one_reshape():
    import tensorflow as tf

    flat = _tflite(lambda x: tf.reshape(tf.nn.relu(x), [1, 72]) * 2.0, SHAPE)
    original = _inserted(flat, "RELU", _chain(("R", [1, 24, 3]), ("R", [1, 4, 18])))
    assert _ops(original) == ["RELU", "RESHAPE", "RESHAPE", "MUL", "RESHAPE"]
    rewritten, _ = _applied(original, "reshape_chains")
    assert _ops(rewritten) == ["RELU", "RESHAPE", "MUL", "RESHAPE"]
    _same_values(original, rewritten, [SHAPE], rtol=0.0)


# ---------------------------------------------------------------------------- FULLY_CONNECTED

def _dense(units: int = 40, depth: int = 16) -> bytes:
    import tensorflow as tf

    rng = np.random.default_rng(0)
    weights = tf.constant(rng.standard_normal((depth, units)).astype(np.float32))
    bias = tf.constant(rng.standard_normal(units).astype(np.float32))
    return _tflite(lambda x: tf.nn.relu(tf.matmul(x, weights) + bias), (1, depth))


def test_a_fully_connected_layer_over_the_limit_is_split_with_the_same_values():
    original = _dense()
    assert _ops(original) == ["FULLY_CONNECTED"]
    model = unpack(original)
    edit = Edit(model, model.subgraphs[0])
    op = edit.subgraph.operators[0]
    assert split_fc.rewrite(edit, 0, op, max_weights=16 * 14)  # 14 output rows a piece
    rewritten = pack(model)
    assert _ops(rewritten) == ["FULLY_CONNECTED"] * 3 + ["CONCATENATION"]
    _same_values(original, rewritten, [(1, 16)], rtol=1e-6)
    # under the limit (the Edge TPU's 8 MB), nothing to split
    assert rewrites.apply(original, ["split_fc"]) == (original, [])


def test_the_edge_tpu_refuses_a_fully_connected_layer_too_large_and_names_the_split():
    import tensorflow as tf

    from edgeopt.delegates import place

    rng = np.random.default_rng(0)
    weights = tf.constant(rng.standard_normal((16, 40)).astype(np.float32))
    fn = tf.function(lambda x: tf.nn.relu(tf.matmul(x, weights)),
                     input_signature=[tf.TensorSpec((1, 16), tf.float32)])
    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()],
                                                                fn)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([rng.standard_normal((1, 16))
                                                 .astype(np.float32)] for _ in range(8))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    content = converter.convert()
    assert place(content, "edgetpu").cpu_ops == 0  # 640 weights fit the 8 MB
    small = place(content, "edgetpu", fc_max_weights=100)
    [fallback] = [f for f in small.fallbacks() if f.op == "FULLY_CONNECTED"]
    assert fallback.rule == "fully_connected_fits" and "640 weights" in fallback.reason
    assert "CONCATENATION" in fallback.rewrite
    assert rewrites.wanted([(fallback.op, fallback.rule)]) == ["split_fc"]


def test_the_split_uses_the_edge_tpu_rules_own_limit():
    table = tomllib.loads(resources.files("edgeopt.delegates").joinpath("edgetpu.toml")
                          .read_text())
    assert table["settings"]["fc_max_weights"] == split_fc.MAX_WEIGHTS


def test_every_rewrite_has_its_message():
    for name in ("split_fc", "fold_pad", "transposes", "reshape_chains"):
        assert name in rewrites.CATALOGUE and len(rewrites.message(name)) > 80
