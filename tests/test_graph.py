"""Tests for the format-neutral graph IR and its TFLite / ONNX readers.

Models are built here, not loaded from fixtures on disk: a small Keras Conv2D + DepthwiseConv2D
+ Dense net converted to float and full-int8 TFLite, a TF function with a while loop and a
Flex op, and hand-written ONNX graphs. TensorFlow is imported only inside the fixtures that
need it; everything TensorFlow builds is shared through module-scoped fixtures.

Hand-computed MACs of the Keras net (input 16x16x3, batch 1):
  Conv2D 8 filters 3x3, stride 2, SAME -> 8x8x8 outputs, each 3*3*3 MACs  = 13_824
  DepthwiseConv2D 3x3, VALID           -> 6x6x8 outputs, each 3*3 MACs    =  2_592
  Dense 288 -> 10                      -> 10 outputs, each 288 MACs       =  2_880
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeopt.errors import ModelLoadError
from edgeopt.graph import Graph, Op, Quantization, Tensor
from edgeopt.onnx_reader import read_onnx
from edgeopt.tflite_reader import read_tflite

CONV_MACS, DW_MACS, FC_MACS = 13_824, 2_592, 2_880
KERAS_MACS = CONV_MACS + DW_MACS + FC_MACS


# --------------------------------------------------------------------------
# Helpers and fixtures
# --------------------------------------------------------------------------


def _quiet_tf():
    """Import TensorFlow with its C++ logging turned down."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    return tf


def _ops(graph: Graph, name: str) -> list[Op]:
    return [op for op in graph.ops if op.op == name]


def _only(graph: Graph, name: str) -> Op:
    found = _ops(graph, name)
    assert len(found) == 1, f"expected one {name}, got {graph.op_histogram()}"
    return found[0]


@pytest.fixture(scope="module")
def keras_tflite(tmp_path_factory):
    """(Keras param count, float .tflite path, int8 .tflite bytes) of the test net."""
    tf = _quiet_tf()
    import keras

    keras.utils.set_random_seed(0)

    # Non-zero, distinct biases: the converter drops all-zero Dense biases and
    # deduplicates identical constant buffers (the zero-initialised conv and depthwise
    # biases would become one shared tensor), which would break param_count == Keras.
    # One initializer per layer: a seeded initializer repeats its values, and equal bias
    # vectors would again be merged into one tensor.
    def bias(seed: int):
        return keras.initializers.RandomUniform(0.1, 0.5, seed=seed)

    inputs = keras.Input((16, 16, 3))  # batch left dynamic on purpose
    x = keras.layers.Conv2D(
        8, 3, strides=2, padding="same", activation="relu", bias_initializer=bias(1)
    )(inputs)
    x = keras.layers.DepthwiseConv2D(
        3, padding="valid", activation="relu6", bias_initializer=bias(2)
    )(x)
    x = keras.layers.Flatten()(x)
    outputs = keras.layers.Dense(10, bias_initializer=bias(3))(x)
    model = keras.Model(inputs, outputs)

    float_path = tmp_path_factory.mktemp("tflite") / "net_float.tflite"
    float_path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())

    def representative():
        rng = np.random.default_rng(0)
        for _ in range(8):
            yield [rng.random((1, 16, 16, 3), dtype=np.float32)]

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    return model.count_params(), float_path, converter.convert()


@pytest.fixture(scope="module")
def float_graph(keras_tflite) -> Graph:
    return read_tflite(keras_tflite[1])


@pytest.fixture(scope="module")
def int8_graph(keras_tflite) -> Graph:
    return read_tflite(keras_tflite[2])


@pytest.fixture(scope="module")
def flex_while_tflite() -> bytes:
    """A TF function with a while loop (-> WHILE + 2 subgraphs) and a TF Select op."""
    tf = _quiet_tf()

    @tf.function(input_signature=[tf.TensorSpec([1, 2, 2], tf.float32)])
    def fn(x):
        def body(i, y):
            return i + 1, y * 2.0

        _, y = tf.while_loop(lambda i, y: i < 3, body, [tf.constant(0), x])
        return tf.linalg.det(y)  # MatrixDeterminant has no builtin: becomes FlexMatrixDeterminant

    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], fn)
    converter.target_spec.supported_ops = [
        tf.lite.OpsSet.TFLITE_BUILTINS,
        tf.lite.OpsSet.SELECT_TF_OPS,
    ]
    return converter.convert()


