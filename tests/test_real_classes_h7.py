"""Issue 20's control-flow and recurrent classes, each on a tiny model built here (slow:
they run onnx2tf, the TFLite converter, ai-edge-quantizer and LiteRT). The zoo models that
showed each class: silero-vad (an all-axis Slice before its LSTM; the LSTM's WHILE loop),
ddddocr's OCR (a WHILE loop, a SPLIT with an unused part), openWakeWord's hey_jarvis (an
IF whose branch tensors have no ranges)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.slow

INT64_MAX = 2**63 - 1


def _onnx_model(nodes, inputs, outputs, inits, path) -> None:
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _all_axis_slice(path, end: int, axes: tuple[int, ...]) -> None:
    """A Conv1d's [1, 8, 16] output sliced on channels 4.. over all three axes, the way
    onnxslim merges slices (silero-vad's STFT magnitude) and tf2onnx writes them, axes
    out of order and INT32_MAX ends (basic-pitch)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 1, 4)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([4 if a == 1 else 0 for a in axes], np.int64),
                                     "starts"),
             numpy_helper.from_array(np.array([end] * 3, np.int64), "ends"),
             numpy_helper.from_array(np.array(axes, np.int64), "axes"),
             numpy_helper.from_array(np.array([1, 1, 1], np.int64), "steps")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], strides=[4]),
             helper.make_node("Slice", ["c", "starts", "ends", "axes", "steps"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    _onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 64])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16])], inits, path)


