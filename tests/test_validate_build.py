"""End to end: a tiny 2-output detector whose class scores collapse in the int8 artifact.

The model's first output holds boxes (0..320) and class scores (0..0.5) on its last axis,
made by one op (a per-channel scale after one MatMul), so one int8 scale for that tensor
rounds every score to 0. (Had the two been joined by a Concat, the writer would keep the
Concat float: calibration/mixed_scales.py.) The pooled SQNR stays high; the per-output
figures name the collapsed channel group. A default build rescues it (a float tail of the
score path: calibration/rescue.py, tests/test_onnx_rescue.py); with --accept-collapsed the
int8 model ships and says so. The error for a collapse no rescue removes:
tests/test_validate.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

ANCHORS, CLASSES, FEATURES = 16, 3, 8


def _detector_onnx(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    per_anchor = np.array([320.0] * 4 + [0.5] * CLASSES)  # boxes in pixels, then scores
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("wd", rng.normal(size=(FEATURES, ANCHORS * (4 + CLASSES)))),
        ("wc", rng.normal(size=(FEATURES, 5))),
        ("kscale", np.tile(per_anchor, ANCHORS)))]
    inits += [numpy_helper.from_array(np.array([1, ANCHORS, 4 + CLASSES], np.int64),
                                      "shape_d")]
    node = helper.make_node
    nodes = [node("MatMul", ["x", "wd"], ["d0"]), node("Sigmoid", ["d0"], ["d1"]),
             node("Mul", ["d1", "kscale"], ["d2"]),
             node("Reshape", ["d2", "shape_d"], ["detections"]),
             node("MatMul", ["x", "wc"], ["c0"]), node("Softmax", ["c0"], ["probs"], axis=-1)]
    graph = helper.make_graph(
        nodes, "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, FEATURES])],
        [helper.make_tensor_value_info("detections", TensorProto.FLOAT,
                                       [1, ANCHORS, 4 + CLASSES]),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def detector(tmp_path):
    model = _detector_onnx(tmp_path / "det.onnx")
    data = tmp_path / "calib.npz"
    np.savez(data, x=np.random.default_rng(1).normal(size=(40, FEATURES)).astype(np.float32))
    return model, data


LAYOUT = ("--task", "detect", "--boxes", "detections:0:4", "--scores", "detections:4:7",
          "--box-format", "xyxy", "--score-threshold", "0.2")


@pytest.mark.slow
def test_collapsed_scores_are_rescued_by_a_float_tail_and_named(run_cli, tmp_path, detector):
    model, data = detector
    out = tmp_path / "dist"
    result = run_cli("build", model, "--format", "onnx", "--device", "host-cpu",
                     "--scheme", "w8a8", "--calib", data, "-o", out, *LAYOUT)
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    rescue = manifest["quantization"]["rescue"]
    assert rescue["precision"] == "float" and rescue["outputs"] == ["detections"]
    islands = {f["node"] for f in manifest["quantization"]["float_ops"]}
    assert set(rescue["nodes"]) <= islands
    v = manifest["validation"]
    assert not v["collapsed"] and v["task"]["value"] > 0
    assert all(group["collapsed"] is None for group in v["outputs"][0]["groups"])


@pytest.mark.slow
def test_accepted_collapse_is_in_the_manifest_report_and_summary(run_cli, tmp_path, detector):
    model, data = detector
    out = tmp_path / "dist"
    result = run_cli("build", model, "--format", "onnx", "--device", "host-cpu",
                     "--scheme", "w8a8", "--calib", data, "-o", out, *LAYOUT,
                     "--accept-collapsed")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    v = manifest["validation"]
    assert v["pooled_over"] == ["detections", "probs"] and v["samples"] == 8
    det, probs = v["outputs"]
    assert (det["kind"], probs["kind"]) == ("values", "classes")
    boxes, scores = det["groups"]
    assert (boxes["role"], scores["role"]) == ("boxes", "scores")
    assert boxes["collapsed"] is None and "every value is 0" in scores["collapsed"]
    assert v["sqnr_db"] > scores["sqnr_db"] + 20  # the pooled figure hides the collapse
    assert v["accepted_collapsed"] is True and v["collapsed"]
    assert v["task"]["metric"] == "detection_f1" and v["task"]["value"] == 0.0
    assert v["task"]["details"]["artifact_detections"] == 0
    assert manifest["accuracy"]["metric"] == "detection_f1"
    assert any("--accept-collapsed" in n for n in manifest["notes"])
    report = (out / "report.html").read_text()
    assert "channels 4:7" in report and "collapsed" in report and "8 evaluation samples" in report
    assert "output detections" in result.stdout and "COLLAPSED" in result.stdout
    assert "task detect" in result.stdout


@pytest.mark.slow
def test_quantize_names_the_collapse_on_held_out_samples(run_cli, tmp_path, detector):
    model, data = detector
    out = tmp_path / "q.onnx"
    result = run_cli("quantize", model, "--calib", data, "-o", out, *LAYOUT,
                     "--accept-collapsed", "--json")
    assert result.exit_code == 0, result.stderr
    v = json.loads(result.stdout)["validation"]
    assert v["samples"] == 8  # every fifth of 40: not the samples it calibrated on
    assert [o["name"] for o in v["outputs"]] == ["detections", "probs"]
    assert v["task"]["metric"] == "detection_f1" and v["accepted_collapsed"] is True
    assert "channels 4:7 (scores)" in " ".join(v["collapsed"])  # shipped int8, named