def _onnx_model(nodes, inputs, outputs, initializers, opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _init(name: str, shape: tuple[int, ...], dtype=np.float32) -> TensorProto:
    rng = np.random.default_rng(len(name))
    return numpy_helper.from_array(rng.standard_normal(shape).astype(dtype), name)


@pytest.fixture(scope="module")
def onnx_cnn() -> onnx.ModelProto:
    """The Keras net's twin in NCHW: Conv+Relu, depthwise Conv (group=8)+Clip, Flatten, Gemm."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])
    nodes = [
        helper.make_node(
            "Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1],
            kernel_shape=[3, 3],
        ),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], group=8, kernel_shape=[3, 3]),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
        helper.make_node("Flatten", ["r2"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1),
    ]  # fmt: skip
    inits = [
        _init("w1", (8, 3, 3, 3)),
        _init("b1", (8,)),
        _init("w2", (8, 1, 3, 3)),
        _init("b2", (8,)),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
        _init("w3", (10, 288)),
        _init("b3", (10,)),
    ]
    model = _onnx_model(nodes, [x], [y], inits)
    onnx.checker.check_model(model)
    return model


# --------------------------------------------------------------------------
# Graph IR
# --------------------------------------------------------------------------


def test_graph_helpers_on_a_hand_built_graph():
    w = Tensor("w", (4, 2), "float32", None, True, 32, None)
    shape = Tensor("shape", (2,), "int32", None, True, 8, None)
    x = Tensor("x", (1, 2), "float32", (-1, 2), False, 0, None)
    y = Tensor("y", (1, 4), "float32", (-1, 4), False, 0, None)
    ops = (
        Op(0, "FULLY_CONNECTED", 1, (2, 0, -1), (3,), {}, None, 8, 0),
        Op(1, "RESHAPE", 1, (3, 1), (3,), {}, None, 0, 0),
        Op(2, "RESHAPE", 1, (3, 1), (3,), {}, None, 0, 0),
    )
    g = Graph("tflite", (w, shape, x, y), ops, (2,), (3,), 1, {})
    assert g.op_histogram() == {"RESHAPE": 2, "FULLY_CONNECTED": 1}
    assert list(g.op_histogram()) == ["RESHAPE", "FULLY_CONNECTED"]
    # The int32 reshape target is a constant but not a parameter.
    assert (g.param_count(), g.param_bytes(), g.constant_bytes()) == (8, 32, 40)
    assert g.total_macs() == 8
    assert g.input_tensors() == (x,) and g.output_tensors() == (y,)
    assert x.is_dynamic and not w.is_dynamic
    with pytest.raises(IndexError):
        g.tensor(-1)  # an omitted optional input must not wrap around to the last tensor
    assert hash(ops[0]) == hash(Op(0, "FULLY_CONNECTED", 1, (2, 0, -1), (3,), {"a": 1}, None, 8))
    q = Quantization((0.5,), (0,), None)
    assert not q.per_channel and Quantization((0.1, 0.2), (0, 0), 0).per_channel


def test_readers_do_not_import_tensorflow():
    code = (
        "import sys, edgeopt.graph, edgeopt.tflite_reader, edgeopt.onnx_reader;"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported';"
        "import edgeopt.graph as g; assert 'numpy' not in vars(g)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --------------------------------------------------------------------------
# TFLite
# --------------------------------------------------------------------------


def test_tflite_float_ops_and_options(float_graph):
    g = float_graph
    assert g.format == "tflite" and g.subgraph_count == 1
    assert set(g.op_histogram()) >= {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"}
    conv = _only(g, "CONV_2D")
    assert conv.options["stride_w"] == conv.options["stride_h"] == 2
    assert conv.options["padding"] == "SAME"
    assert conv.options["fused_activation_function"] == "RELU"
    assert conv.options["dilation_w_factor"] == 1
    dw = _only(g, "DEPTHWISE_CONV_2D")
    assert dw.options["padding"] == "VALID"
    assert dw.options["fused_activation_function"] == "RELU6"
    assert dw.options["depth_multiplier"] == 1
    fc = _only(g, "FULLY_CONNECTED")
    assert fc.options["fused_activation_function"] == "NONE"
    assert fc.options["keep_num_dims"] is False
    assert all(op.custom_code is None and op.subgraph == 0 for op in g.ops)
    assert [op.index for op in g.ops] == list(range(len(g.ops)))
    # Filter layouts: Conv2D OHWI, depthwise 1HWC, FC [units, in].
    assert g.tensor(conv.inputs[1]).shape == (8, 3, 3, 3)
    assert g.tensor(dw.inputs[1]).shape == (1, 3, 3, 8)
    assert g.tensor(fc.inputs[1]).shape == (10, 288)
    assert all(t.dtype in ("float32", "int32") for t in g.tensors)


def test_tflite_float_macs_and_dynamic_batch(float_graph):
    g = float_graph
    assert _only(g, "CONV_2D").macs == CONV_MACS
    assert _only(g, "DEPTHWISE_CONV_2D").macs == DW_MACS
    assert _only(g, "FULLY_CONNECTED").macs == FC_MACS
    assert g.total_macs() == KERAS_MACS
    assert all(op.macs == 0 for op in g.ops if op.op == "RESHAPE")
    (inp,) = g.input_tensors()
    # The Keras batch is dynamic: -1 in the signature, 1 in the static shape (MACs use 1).
    assert inp.shape == (1, 16, 16, 3) and inp.shape_signature == (-1, 16, 16, 3)
    assert inp.dtype == "float32" and not inp.is_constant and inp.quantization is None
    assert g.output_tensors()[0].shape == (1, 10)


def test_tflite_float_param_count_matches_keras(keras_tflite, float_graph):
    keras_params = keras_tflite[0]
    g = float_graph
    # Keras counts 8*27+8 + 72+8 + 2880+10. TFLite stores the same weights (transposed) and
    # biases; this only holds because the test net uses non-zero, distinct biases (see the
    # fixture). The Flatten's int32 reshape target is a constant but not a parameter.
    assert keras_params == 3194
    assert g.param_count() == keras_params
    assert g.param_bytes() == 4 * keras_params
    plumbing = [t for t in g.tensors if t.is_constant and t.dtype == "int32"]
    assert plumbing, "expected the RESHAPE target constant"
    assert g.constant_bytes() == g.param_bytes() + sum(t.size_bytes for t in plumbing)
    assert all(t.size_bytes == 0 for t in g.tensors if not t.is_constant)


def test_tflite_int8_quantization(keras_tflite, int8_graph):
    g = int8_graph
    (inp,), (out,) = g.input_tensors(), g.output_tensors()
    assert inp.dtype == out.dtype == "int8"
    assert inp.quantization is not None and not inp.quantization.per_channel
    assert inp.quantization.axis is None

    conv = _only(g, "CONV_2D")
    w = g.tensor(conv.inputs[1])
    assert w.dtype == "int8" and w.is_constant and w.size_bytes == 8 * 27
    assert w.quantization.per_channel and w.quantization.axis == 0
    assert len(w.quantization.scale) == len(w.quantization.zero_point) == 8
    assert all(z == 0 for z in w.quantization.zero_point)  # symmetric weights
    bias = g.tensor(conv.inputs[2])
    assert bias.dtype == "int32" and bias.quantization.per_channel

    dw_w = g.tensor(_only(g, "DEPTHWISE_CONV_2D").inputs[1])
    assert dw_w.quantization.per_channel and dw_w.quantization.axis == 3  # channel is last

    # Same MACs as the float model, and every learned value is still there (int8 weights,
    # int32 biases): quantization changes bytes, not counts.
    assert g.total_macs() == KERAS_MACS
    assert g.param_count() == keras_tflite[0]
    assert g.param_bytes() == (8 * 27 + 72 + 2880) + 4 * (8 + 8 + 10)


def test_tflite_path_and_bytes_agree(keras_tflite, float_graph):
    from_bytes = read_tflite(keras_tflite[1].read_bytes())
    assert from_bytes.tensors == float_graph.tensors
    assert [op.op for op in from_bytes.ops] == [op.op for op in float_graph.ops]
    assert from_bytes.metadata["signatures"][0]["key"] == "serving_default"


def test_tflite_flex_op_and_while_subgraphs(flex_while_tflite):
    g = read_tflite(flex_while_tflite)
    assert g.subgraph_count == 3
    loop = _only(g, "WHILE")
    assert loop.subgraph == 0
    cond, body = loop.options["cond_subgraph_index"], loop.options["body_subgraph_index"]
    assert {cond, body} == {1, 2}
    assert g.ops_in_subgraph(cond) and g.ops_in_subgraph(body)
    flex = _only(g, "CUSTOM")
    assert flex.custom_code.startswith("Flex") and flex.is_custom
    assert flex.custom_code == "FlexMatrixDeterminant"
    # Tensor indices are global: ops of subgraph k only touch subgraph k's tensor range.
    for op in g.ops:
        sub = g.metadata["subgraphs"][op.subgraph]
        lo, hi = sub["tensor_offset"], sub["tensor_offset"] + sub["tensor_count"]
        assert all(lo <= i < hi for i in (*op.inputs, *op.outputs) if i >= 0)


def test_tflite_buffer_stored_outside_the_flatbuffer(keras_tflite):
    """>2 GB models keep constant data after the flatbuffer (Buffer.offset / Buffer.size)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    data = keras_tflite[1].read_bytes()
    model = schema.ModelT.InitFromPackedBuf(data, 0)
    sub = model.subgraphs[0]
    fc = next(op for op in sub.operators if op.builtinOptionsType == 8)  # FullyConnected
    buffer = model.buffers[sub.tensors[fc.inputs[1]].buffer]
    payload = bytes(buffer.data)
    buffer.data, buffer.size = None, len(payload)

    def pack(offset: int) -> bytes:
        buffer.offset = offset
        builder = flatbuffers.Builder(0)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())

    head = pack(1 << 40)  # same length as the final file head: offset is a fixed uint64
    offset = (len(head) + 15) // 16 * 16
    blob = pack(offset).ljust(offset, b"\0") + payload

    g = read_tflite(blob)
    w = g.tensor(_only(g, "FULLY_CONNECTED").inputs[1])
    assert w.is_constant and w.size_bytes == len(payload) == 4 * 2880
    assert g.param_count() == keras_tflite[0]