@pytest.mark.parametrize("end, axes", [(INT64_MAX, (0, 1, 2)), (2**31 - 1, (0, 2, 1))])
def test_all_axis_slice_converts_to_the_same_op(tmp_path, run_cli, end, axes):
    """onnx2tf re-mapped a Slice over every axis of a channels-first tensor onto the wrong
    axis ((12, 8) for (4, 16)); reduced to the axis it cuts, it converts exactly."""
    model, out = tmp_path / "slice.onnx", tmp_path / "slice.tflite"
    _all_axis_slice(model, end, axes)
    result = run_cli("convert", model, "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    parity = json.loads(result.stdout)["parity"]
    assert parity["cosine"] > 0.99999 and parity["max_abs"] < 1e-4


def _lstm(path, steps: int = 4, features: int = 8, units: int = 16) -> None:
    """A batch-first sequence [1, T, F] through an ONNX LSTM (time-major inside) from a
    zero state, its last hidden state as the output: the shape PyTorch exports."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    w = rng.standard_normal((1, 4 * units, features)).astype(np.float32) * 0.3
    r = rng.standard_normal((1, 4 * units, units)).astype(np.float32) * 0.3
    b = rng.standard_normal((1, 8 * units)).astype(np.float32) * 0.1
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R"),
             numpy_helper.from_array(b, "B"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.zeros((1, 1, units), np.float32), "zeros")]
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             helper.make_node("LSTM", ["t", "W", "R", "B", "", "zeros", "zeros"],
                              ["y", "h", "c"], hidden_size=units),
             helper.make_node("Squeeze", ["h", "axis0"], ["last"])]
    _onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                      [1, steps, features])],
                [helper.make_tensor_value_info("last", TensorProto.FLOAT, [1, units])],
                inits, path)


def _litert_ops(path) -> list[str]:
    from ai_edge_litert.interpreter import Interpreter

    return [op["op_name"] for op in Interpreter(str(path))._get_ops_details()]


def test_onnx_lstm_builds_without_a_while_loop(tmp_path, run_cli):
    """onnx2tf writes an LSTM as a Keras RNN, which the TFLite converter made a WHILE loop
    whose tensors LiteRT cannot read after a run; with static shapes the RNN is unrolled
    and the build quantizes it like any other graph."""
    model, data, out = tmp_path / "lstm.onnx", tmp_path / "calib.npz", tmp_path / "out"
    _lstm(model)
    np.savez(data, x=np.random.default_rng(2).standard_normal((40, 4, 8)).astype(np.float32))
    result = run_cli("build", model, "--device", "pixel-npu", "--calib", data, "-o", out,
                     "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    artifact = out / manifest["model"]["file"]
    assert "WHILE" not in _litert_ops(artifact)
    (row,) = manifest["validation"]["outputs"]
    assert row["sqnr_db"] > 15, row


def _tflite_from(module, path) -> None:
    import tensorflow as tf

    concrete = module.__call__.get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], module)
    path.write_bytes(converter.convert())


def _if_model(path) -> None:
    """A detector score gates a second stage, as openWakeWord's hey_jarvis does: an IF
    whose then-branch runs two dense layers and whose else-branch passes the score on."""
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import tensorflow as tf

    rng = np.random.default_rng(3)
    w1, w2, w3 = (tf.constant(rng.standard_normal(s).astype(np.float32) * 0.4)
                  for s in ((16, 8), (8, 8), (8, 1)))

    class Gate(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 16], tf.float32, name="x")])
        def __call__(self, x):
            h = tf.nn.relu(tf.matmul(x, w1))
            score = tf.sigmoid(tf.reduce_mean(h, axis=1, keepdims=True))
            return tf.cond(tf.reshape(score > 0.5, []),
                           lambda: tf.sigmoid(tf.matmul(tf.nn.relu(tf.matmul(h, w2)), w3)),
                           lambda: score)

    _tflite_from(Gate(), path)


def _while_model(path) -> None:
    """A loop carrying a state through three steps of a dense cell (a WHILE whose counter
    output nothing reads), then a dense head."""
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import tensorflow as tf

    rng = np.random.default_rng(4)
    w, head = (tf.constant(rng.standard_normal(s).astype(np.float32) * 0.4)
               for s in ((8, 8), (8, 4)))

    class Loop(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 8], tf.float32, name="x")])
        def __call__(self, x):
            _, h = tf.while_loop(lambda i, h: i < 3,
                                 lambda i, h: (i + 1, tf.tanh(tf.matmul(h, w) + x)),
                                 (tf.constant(0), x))
            return tf.matmul(h, head)

    _tflite_from(Loop(), path)


def _build_listed(tmp_path, run_cli, make, op: str) -> dict:
    model, data, out = tmp_path / "m.tflite", tmp_path / "calib.npz", tmp_path / "out"
    make(model)
    assert op in _litert_ops(model)
    width = 16 if op == "IF" else 8
    np.savez(data, x=np.random.default_rng(5).standard_normal((40, width)).astype(np.float32))
    result = run_cli("build", model, "--device", "pixel-npu", "--calib", data, "-o", out,
                     "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    from edgeopt.runtime import TFLiteRunner

    runner = TFLiteRunner(out / manifest["model"]["file"], ["x"])
    sample = np.load(data)["x"][:3]
    assert np.isfinite(runner.run({"x": sample})[0]).all()
    return manifest


def test_tflite_if_branches_stay_float_and_are_listed(tmp_path, run_cli):
    """ai-edge-quantizer refused the IF model ('arg0 not found in tensor_name_to_qsv'):
    the branch tensors have no calibrated range. The branches and the IF stay float, each
    listed in quantization.float_ops with the reason; the main graph is int8."""
    manifest = _build_listed(tmp_path, run_cli, _if_model, "IF")
    ops = manifest["quantization"]["float_ops"]
    listed = {o["op"] for o in ops if "no readable tensor" in o["reason"]}
    assert "IF" in listed and "FULLY_CONNECTED" in listed, ops
    assert any("float_ops" in note for note in manifest["notes"]), manifest["notes"]


def test_tflite_while_loop_stays_float_and_is_listed(tmp_path, run_cli):
    """The WHILE loop's counter output has no buffer after a run ('Tensor data is null'):
    it needs no range; the loop body stays float and is listed."""
    manifest = _build_listed(tmp_path, run_cli, _while_model, "WHILE")
    ops = manifest["quantization"]["float_ops"]
    assert "WHILE" in {o["op"] for o in ops if "no readable tensor" in o["reason"]}, ops


def _div_no_nan_model(path) -> None:
    """basic-pitch's normalisation in small: (x - min) / max(x - min) through
    tf.math.divide_no_nan, which the converter writes as EQUAL, DIV, SELECT_V2."""
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import tensorflow as tf

    w = tf.constant(np.random.default_rng(6).standard_normal((8, 4)).astype(np.float32))

    class Normalise(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 8], tf.float32, name="x")])
        def __call__(self, x):
            shifted = x - tf.reduce_min(x, axis=1, keepdims=True)
            scaled = tf.math.divide_no_nan(shifted, tf.reduce_max(shifted, axis=1,
                                                                  keepdims=True))
            return tf.matmul(scaled, w)

    _tflite_from(Normalise(), path)


def test_guarded_division_stays_float(tmp_path, run_cli):
    """The int8 DIV of a div_no_nan was written and LiteRT then failed on an input whose
    divisor is 0 (a constant one: silence, for basic-pitch), though calibration never saw
    one. The graph's own zero guard says the divisor can be 0: the DIV stays float, listed,
    and the artifact runs that input."""
    from edgeopt.runtime import TFLiteRunner

    model, data, out = tmp_path / "norm.tflite", tmp_path / "calib.npz", tmp_path / "out"
    _div_no_nan_model(model)
    assert "EQUAL" in _litert_ops(model)
    np.savez(data, x=np.random.default_rng(7).random((40, 8), dtype=np.float32))
    result = run_cli("build", model, "--device", "pixel-npu", "--calib", data, "-o", out,
                     "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    ops = manifest["quantization"]["float_ops"]
    assert any(o["op"] == "DIV" and "div_no_nan" in o["reason"] for o in ops), ops
    runner = TFLiteRunner(out / manifest["model"]["file"], ["x"])
    flat = runner.run({"x": np.full((1, 8), 0.5, np.float32)})[0]
    assert np.isfinite(flat).all() and np.abs(flat).max() < 0.1


def _shape_guarded_if(path) -> None:
    """An exporter's guard: If (batch == 1) then a dense layer on the outer x, else the
    same layer through a reshape; the condition depends only on the input's shape."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(8)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([-1, 8], np.int64), "flat")]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    then = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "then", [], [y])
    other = helper.make_graph([helper.make_node("Reshape", ["x", "flat"], ["x2"]),
                               helper.make_node("MatMul", ["x2", "w"], ["y"])], "else", [], [y])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
             helper.make_node("Equal", ["batch", "one"], ["cond1"]),
             helper.make_node("Squeeze", ["cond1", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
             helper.make_node("Relu", ["y"], ["out"])]
    _onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 8])],
                [helper.make_tensor_value_info("out", TensorProto.FLOAT, [-1, 4])], inits, path)


