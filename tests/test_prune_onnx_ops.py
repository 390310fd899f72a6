"""Pruning ONNX models through ops that have no prunable Keras layer (issue 20).

Each tiny model is built node by node (onnx.helper), imported, pruned, exported and run in
onnxruntime: the import reproduces the ONNX outputs, the exported .onnx reproduces the pruned
Keras model, and channels pass through (or are kept) where the op says they must.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx_models import OnnxNet

from edgeopt.compression import prune_structured
from edgeopt.converters.onnx_keras import UnsupportedNode, export_onnx, import_onnx

SHAPE = [1, 3, 8, 8]


def _ort_batch(content: bytes, x: np.ndarray) -> np.ndarray:
    """One sample at a time: the models are shaped for batch 1, as compress makes them."""
    import onnxruntime as ort

    session = ort.InferenceSession(content, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: x[i:i + 1]})[0] for i in range(len(x))])


def _head(net: OnnxNet, x: str, c: int, classes: int = 3) -> str:
    return net.node("Gemm", [net.node("Flatten", [net.node("GlobalAveragePool", [x])]),
                             net.weight((c, classes))])


def _roundtrip(net: OnnxNet, out: str, tmp_path, classes: int = 3):
    """(imported, pruned result) after checking import and export against onnxruntime."""
    import onnx

    path = net.save(tmp_path / "m.onnx", SHAPE, out, classes)
    imported = import_onnx(onnx.load(str(path)))
    x = np.random.default_rng(0).standard_normal((4, *SHAPE[1:])).astype("float32")
    nhwc = x.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(np.asarray(imported.model(nhwc)), _ort_batch(path.read_bytes(), x),
                               rtol=1e-4, atol=1e-5)
    result = prune_structured(imported.model, 0.4, "l1", sample_inputs=nhwc)
    content = export_onnx(imported, result.model)
    np.testing.assert_allclose(_ort_batch(content, x), np.asarray(result.model(nhwc)),
                               rtol=1e-4, atol=1e-4)
    assert result.macs_after < result.macs_before
    return imported, result


def _channels(result, node: str) -> tuple[int, int]:
    return result.per_layer[f"onnx_{node}"]


def test_a_channel_split_keeps_its_producer_whole_and_the_rest_prunes(tmp_path):
    """A YOLOv8 C2f block: Split along channels, one half through a conv, Concat."""
    net = OnnxNet()
    x = net.node("Relu", [net.conv("x", 3, 16)])
    net.nodes.append(helper.make_node("Split", [x, net.int64s([8, 8])], ["sa", "sb"],
                                      name="split", axis=1))
    c = net.node("Relu", [net.conv("sb", 8, 8)])
    y = net.node("Relu", [net.conv(net.node("Concat", ["sa", "sb", c], axis=1), 24, 16)])
    imported, result = _roundtrip(net, _head(net, y, 16), tmp_path)
    assert imported.frozen["split"].startswith("channels kept")
    assert _channels(result, "conv_1") == (16, 16)  # the split's producer is kept whole
    assert _channels(result, "conv_6")[1] < 16


def test_spatial_slice_and_elementwise_ops_pass_channels_through(tmp_path):
    """Slice on H, Pow/Sqrt/Exp: the conv before them prunes with the conv after them."""
    net = OnnxNet()
    x = net.node("Relu", [net.conv("x", 3, 16)])
    x = net.node("Slice", [x, net.int64s([1]), net.int64s([7]), net.int64s([2])])
    x = net.node("Sqrt", [net.node("Pow", [x, net.scalar(2.0)])])
    x = net.node("Exp", [net.node("Neg", [x])])
    y = net.node("Relu", [net.conv(x, 16, 12)])
    imported, result = _roundtrip(net, _head(net, y, 12), tmp_path)
    assert all(why.startswith("channels pass through") for why in imported.frozen.values())
    assert _channels(result, "conv_1")[1] < 16


def test_resize_upsampling_passes_channels_through(tmp_path):
    """An FPN's nearest x2 (repeat: UpSampling2D), a bilinear x2 at half-pixel centres
    (UpSampling2D bilinear) and a nearest x2 that rounds up (kept whole, channels pass)."""
    net = OnnxNet()
    x = net.node("Relu", [net.conv("x", 3, 12)])
    scales = net.weight((4,))
    net.inits[-1].CopyFrom(helper.make_tensor(scales, 1, [4], [1.0, 1.0, 2.0, 2.0]))
    up = net.node("Resize", [x, "", scales], mode="nearest",
                  coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    lin = net.node("Resize", [x, "", scales], mode="linear")
    odd = net.node("Resize", [x, "", scales], mode="nearest",
                   coordinate_transformation_mode="asymmetric", nearest_mode="round_prefer_ceil")
    y = net.node("Relu", [net.conv(net.node("Add", [net.node("Add", [up, lin]), odd]), 12, 8)])
    imported, result = _roundtrip(net, _head(net, y, 8), tmp_path)
    assert imported.kinds["resize_3"] == imported.kinds["resize_4"] == "resize"
    assert imported.frozen["resize_5"].startswith("channels pass through")
    assert _channels(result, "conv_1")[1] < 12


def test_transposes_and_sequence_reshapes(tmp_path):
    """H/W swapped (channels pass through); NCHW -> [N, C, H*W] -> [N, H*W, C] (a text
    recognizer's sequence, kept whole) then MatMul: the first conv still prunes."""
    net = OnnxNet()
    x = net.node("Relu", [net.conv("x", 3, 16)])
    x = net.node("Transpose", [x], perm=[0, 1, 3, 2])
    x = net.node("Relu", [net.conv(x, 16, 10)])
    seq = net.node("Transpose", [net.node("Reshape", [x, net.int64s([1, 10, -1])])],
                   perm=[0, 2, 1])
    y = net.node("MatMul", [seq, net.weight((10, 4))])
    out = net.node("Reshape", [y, net.int64s([1, -1])])
    imported, result = _roundtrip(net, out, tmp_path, classes=64 * 4)
    assert imported.frozen["transpose_3"].startswith("channels pass through")
    assert imported.frozen["reshape_6"].startswith("channels kept")
    assert _channels(result, "conv_1")[1] < 16
    assert _channels(result, "conv_4") == (10, 10)  # it feeds the sequence: kept


def test_grouped_convolution_is_kept_whole(tmp_path):
    net = OnnxNet()
    y = net.node("Relu", [net.conv(net.conv("x", 3, 8), 8, 8, group=2)])
    y = net.node("Relu", [net.conv(y, 8, 8)])
    imported, result = _roundtrip(net, _head(net, y, 8), tmp_path)
    assert "group=2" in imported.frozen["conv_2"]
    assert _channels(result, "conv_1") == (8, 8)


def test_a_constant_only_node_is_folded(tmp_path):
    """Cast of a constant (a shape computation's leftover): computed once at import."""
    net = OnnxNet()
    x = net.node("Relu", [net.conv("x", 3, 8)])
    offset = net.node("Cast", [net.int64s([2])], to=1)
    y = net.node("Relu", [net.conv(net.node("Add", [x, offset]), 8, 8)])
    imported, _ = _roundtrip(net, _head(net, y, 8), tmp_path)
    assert "cast_3" not in imported.frozen


def test_a_node_of_unknown_shape_is_refused_with_the_way_out(tmp_path):
    import onnx

    net = OnnxNet()
    x = net.node("Relu", [net.conv("x", 3, 4)])
    idx = net.node("NonZero", [x])  # its output's length depends on the data
    y = net.node("ReduceSum", [net.node("Cast", [idx], to=1)], keepdims=0)
    out = net.node("Reshape", [y, net.int64s([1, 1])])
    proto = onnx.load(str(net.save(tmp_path / "m.onnx", SHAPE, out, 1)))
    with pytest.raises(UnsupportedNode, match=r"'nonzero_3' \(NonZero\).*not known "
                                              r"statically.*--input-shape"):
        import_onnx(proto)


def test_a_state_input_says_what_to_do(tmp_path):
    import onnx
    from onnx import TensorProto

    graph = helper.make_graph(
        [helper.make_node("Relu", ["state"], ["y"], name="r")], "g",
        [helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 1, 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 128])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(proto)
    with pytest.raises(UnsupportedNode, match=r"'state' has shape \[2, 1, 128\].*recurrent "
                                              r"state.*edgeopt build"):
        import_onnx(proto)


def test_a_scalar_computed_from_the_data_is_kept_per_sample(tmp_path):
    """x / max(x) (magika's normalization): the max has no batch axis; each sample's value
    is kept, and the multiply that reads it keeps its channels."""
    net = OnnxNet()
    x = net.node("Relu", [net.conv("x", 3, 8)])
    scale = net.node("Reciprocal", [net.node("ReduceMax", [x], keepdims=0)])
    y = net.node("Relu", [net.conv(net.node("Mul", [x, scale]), 8, 8)])
    imported, result = _roundtrip(net, _head(net, y, 8), tmp_path)
    assert imported.frozen["mul_5"].startswith("channels kept")
    assert _channels(result, "conv_6")[1] < 8


def test_3d_tensors_keep_onnx_semantics(tmp_path):
    """A detector head's [N, C, L] tensors (Concat on axis 1, 1-D pooling, BatchNorm on
    axis 1): ONNX's channel axis is not Keras' last there, so these run as they are."""
    net = OnnxNet()
    x = net.node("Relu", [net.conv("x", 3, 8)])
    boxes = net.node("Reshape", [net.conv(x, 8, 4, 1), net.int64s([1, 4, -1])])
    scores = net.node("Reshape", [net.conv(x, 8, 6, 1), net.int64s([1, 6, -1])])
    y = net.node("Concat", [boxes, scores], axis=1)
    y = net.node("MaxPool", [net.bn(y, 10)], kernel_shape=[2], strides=[2])
    out = net.node("Reshape", [y, net.int64s([1, -1])])
    imported, result = _roundtrip(net, out, tmp_path, classes=10 * 32)
    kept = {name.rsplit("_", 1)[0] for name in imported.frozen}
    assert {"concat", "maxpool", "batchnormalization"} <= kept
    assert _channels(result, "conv_1")[1] < 8


def test_a_sequence_matmul_prunes_its_hidden_units(tmp_path):
    """[N, T, F] x W (a transformer's or magika's per-step dense layers): each MatMul on the
    last axis is a Dense, so the hidden width between two of them prunes."""
    net = OnnxNet()
    x = net.node("Relu", [net.conv("x", 3, 6)])
    seq = net.node("Transpose", [net.node("Reshape", [x, net.int64s([1, 6, -1])])],
                   perm=[0, 2, 1])
    hidden = net.node("Relu", [net.node("Add", [net.node("MatMul", [seq, net.weight((6, 16))]),
                                                net.weight((16,), 0.1)])])
    y = net.node("MatMul", [hidden, net.weight((16, 4))])
    out = net.node("Reshape", [y, net.int64s([1, -1])])
    imported, result = _roundtrip(net, out, tmp_path, classes=64 * 4)
    dense = [n for n, kind in imported.kinds.items() if kind == "dense"]
    assert len(dense) == 2
    assert _channels(result, dense[0])[1] < 16


def _sequence_first(tmp_path):
    """conv -> [T, 1, C] (a CTC recognizer's time-major output): no batch axis first."""
    import onnx
    from onnx import TensorProto

    net = OnnxNet()
    x = net.node("Relu", [net.conv(net.node("Relu", [net.conv("x", 3, 16)]), 16, 16)])
    x = net.node("Relu", [net.conv(x, 16, 6)])
    seq = net.node("Transpose", [net.node("Reshape", [x, net.int64s([1, 6, -1])])],
                   perm=[2, 0, 1])
    graph = helper.make_graph(
        net.nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info(seq, TensorProto.FLOAT, [64, 1, 6])], net.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "seq.onnx"
    onnx.save(model, str(path))
    data = tmp_path / "data.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((6, *SHAPE[1:])).astype("f4"))
    return path, data


@pytest.mark.slow
def test_compress_cli_on_a_sequence_first_output(run_cli, tmp_path):
    """The pruned .onnx of a model with kept-whole nodes is validated against the source
    (its [T, 1, C] output lined up with the teacher's); a .tflite output is refused with
    the way out, nothing written."""
    import json

    from conftest import assert_user_error

    path, data = _sequence_first(tmp_path)
    out = tmp_path / "small.onnx"
    result = run_cli("compress", path, "--prune", "0.3", "--data", data, "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["validation"]["samples"] == 6
    assert record["macs"]["after"] < record["macs"]["before"]
    x = np.load(data)["x"]
    assert _ort_batch(out.read_bytes(), x).shape == (6 * 64, 1, 6)
    bad = tmp_path / "small.tflite"
    assert_user_error(run_cli("compress", path, "--prune", "0.3", "--data", data, "-o", bad),
                      "write -o NAME.onnx")
    assert not bad.exists()
