"""Validation metrics against hand-computed values."""

from __future__ import annotations

import math

import numpy as np

from edgeopt.validate import compare, sqnr_db


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
