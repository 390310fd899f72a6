"""Validation metrics against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgeopt.errors import ConfigError
from edgeopt.manifest import Validation as ManifestValidation
from edgeopt.task_metrics import ctc_greedy
from edgeopt.task_spec import TaskSpec
from edgeopt.typed_json import parse
from edgeopt.validate import CollapsedOutputError, check_collapsed, compare, sqnr_db


def test_sqnr_of_known_noise():
    ref = np.ones(1000, np.float32)
    assert math.isclose(sqnr_db(ref, ref + 0.1), 20.0, rel_tol=1e-4)  # 10*log10(1/0.01)
    assert sqnr_db(ref, ref) == float("inf")


def test_classifier_with_labels():
    ref = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]], np.float32)
    cand = np.array([[0.8, 0.2], [0.6, 0.4], [0.7, 0.3], [0.1, 0.9]], np.float32)
    record = compare([ref], [cand], np.array([0, 1, 1, 1]))
    assert record.metric == "top1_accuracy"
    assert record.reference == 0.75 and record.value == 0.5 and record.delta == -0.25
    assert record.top1_agreement == 0.75


def test_classifier_without_labels_and_regression():
    ref = np.eye(3, dtype=np.float32)
    record = compare([ref], [ref], None)
    assert record.metric == "top1_agreement" and record.value == 1.0 and record.delta == 0.0
    feature = np.random.default_rng(0).random((4, 3, 8, 8)).astype(np.float32)
    record = compare([feature], [feature * 1.01], None)
    assert record.metric == "sqnr_db" and math.isclose(record.value, 40.0, rel_tol=1e-3)
    assert record.accuracy_json()["reference"] is None


def test_ties_in_the_float_output_are_not_counted_as_agreement():
    constant = np.full((4, 10), 0.1, np.float32)
    zeros = np.zeros((4, 10), np.float32)
    record = compare([constant], [zeros], None)
    assert record.top1_agreement is None and record.metric == "sqnr_db"
    mixed = np.array([[0.5, 0.5], [0.9, 0.1]], np.float32)
    assert compare([mixed], [np.array([[0.1, 0.9], [0.8, 0.2]])], None).top1_agreement == 1.0


# --- per-output figures, channel groups, collapse (issue 20, class 8) -------------------

def _detector(rng, n=4, anchors=300, classes=6):
    """A YOLOv8-style [N, 4 + classes, anchors] output: boxes 0..320, scores 0..1."""
    boxes = np.stack([rng.uniform(20, 300, (n, anchors)), rng.uniform(20, 300, (n, anchors)),
                      rng.uniform(5, 60, (n, anchors)), rng.uniform(5, 60, (n, anchors))], 1)
    scores = rng.uniform(0, 1, (n, classes, anchors)) ** 6
    return np.concatenate([boxes, scores], 1).astype(np.float32)


def test_collapsed_scores_hide_behind_a_good_pooled_sqnr_but_not_per_group():
    rng = np.random.default_rng(0)
    ref = _detector(rng)
    cand = ref.copy()
    cand[:, :4] += rng.normal(0, 0.5, cand[:, :4].shape)
    cand[:, 4:] = 0.0  # every class score collapsed: zero detections
    record = compare([ref], [cand], None, ["output0"])
    assert record.sqnr_db > 30  # the pooled figure looks fine ...
    groups = record.outputs[0].groups
    assert [(g.axis, g.start, g.end) for g in groups] == [(1, 0, 4), (1, 4, 10)]
    assert groups[0].sqnr_db > 30 and groups[0].collapsed is None
    assert groups[1].sqnr_db == 0.0 and "every value is 0" in groups[1].collapsed
    assert record.metric == "min_output_sqnr_db" and record.value == 0.0
    assert not record.pooled_is_honest
    with pytest.raises(CollapsedOutputError, match="output 'output0' channels 4:10"):
        check_collapsed(record)
    check_collapsed(record, accept=True)  # the user accepted it


def _landmarks(rng, n=4, points=21):
    """A MediaPipe-style [N, 3 * points] landmark output: x, y, z per point, +-200, and
    the wrist's z (channel 2) float32 round-off of a subtraction (~1e-6): zero by design."""
    out = rng.uniform(-200, 200, (n, points * 3))
    out[:, 2] = rng.uniform(-4.7e-6, -3.7e-6, n)
    return out.astype(np.float32)


