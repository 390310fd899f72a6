"""ONNX -> Keras layers -> (pruned) -> ONNX: outputs agree in onnxruntime and Keras."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_models import OnnxNet, flatten_onnx, residual_onnx

from edgeopt.converters.onnx_keras import UnsupportedNode, export_onnx, import_onnx


def _ort(content: bytes, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(content, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def _keras(model, x_nchw: np.ndarray) -> np.ndarray:
    return np.asarray(model([x_nchw.transpose(0, 2, 3, 1)], training=False))


@pytest.fixture(params=["residual", "flatten"])
def onnx_case(request, tmp_path):
    import onnx

    path = (residual_onnx if request.param == "residual" else flatten_onnx)(tmp_path / "m.onnx")
    proto = onnx.load(str(path))
    shape = [d.dim_value or 2 for d in proto.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    return path, proto, x


def test_import_reproduces_the_onnx_outputs(onnx_case):
    path, proto, x = onnx_case
    imported = import_onnx(proto)
    np.testing.assert_allclose(_keras(imported.model, x), _ort(path.read_bytes(), x),
                               rtol=1e-4, atol=1e-5)
    assert imported.input_perms == {"x": (0, 2, 3, 1)}


def test_export_without_changes_is_the_same_function(onnx_case):
    path, proto, x = onnx_case
    imported = import_onnx(proto)
    content = export_onnx(imported, imported.model)
    np.testing.assert_allclose(_ort(content, x), _ort(path.read_bytes(), x), rtol=1e-4,
                               atol=1e-5)


def test_pruned_model_comes_back_as_a_smaller_onnx(onnx_case):
    import onnx

    from edgeopt.compression import prune_structured

    path, proto, x = onnx_case
    imported = import_onnx(proto)
    pruned = prune_structured(imported.model, 0.4, "l1", config=None)
    content = export_onnx(imported, pruned.model)
    np.testing.assert_allclose(_ort(content, x), _keras(pruned.model, x), rtol=1e-4, atol=1e-5)
    assert len(content) < path.stat().st_size
    small = onnx.load_from_string(content)
    assert [n.name for n in small.graph.node] == [n.name for n in proto.graph.node]
    assert pruned.macs_after < 0.7 * pruned.macs_before


def test_a_node_with_no_keras_layer_is_kept_whole_and_named(tmp_path):
    """LpNormalization mixes channels: it is run as it is and the channels it reads kept
    (tests/test_prune_onnx_ops.py has one model per op class)."""
    import onnx

    net = OnnxNet()
    y = net.node("Relu", [net.conv("x", 3, 4)])
    y = net.node("LpNormalization", [y], axis=1)
    out = net.node("Gemm", [net.node("Flatten", [net.node("GlobalAveragePool", [y])]),
                            net.weight((4, 2))])
    path = net.save(tmp_path / "m.onnx", [1, 3, 8, 8], out, 2)
    imported = import_onnx(onnx.load(str(path)))
    assert imported.frozen["lpnormalization_3"].startswith("channels kept")
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype("float32")
    np.testing.assert_allclose(_keras(imported.model, x), _ort(path.read_bytes(), x),
                               rtol=1e-4, atol=1e-5)


def test_a_subgraph_node_is_refused_with_the_way_out(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    net = OnnxNet()
    y = net.node("Relu", [net.conv("x", 3, 4)])
    branch = helper.make_graph([helper.make_node("Identity", [y], ["b"])], "b", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    flag = net.node("Greater", [net.node("ReduceMax", [y], keepdims=0), net.scalar(0.0)])
    net.nodes.append(helper.make_node("If", [flag], ["chosen"], name="choose",
                                      then_branch=branch, else_branch=branch))
    out = net.node("Gemm", [net.node("Flatten", [net.node("GlobalAveragePool", ["chosen"])]),
                            net.weight((4, 2))])
    proto = onnx.load(str(net.save(tmp_path / "m.onnx", [1, 3, 8, 8], out, 2)))
    with pytest.raises(UnsupportedNode, match=r"'choose' \(If\).*subgraphs.*--input-value"):
        import_onnx(proto)
