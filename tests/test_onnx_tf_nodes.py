"""Kept-whole ONNX nodes as TensorFlow ops: onnxruntime's values, and a gradient through them."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
tf = pytest.importorskip("tensorflow")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edgeopt.converters.onnx_tf_nodes import node_function  # noqa: E402

F = TensorProto.FLOAT


def one_node(op: str, shapes: list[list[int]], out_shapes: list[list[int]] | None = None,
             consts: dict | None = None, const_order: list[str] | None = None,
             opset: int = 17, **attrs) -> bytes:
    """A one-node model: tensor inputs x0.. (float), then named constants, outputs y0.."""
    consts = consts or {}
    names = [f"x{i}" for i in range(len(shapes))]
    inputs = names + (const_order or list(consts))
    outs = [f"y{i}" for i in range(len(out_shapes or [None]))]
    node = helper.make_node(op, inputs, outs, **attrs)
    graph = helper.make_graph(
        [node], "t", [helper.make_tensor_value_info(n, F, s) for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info(o, F, None) for o in outs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def check(content: bytes, arrays: list[np.ndarray]) -> None:
    fn = node_function(content)
    assert fn is not None, "the node should be covered"
    session = ort.InferenceSession(content, providers=["CPUExecutionProvider"])
    want = session.run(None, {f"x{i}": a for i, a in enumerate(arrays)})
    xs = [tf.Variable(a) for a in arrays]
    with tf.GradientTape() as tape:
        got = fn(list(xs))
        loss = tf.add_n([tf.reduce_sum(g * g) for g in got])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5)
    assert tape.gradient(loss, xs[0]) is not None


RNG = np.random.default_rng(0)
X = RNG.standard_normal((1, 4, 6)).astype(np.float32)
POS = np.abs(X) + 0.5


@pytest.mark.parametrize("op", ["Sqrt", "Reciprocal", "Exp", "Tanh", "Erf", "Sigmoid", "Relu",
                                "Neg", "Abs", "Softplus", "HardSwish", "Log"])
def test_unary_ops_match_onnxruntime(op):
    data = POS if op in ("Sqrt", "Reciprocal", "Log") else X
    check(one_node(op, [[1, 4, 6]]), [data])


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"])
def test_binary_ops_with_a_broadcast_constant(op):
    const = (np.abs(RNG.standard_normal((6,))) + 0.5).astype(np.float32)
    check(one_node(op, [[1, 4, 6]], consts={"c": const}), [POS])


def test_two_tensor_inputs_broadcast():
    check(one_node("Sub", [[1, 4, 6], [1, 4, 1]]), [X, X[:, :, :1]])


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions_axes_as_input(op, keepdims):
    check(one_node(op, [[1, 4, 6]], consts={"axes": np.array([2], np.int64)},
                   opset=18, keepdims=keepdims), [X])


def test_reduction_axes_as_attribute_opset_11():
    check(one_node("ReduceSum", [[1, 4, 6]], opset=11, axes=[1], keepdims=1), [X])


def test_shape_ops():
    check(one_node("Reshape", [[1, 4, 6]], consts={"s": np.array([1, 0, 3, 2], np.int64)}),
          [X])
    check(one_node("Transpose", [[1, 4, 6]], perm=[0, 2, 1]), [X])
    check(one_node("Unsqueeze", [[1, 4, 6]], consts={"a": np.array([1], np.int64)}), [X])
    check(one_node("Squeeze", [[1, 4, 1]], consts={"a": np.array([2], np.int64)}),
          [X[:, :, :1]])
    check(one_node("Expand", [[1, 4, 1]], consts={"s": np.array([1, 4, 6], np.int64)}),
          [X[:, :, :1]])
    check(one_node("Slice", [[1, 4, 6]], consts={
        "s": np.array([1, -5], np.int64), "e": np.array([2**62, 6], np.int64),
        "a": np.array([1, 2], np.int64), "st": np.array([1, 2], np.int64)},
        const_order=["s", "e", "a", "st"]), [X])
    check(one_node("Concat", [[1, 4, 6], [1, 4, 6]], axis=2), [X, X * 2])
    check(one_node("Split", [[1, 4, 6]], out_shapes=[[1, 4, 2], [1, 4, 4]],
                   consts={"s": np.array([2, 4], np.int64)}, axis=2), [X])


def test_matmul_softmax_and_pooling():
    w = RNG.standard_normal((6, 3)).astype(np.float32)
    check(one_node("MatMul", [[1, 4, 6]], consts={"w": w}), [X])
    check(one_node("Softmax", [[1, 4, 6]], axis=-1), [X])
    image = RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)
    check(one_node("GlobalMaxPool", [[1, 3, 5, 5]]), [image])
    check(one_node("GlobalAveragePool", [[1, 3, 5, 5]]), [image])


def test_non_float_and_uncovered_nodes_stay_in_onnxruntime():
    names = ["x0"]
    node = helper.make_node("Equal", ["x0", "c"], ["y0"])
    graph = helper.make_graph([node], "t", [helper.make_tensor_value_info(n, F, [1, 4])
                                            for n in names],
                              [helper.make_tensor_value_info("y0", TensorProto.BOOL, None)],
                              [numpy_helper.from_array(np.ones(4, np.float32), "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert node_function(model.SerializeToString()) is None
    assert node_function(one_node("LpNormalization", [[1, 4, 6]])) is None
    # the old Softmax flattens from axis 1: not written here
    assert node_function(one_node("Softmax", [[1, 4, 6]], opset=11, axis=1)) is None
    # nodes shaped for one sample run on the whole batch: none may touch the batch axis
    assert node_function(one_node("Squeeze", [[1, 4, 6]],
                                  consts={"a": np.array([0], np.int64)})) is None
    assert node_function(one_node("ReduceSum", [[1, 4, 6]], opset=18, keepdims=0)) is None
    assert node_function(one_node("Transpose", [[1, 4, 6]], perm=[1, 0, 2])) is None
    assert node_function(one_node("Reshape", [[1, 4, 6]],
                                  consts={"s": np.array([4, 6], np.int64)})) is None


def test_a_node_shaped_for_one_sample_runs_on_a_batch():
    """Reshape and Expand carry the batch of 1 in their shapes; run on 3 samples they give
    what onnxruntime gives sample by sample."""
    batch = RNG.standard_normal((3, 4, 6)).astype(np.float32)
    for content, data in (
            (one_node("Reshape", [[1, 4, 6]], consts={"s": np.array([1, 3, -1], np.int64)}),
             batch),
            (one_node("Expand", [[1, 4, 1]], consts={"s": np.array([1, 4, 6], np.int64)}),
             batch[:, :, :1])):
        session = ort.InferenceSession(content, providers=["CPUExecutionProvider"])
        want = np.concatenate([session.run(None, {"x0": d[None]})[0] for d in data])
        np.testing.assert_allclose(node_function(content)([tf.constant(data)])[0].numpy(),
                                   want, rtol=1e-6)


@pytest.mark.parametrize("content", [
    one_node("Transpose", [[1, 4, 3, 2, 5]], perm=[2, 0, 3, 1, 4]),
    one_node("Squeeze", [[1, 4, 6]], consts={"a": np.array([0], np.int64)}),
    one_node("Squeeze", [[1, 4, 1]]),
    one_node("ReduceSum", [[1, 4, 6]], opset=18, keepdims=0),
    one_node("Reshape", [[1, 4, 6]], consts={"s": np.array([-1, 0], np.int64)}),
    one_node("Slice", [[3, 1, 4, 6]], consts={"s": np.array([1], np.int64),
                                              "e": np.array([2], np.int64),
                                              "a": np.array([0], np.int64)}),
    one_node("Gemm", [[6, 4]], consts={"w": RNG.standard_normal((6, 3)).astype(np.float32)},
             transA=1),
    one_node("Flatten", [[1, 4, 6]], axis=2),
], ids=["transpose", "squeeze0", "squeeze-all", "reduce-all", "reshape", "slice0", "gemmT",
        "flatten2"])
def test_a_node_that_moves_the_batch_axis_runs_per_sample(content):
    """What the batched function refuses (the node moves, merges or reduces the batch axis
    of 1) is written for one sample exactly as the node is shaped: onnxruntime's values,
    and a gradient."""
    assert node_function(content) is None
    fn = node_function(content, batched=False)
    assert fn is not None
    graph = onnx.load_from_string(content).graph
    shape = [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    data = RNG.standard_normal(shape).astype(np.float32)
    want = ort.InferenceSession(content, providers=["CPUExecutionProvider"]).run(
        None, {"x0": data})[0]
    x = tf.Variable(data)
    with tf.GradientTape() as tape:
        got = fn([x])[0]
        loss = tf.reduce_sum(got * got)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    assert tape.gradient(loss, x) is not None


def _matches_and_trains(proto, model, x: np.ndarray, atol: float) -> list:
    """The imported ``model`` gives onnxruntime's values sample by sample on the batch
    ``x``, and a gradient reaches every trainable variable: their gradients."""
    x = x.astype(np.float32)
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want = np.concatenate([session.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))])
    np.testing.assert_allclose(model(x).numpy(), want, rtol=1e-5, atol=atol)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    assert all(g is not None for g in grads)
    return grads


def _attention_block() -> onnx.ModelProto:
    """PP-OCRv4's attention as written: MatMul+Add to q, k, v at once, Reshape [1, T, 3, H,
    D], Transpose [2, 0, 3, 1, 4] (the batch axis to position 1), Slice/Squeeze axis 0,
    softmax(q k^T) v, and a MatMul+Add out; the input is [1, T, C]."""
    t, c, h = 6, 8, 2
    d = c // h
    w = {"wqkv": RNG.standard_normal((c, 3 * c)).astype(np.float32) / 3,
         "bqkv": RNG.standard_normal(3 * c).astype(np.float32) / 10,
         "wo": RNG.standard_normal((c, c)).astype(np.float32) / 3,
         "bo": RNG.standard_normal(c).astype(np.float32) / 10,
         "shape": np.array([0, -1, 3, h, d], np.int64),
         "back": np.array([0, -1, c], np.int64)}
    nodes = [helper.make_node("MatMul", ["x", "wqkv"], ["qkv0"]),
             helper.make_node("Add", ["qkv0", "bqkv"], ["qkv"]),
             helper.make_node("Reshape", ["qkv", "shape"], ["r"]),
             helper.make_node("Transpose", ["r"], ["p"], perm=[2, 0, 3, 1, 4], name="move")]
    for i, name in enumerate("qkv"):
        w[f"s{i}"], w[f"e{i}"] = np.array([i], np.int64), np.array([i + 1], np.int64)
        w["a0"] = np.array([0], np.int64)
        nodes += [helper.make_node("Slice", ["p", f"s{i}", f"e{i}", "a0"], [f"{name}5"]),
                  helper.make_node("Squeeze", [f"{name}5", "a0"], [name])]
    nodes += [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["q", "kt"], ["att0"]),
              helper.make_node("Softmax", ["att0"], ["att"], axis=-1),
              helper.make_node("MatMul", ["att", "v"], ["o0"]),
              helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["o1", "back"], ["o2"]),
              helper.make_node("MatMul", ["o2", "wo"], ["o3"]),
              helper.make_node("Add", ["o3", "bo"], ["y"])]
    graph = helper.make_graph(
        nodes, "attention", [helper.make_tensor_value_info("x", F, [1, t, c])],
        [helper.make_tensor_value_info("y", F, [1, t, c])],
        [numpy_helper.from_array(v, k) for k, v in w.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    return onnx.shape_inference.infer_shapes(proto)


def test_an_attention_block_trains_through_the_import():
    """The batch axis moved inside an attention (PP-OCRv4's recognizer) used to leave its
    Transpose, Slices and Squeezes in onnxruntime: no gradient reached the q/k/v weights.
    Now they run per sample as TensorFlow ops: onnxruntime's values on a batch of 3, and a
    gradient to every weight."""
    from edgeopt.converters.onnx_frozen import onnxruntime_nodes
    from edgeopt.converters.onnx_keras import import_onnx

    proto = _attention_block()
    imported = import_onnx(proto)
    model = imported.model
    assert "move" in imported.frozen and onnxruntime_nodes(model) == []
    # the graph's nodes have no names: each MatMul's Add still becomes its Dense's bias
    # (it was matched by the empty name, and the bias was added twice)
    assert list(imported.kinds.values()).count("fused_bias") == 2
    grads = _matches_and_trains(proto, model, RNG.standard_normal((3, 6, 8)), atol=1e-5)
    assert len(grads) == 4  # qkv and out: kernel, bias


def test_a_layer_norm_written_in_onnx_ops_trains_through_the_import():
    """The class of magika's graph: Dense -> a layer norm as ReduceMean/Sub/Mul/Sqrt/
    Reciprocal -> MatMul on a constant. Before, those nodes ran in onnxruntime and the Dense
    had no gradient; now they are TensorFlow ops and the import matches onnxruntime."""
    from edgeopt.converters.onnx_keras import import_onnx

    w1 = RNG.standard_normal((8, 16)).astype(np.float32)
    w2 = RNG.standard_normal((16, 5)).astype(np.float32)
    axes = np.array([1], np.int64)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("ReduceMean", ["h", "axes"], ["mu"], keepdims=1),
        helper.make_node("Sub", ["h", "mu"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["d2"]),
        helper.make_node("ReduceMean", ["d2", "axes"], ["var"], keepdims=1),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Reciprocal", ["sd"], ["inv"]),
        helper.make_node("Mul", ["d", "inv"], ["n"]),
        helper.make_node("MatMul", ["n", "w2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "ln", [helper.make_tensor_value_info("x", F, [1, 8])],
        [helper.make_tensor_value_info("y", F, [1, 5])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
         numpy_helper.from_array(axes, "axes"),
         numpy_helper.from_array(np.array(1e-5, np.float32), "eps")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    proto.ir_version = 8
    proto = onnx.shape_inference.infer_shapes(proto)
    imported = import_onnx(proto)
    model = imported.model
    assert "Sqrt" in {n.op_type for n in proto.graph.node if n.name in imported.frozen}
    assert _matches_and_trains(proto, model, RNG.standard_normal((3, 8)), atol=1e-6)


def test_no_gradient_through_an_onnxruntime_node_is_a_clear_error():
    """A node left to onnxruntime after the only weights: training says so, by name."""
    from edgeopt.compression.distill import require_gradients
    from edgeopt.converters.onnx_keras import import_onnx
    from edgeopt.errors import ConfigError

    w = RNG.standard_normal((8, 5)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("LpNormalization", ["h"], ["y"], axis=-1, p=2, name="lp")],
        "lp", [helper.make_tensor_value_info("x", F, [1, 8])],
        [helper.make_tensor_value_info("y", F, [1, 5])], [numpy_helper.from_array(w, "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    model = import_onnx(onnx.shape_inference.infer_shapes(proto)).model
    assert model.trainable_variables
    with pytest.raises(ConfigError, match=r"--qat cannot train.*'lp' \(LpNormalization\)"):
        require_gradients(model, RNG.standard_normal((2, 8)).astype(np.float32), "--qat")


def test_the_trainable_import_keeps_a_sequence_matmul_a_dense(tmp_path):
    """onnxslim (which fixes the shapes first) fuses MatMul+Add on a [1, T, C] sequence into
    Reshape [T, C] -> Gemm -> Reshape [1, T, N]: rows that mix the batch with time, so the
    product stayed a constant in onnxruntime (PP-OCRv4: every attention and MLP weight).
    The trainable import skips that fusion: each product is a Dense, trained."""
    from edgeopt.compress import trainable_model
    from edgeopt.converters.onnx_frozen import onnxruntime_nodes
    from edgeopt.model import load_model

    path = tmp_path / "attention.onnx"
    onnx.save(_attention_block(), str(path))
    trainable = trainable_model(load_model(path), tmp_path)
    ops = {n.name: n.op_type for n in trainable.imported.proto.graph.node}
    assert "Gemm" not in ops.values()
    assert [ops[n] for n, k in trainable.imported.kinds.items() if k == "dense"] == \
        ["MatMul", "MatMul"]
    assert onnxruntime_nodes(trainable.model) == []