def test_round_off_next_to_large_values_is_not_judged_and_not_a_collapse():
    rng = np.random.default_rng(3)
    ref = _landmarks(rng)
    cand = ref + rng.normal(0, 0.5, ref.shape).astype(np.float32)
    cand[:, 2] = 0.0  # what any int8 grid holding +-200 makes of the round-off
    presence = rng.uniform(0, 1, (len(ref), 1)).astype(np.float32)  # the model's 2nd output
    record = compare([ref, presence], [cand, presence], None, ["Identity", "Identity_1"])
    out = record.outputs[0]
    zero = [g for g in out.groups if (g.start, g.end) == (2, 3)]
    assert zero and zero[0].collapsed is None and "float32 round-off" in zero[0].unjudged
    assert not record.collapsed and record.unjudged == [
        f"output 'Identity' channels 2:3: {zero[0].unjudged}"]
    assert out.worst_sqnr_db > 30  # the unjudged group's -inf-ish SQNR is not the worst
    check_collapsed(record)
    assert parse(ManifestValidation, {**record.to_json(), "runtime": "test"})


def test_small_scores_beside_boxes_are_far_above_round_off_and_still_collapse():
    # issue 20 item 8: boxes 0..320 and scores 0..1 in one output; scores all 0 in int8.
    # Even scores that never pass 0.01 (3e-5 of the boxes) are values the model computed.
    rng = np.random.default_rng(4)
    for peak in (1.0, 0.01):
        ref = _detector(rng)
        ref[:, 4:] *= peak
        cand = ref.copy()
        cand[:, 4:] = 0.0
        record = compare([ref], [cand], None, ["output0"])
        scores = record.outputs[0].groups[1]
        assert scores.unjudged is None and "every value is 0" in scores.collapsed
        assert not record.unjudged
        with pytest.raises(CollapsedOutputError, match="channels 4:10"):
            check_collapsed(record)


def test_detection_f1_against_the_float_detections():
    rng = np.random.default_rng(1)
    ref = _detector(rng)
    task = TaskSpec.from_flags("detect", boxes="output0:0:4", scores="output0:4:10")
    same = compare([ref], [ref + 1e-4], None, ["output0"], task)
    assert same.metric == "detection_f1" and same.value == 1.0
    assert same.task.details["float_detections"] > 0
    assert [g.role for g in same.outputs[0].groups] == ["boxes", "scores"]
    moved = ref.copy()
    moved[:, 0] += 1000  # every box moved off the image: it overlaps no float box
    assert compare([ref], [moved], None, ["output0"], task).value == 0.0
    silent = ref.copy()
    silent[:, 4:] = 0
    record = compare([ref], [silent], None, ["output0"], task)
    assert record.value == 0.0 and record.task.details["artifact_detections"] == 0


def test_detection_on_separate_box_and_score_outputs_in_xyxy():
    boxes = np.array([[[10, 10, 50, 50], [12, 12, 52, 52], [100, 100, 140, 150]]], np.float32)
    scores = np.array([[[0.9, 0.0], [0.8, 0.0], [0.0, 0.7]]], np.float32)
    task = TaskSpec.from_flags("detect", boxes="boxes", scores="scores", box_format="xyxy")
    half = scores.copy()
    half[0, 2, 1] = 0.1  # the second object drops below the threshold
    record = compare([boxes, scores], [boxes, half], None, ["boxes", "scores"], task)
    # NMS keeps 2 float detections (boxes 0 and 1 overlap), the artifact 1: F1 = 2*1/3
    assert record.task.details["float_detections"] == 2
    assert math.isclose(record.value, 2 / 3)


def test_landmarks_next_to_a_softmax_get_relative_error_not_top1():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(8, 3))
    probs = (np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float32)
    landmarks = rng.uniform(0, 1, (8, 10)).astype(np.float32)
    box = rng.uniform(0, 1, (8, 4)).astype(np.float32)
    cand = [probs, landmarks + 0.01, box]
    record = compare([probs, landmarks, box], cand, None, ["prob", "landmarks", "box"])
    kinds = {o.name: o.kind for o in record.outputs}
    assert kinds == {"prob": "classes", "landmarks": "values", "box": "values"}
    marks = record.outputs[1]
    assert marks.top1_agreement is None
    assert math.isclose(marks.relative_error, 0.01 / np.mean(landmarks), rel_tol=1e-5)
    assert record.metric == "top1_agreement" and record.value == 1.0
    assert record.pooled_over == ("prob", "landmarks", "box")


def test_a_ctc_recognizer_with_high_step_agreement_can_change_its_strings():
    steps = np.zeros((3, 6, 4), np.float32)
    text = [[1, 1, 0, 2, 0, 3], [2, 0, 2, 0, 0, 0], [3, 3, 3, 0, 1, 1]]
    for i, row in enumerate(text):
        steps[i, np.arange(6), row] = 1.0
    cand = steps.copy()
    cand[1, 1] = [0.0, 0.0, 1.0, 0.0]  # "2 _ 2" -> "2 2": one step, one string changed
    record = compare([steps], [cand], None, ["ctc"])
    out = record.outputs[0]
    assert out.kind == "sequence" and out.blank_index == 0
    assert math.isclose(out.step_agreement, 17 / 18) and math.isclose(out.string_match, 2 / 3)
    task = compare([steps], [cand], None, ["ctc"], TaskSpec.from_flags("sequence"))
    assert task.metric == "string_match" and math.isclose(task.value, 2 / 3)
    assert task.task.details["blank_index"] == 0


