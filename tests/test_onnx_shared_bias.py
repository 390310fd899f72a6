"""A bias initializer shared by two Convs (basic-pitch's ONNX, issue 20): the QDQ model
edgeopt writes must load in onnxruntime and give each Conv its own corrected bias."""

from __future__ import annotations

import numpy as np


def _shared_bias_onnx(path) -> None:
    """Conv -> Neg -> Transpose -> Transpose -> Conv, both Convs on bias 'b', the first
    Conv's output named 'b0': the name onnxruntime's quantizer gives its copy of 'b'."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (4, 4, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.2, 4).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b"], ["b0"], pads=[1, 1, 1, 1]),
             helper.make_node("Neg", ["b0"], ["n"]),
             helper.make_node("Transpose", ["n"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["t"], ["u"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["u", "w2", "b"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "shared_bias",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_shared_bias_quantizes_to_a_model_onnxruntime_loads(run_cli, tmp_path):
    import onnx
    import onnxruntime as ort

    model = tmp_path / "shared.onnx"
    _shared_bias_onnx(model)
    x = np.random.default_rng(1).random((24, 3, 8, 8), dtype=np.float32)
    np.savez(tmp_path / "calib.npz", x=x)
    out = tmp_path / "q.onnx"
    result = run_cli("quantize", model, "--scheme", "w8a8", "--calib", tmp_path / "calib.npz",
                     "-o", out)
    assert result.exit_code == 0, result.stderr
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x[:1]})[0]
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, {"x": x[:1]})[0]
    assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.99
    graph = onnx.load(str(out)).graph
    convs = [n for n in graph.node if n.op_type == "Conv"]
    assert len({c.input[2] for c in convs}) == 2  # one bias each


def test_own_biases_copies_a_shared_bias_under_a_free_name():
    import tempfile
    from pathlib import Path

    import onnx

    from edgeopt.calibration.onnx_writer import own_biases

    path = Path(tempfile.mkdtemp()) / "m.onnx"
    _shared_bias_onnx(path)
    model = onnx.load(str(path))
    own_biases(model)
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    names = [c.input[2] for c in convs]
    assert names[1] == "b" and names[0] not in {"b", "b0"}
    assert {"b", names[0]} <= {t.name for t in model.graph.initializer}
    onnx.checker.check_model(model)