_GARBAGE = np.random.default_rng(0).bytes(4096)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda good: b"", id="empty"),
        pytest.param(lambda good: b"TFL", id="tiny"),
        pytest.param(lambda good: _GARBAGE, id="random"),
        pytest.param(lambda good: _GARBAGE[:4] + b"TFL3" + _GARBAGE[8:], id="random-with-id"),
        pytest.param(lambda good: good[: len(good) // 2], id="truncated-half"),
        pytest.param(lambda good: good[:64], id="truncated-64"),
        pytest.param(lambda good: good[:4] + b"XXXX" + good[8:], id="wrong-identifier"),
    ],
)
def test_tflite_bad_bytes_raise_model_load_error(keras_tflite, tmp_path, make):
    blob = make(keras_tflite[1].read_bytes())
    with pytest.raises(ModelLoadError):
        read_tflite(blob)
    path = tmp_path / "bad.tflite"
    path.write_bytes(blob)
    with pytest.raises(ModelLoadError, match="bad.tflite"):
        read_tflite(path)


def test_tflite_fuzzed_bytes_never_escape(keras_tflite):
    """Corrupted models either parse or raise ModelLoadError: no raw IndexError & co."""
    good = keras_tflite[2]
    rng = np.random.default_rng(1)
    for _ in range(200):
        blob = bytearray(good)
        for pos in rng.integers(8, len(blob), size=8):
            blob[pos] = int(rng.integers(256))
        try:
            read_tflite(bytes(blob))
        except ModelLoadError:
            pass