def test_ctc_greedy_decoding_and_a_configurable_blank():
    one_hot = np.eye(4, dtype=np.float32)[[0, 2, 2, 0, 2, 3, 3]][None]
    assert ctc_greedy(one_hot, blank=0) == [(2, 2, 3)]
    assert ctc_greedy(one_hot, blank=3) == [(0, 2, 0, 2)]


def test_regress_task_and_a_constant_output():
    rng = np.random.default_rng(3)
    ref = rng.uniform(1, 2, (5, 10)).astype(np.float32)
    record = compare([ref], [ref * 1.02], None, ["points"], TaskSpec.from_flags("regress"))
    assert record.metric == "relative_error" and math.isclose(record.value, 0.02, rel_tol=1e-4)
    assert record.outputs[0].kind == "values" and record.outputs[0].top1_agreement is None
    regress = TaskSpec.from_flags("regress")
    flat = compare([ref], [np.full_like(ref, 1.5)], None, ["points"], regress)
    assert "every value is 1.5" in flat.collapsed[0]
    noisy = compare([ref], [ref + rng.normal(0, 2, ref.shape)], None, ["points"], regress)
    assert "collapse floor" in noisy.collapsed[0]


def test_single_scale_outputs_keep_the_pooled_figure_and_get_no_groups():
    rng = np.random.default_rng(4)
    feature = rng.normal(size=(4, 16, 8, 8)).astype(np.float32)
    record = compare([feature], [feature * 1.01], None, ["map"])
    assert record.outputs[0].groups == () and record.pooled_is_honest
    assert record.metric == "sqnr_db" and record.collapsed == []


def test_task_flags_are_checked():
    with pytest.raises(ConfigError, match="--boxes"):
        TaskSpec.from_flags("detect")
    with pytest.raises(ConfigError, match="--task detect"):
        TaskSpec.from_flags(None, boxes="output0:0:4")
    with pytest.raises(ConfigError, match="START < END"):
        TaskSpec.from_flags("detect", boxes="output0:4:0", scores="output0")
    spec = TaskSpec.from_flags("detect", boxes="a:b:0:4", scores="a:b")
    assert (spec.boxes.output, spec.boxes.start, spec.scores.output) == ("a:b", 0, "a:b")
    with pytest.raises(ConfigError, match="no output 'nope'"):
        TaskSpec.from_flags("classify", output="nope").check_outputs(["probs"])


def test_validation_record_fits_the_manifest_model():
    rng = np.random.default_rng(5)
    ref = _detector(rng)
    task = TaskSpec.from_flags("detect", boxes="output0:0:4", scores="output0:4:10")
    record = compare([ref], [ref * 1.001], None, ["output0"], task).to_json()
    parse(ManifestValidation, {**record, "runtime": "test"}, "validation")
    assert record["outputs"][0]["groups"][1]["role"] == "scores"


def test_a_softmax_that_loses_sqnr_but_keeps_classes_is_not_collapsed():
    rng = np.random.default_rng(6)
    logits = rng.normal(size=(20, 5)) * 3
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    flatter = np.exp(logits / 20) / np.exp(logits / 20).sum(1, keepdims=True)
    record = compare([probs], [flatter], None, ["probs"])
    assert record.outputs[0].sqnr_db < 3 and record.collapsed == []
    one = np.tile(np.eye(5)[2], (20, 1))
    assert "every sample gets class 2" in compare([probs], [one], None, ["probs"]).collapsed[0]


def test_ctc_output_decoding_to_nothing_is_collapsed():
    steps = np.eye(4, dtype=np.float32)[[[1, 0, 2], [3, 3, 0]]]
    blank = np.eye(4, dtype=np.float32)[[[0, 0, 0], [0, 0, 0]]] * 0.9 + 0.025
    record = compare([steps], [blank], None, ["ctc"])
    assert "every decoded string is empty" in record.collapsed[0]


def test_one_class_on_a_few_samples_is_not_called_a_collapse():
    probs = np.array([[0.6, 0.4], [0.4, 0.6], [0.7, 0.3], [0.45, 0.55]], np.float32)
    artifact = np.array([[0.6, 0.4], [0.51, 0.49], [0.7, 0.3], [0.52, 0.48]], np.float32)
    assert compare([probs], [artifact], None, ["probs"]).collapsed == []