def test_shape_decided_if_is_folded_before_onnx_quantization(tmp_path, run_cli):
    """onnxruntime's quantizer left an If and its branches in float (and its QDQ rewrite
    of the tensors a branch reads broke silero-vad's state); with the shapes fixed the
    condition is a constant: the If is folded, said in the manifest, and the dense layer
    is quantized."""
    import onnx

    model, data, out = tmp_path / "guard.onnx", tmp_path / "calib.npz", tmp_path / "out"
    _shape_guarded_if(model)
    np.savez(data, x=np.random.default_rng(9).standard_normal((40, 8)).astype(np.float32))
    result = run_cli("build", model, "--format", "onnx", "--device", "host-cpu", "--calib",
                     data, "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert "1 of 1 If node(s) folded" in manifest["conversion"]["note"]
    artifact = onnx.load(str(out / manifest["model"]["file"]))
    ops = {n.op_type for n in artifact.graph.node}
    assert "If" not in ops and "QuantizeLinear" in ops, ops
    assert not [o for o in manifest["quantization"]["float_ops"] if o["op"] == "If"]


def _split_model(path) -> None:
    """An LSTM cell's gate split with one gate unused, as onnx2tf's unrolled cell has."""
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import tensorflow as tf

    w = tf.constant(np.random.default_rng(10).standard_normal((8, 16)).astype(np.float32))

    class Gates(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 8], tf.float32, name="x")])
        def __call__(self, x):
            i, _, g, o = tf.split(tf.matmul(x, w), 4, axis=1)
            return tf.sigmoid(i) * tf.tanh(g) + tf.sigmoid(o)

    _tflite_from(Gates(), path)


def test_split_with_an_unread_part_stays_int8(tmp_path, run_cli):
    """The unread part had no buffer to measure, then stayed float32 beside int8 parts,
    and XNNPACK refused the SPLIT at load; every part now takes the input's int8."""
    model, data, out = tmp_path / "gates.tflite", tmp_path / "calib.npz", tmp_path / "out"
    _split_model(model)
    np.savez(data, x=np.random.default_rng(11).standard_normal((40, 8)).astype(np.float32))
    result = run_cli("build", model, "--device", "pixel-npu", "--calib", data, "-o", out,
                     "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert not manifest["quantization"]["float_ops"]
    (row,) = manifest["validation"]["outputs"]
    assert row["sqnr_db"] > 20, row