def test_missing_files_raise_model_load_error(tmp_path):
    with pytest.raises(ModelLoadError, match="cannot read"):
        read_tflite(tmp_path / "nope.tflite")
    with pytest.raises(ModelLoadError, match="cannot read"):
        read_onnx(tmp_path / "nope.onnx")
    with pytest.raises(ModelLoadError):
        read_onnx(tmp_path)  # a directory


# --------------------------------------------------------------------------
# ONNX
# --------------------------------------------------------------------------


def test_onnx_cnn_ops_options_and_macs(onnx_cnn, tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(onnx_cnn, path)
    g = read_onnx(path)
    assert g.format == "onnx" and g.subgraph_count == 1
    assert g.op_histogram() == {"Conv": 2, "Clip": 1, "Flatten": 1, "Gemm": 1, "Relu": 1}
    conv1, conv2 = _ops(g, "Conv")
    assert conv1.options["strides"] == [2, 2] and conv1.options["pads"] == [1, 1, 1, 1]
    assert conv1.options["kernel_shape"] == [3, 3] and conv2.options["group"] == 8
    assert conv1.version == 17 and conv1.custom_code is None
    # Same arithmetic as the Keras net: the grouped conv is a depthwise conv.
    assert (conv1.macs, conv2.macs) == (CONV_MACS, DW_MACS)
    assert _only(g, "Gemm").macs == FC_MACS
    assert g.total_macs() == KERAS_MACS
    assert all(op.macs == 0 for op in g.ops if op.op in ("Relu", "Clip", "Flatten"))

    (inp,) = g.input_tensors()
    assert inp.name == "x" and inp.shape == (1, 3, 16, 16)
    assert inp.shape_signature == (-1, 3, 16, 16) and inp.is_dynamic
    assert g.tensor(conv1.outputs[0]).shape_signature == (-1, 8, 8, 8)  # shape inference
    w1 = g.tensor(conv1.inputs[1])
    assert w1.is_constant and w1.dtype == "float32" and w1.size_bytes == 8 * 27 * 4
    # Parameters: weights + biases + the two Clip bounds (float scalars).
    assert g.param_count() == (8 * 27 + 8) + (72 + 8) + (2880 + 10) + 2
    assert g.metadata["opset"] == {"ai.onnx": 17}


def test_onnx_matmul_batch_broadcast():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 1, 4, 5])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, [5])
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["ab"]),  # [2,1,4,5] @ [3,5,6] -> [2,3,4,6]
        helper.make_node("MatMul", ["ab", "c"], ["abc"]),  # [2,3,4,6] @ [6,7] -> [2,3,4,7]
        helper.make_node("MatMul", ["abc", "d"], ["vec"]),  # [2,3,4,7] @ [7] -> [2,3,4]
        helper.make_node("MatMul", ["v", "e"], ["row"]),  # [5] @ [5,3] -> [3]
    ]
    inits = [_init("b", (3, 5, 6)), _init("c", (6, 7)), _init("d", (7,)), _init("e", (5, 3))]
    outs = [
        helper.make_tensor_value_info("vec", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("row", TensorProto.FLOAT, None),
    ]
    g = read_onnx(_onnx_model(nodes, [a, v], outs, inits).SerializeToString())
    assert [op.macs for op in g.ops] == [6 * 4 * 6 * 5, 6 * 4 * 7 * 6, 6 * 4 * 7, 3 * 5]
    assert g.tensor(g.ops[0].outputs[0]).shape == (2, 3, 4, 6)


def test_onnx_gemm_transposes_and_conv_transpose():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [6, 4])  # transA -> M=4, K=6
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])
    nodes = [
        helper.make_node("Gemm", ["a", "w"], ["y"], transA=1, transB=1),  # w [3, 6] -> N=3
        helper.make_node("ConvTranspose", ["x", "k"], ["z"], strides=[2, 2], group=2),
    ]
    inits = [_init("w", (3, 6)), _init("k", (4, 3, 2, 2))]  # k: [Cin, Cout/group, kh, kw]
    outs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
    ]
    g = read_onnx(_onnx_model(nodes, [a, x], outs, inits).SerializeToString())
    gemm, convt = g.ops
    assert gemm.macs == 4 * 3 * 6
    assert gemm.options["transA"] == 1
    # every input element meets Cout/group * kh * kw weights
    assert convt.macs == (4 * 5 * 5) * (3 * 2 * 2)


def test_onnx_if_subgraphs_constants_and_qdq():
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 3, 4, 4])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 3, 4, 4])],
    )
    weights = np.arange(-12, 12, dtype=np.int8).reshape(4, 3, 1, 2)
    nodes = [
        helper.make_node("Constant", [], ["two"], value_float=2.0),
        helper.make_node("If", ["cond"], ["branch"], then_branch=then_g, else_branch=else_g),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"], axis=0),
        helper.make_node("Conv", ["branch", "wf"], ["y"], kernel_shape=[1, 2]),
    ]
    inits = [
        numpy_helper.from_array(weights, "wq"),
        numpy_helper.from_array(np.array([0.1, 0.2, 0.3, 0.4], np.float32), "ws"),
        numpy_helper.from_array(np.zeros(4, np.int8), "wz"),
    ]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 3])
    model = _onnx_model(nodes, [cond, x], [y], inits)
    onnx.checker.check_model(model)
    g = read_onnx(model.SerializeToString())

    assert g.subgraph_count == 3
    branch = _only(g, "If")
    bodies = {branch.options["then_branch"], branch.options["else_branch"]}
    assert bodies == {1, 2}
    mul = _only(g, "Mul")
    assert mul.subgraph == branch.options["then_branch"]
    assert g.tensor(mul.inputs[0]).name == "x"  # outer-scope name resolves to the main graph
    two = g.tensor(mul.inputs[1])
    assert two.is_constant and two.shape == () and two.size_bytes == 4  # Constant node

    wq = g.tensor(_only(g, "DequantizeLinear").inputs[0])
    assert wq.dtype == "int8" and wq.quantization.per_channel and wq.quantization.axis == 0
    assert wq.quantization.scale == pytest.approx((0.1, 0.2, 0.3, 0.4))
    # int8 weights + the Constant 2.0; the Q/DQ scale / zero point are not parameters.
    assert g.param_count() == 24 + 1
    assert _only(g, "Conv").macs == (4 * 4 * 3) * (3 * 1 * 2)


def test_onnx_external_data_is_sized_not_loaded(onnx_cnn, tmp_path):
    model = onnx.ModelProto()
    model.CopyFrom(onnx_cnn)
    path = tmp_path / "ext.onnx"
    onnx.save(model, path, save_as_external_data=True, location="ext.bin", size_threshold=0)
    (tmp_path / "ext.bin").unlink()  # proves nothing reads the data
    g = read_onnx(path)
    w3 = next(t for t in g.tensors if t.name == "w3")
    assert w3.is_constant and w3.size_bytes == 2880 * 4
    assert g.total_macs() == KERAS_MACS


@pytest.mark.parametrize(
    "blob",
    [
        pytest.param(b"", id="empty"),
        pytest.param(_GARBAGE, id="random"),
        pytest.param(b"\x08\x07", id="ir-version-only"),
        pytest.param(b"TFL3" * 8, id="not-onnx"),
    ],
)
def test_onnx_bad_bytes_raise_model_load_error(tmp_path, blob):
    path = tmp_path / "bad.onnx"
    path.write_bytes(blob)
    with pytest.raises(ModelLoadError, match="bad.onnx"):
        read_onnx(path)


def test_onnx_truncated_and_fuzzed(onnx_cnn):
    good = onnx_cnn.SerializeToString()
    with pytest.raises(ModelLoadError):
        read_onnx(good[: len(good) // 2])
    rng = np.random.default_rng(2)
    for cut in rng.integers(1, len(good), size=40):
        try:
            read_onnx(good[:cut])
        except ModelLoadError:
            pass
    for _ in range(100):
        blob = bytearray(good)
        for pos in rng.integers(0, len(blob), size=4):
            blob[pos] = int(rng.integers(256))
        try:
            read_onnx(bytes(blob))
        except ModelLoadError:
            pass
