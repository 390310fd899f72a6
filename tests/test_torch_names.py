"""Naming a converted .tflite's tensors after the ONNX tensors they compute (issue 17: the
report names layers by PyTorch module path). Real LiteRT on a tiny .tflite; the whole
.pt2 -> .tflite build is checked in test_torch_build.py."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.converters.tflite_names import match_names, rename_tensors
from edgeopt.tflite_reader import read_tflite


def test_values_match_whatever_the_layout():
    rng = np.random.default_rng(0)
    conv = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)       # NCHW
    relu = np.maximum(conv, 0)
    onnx_values = {"features.0": conv, "features.0.2": relu}
    tflite_values = [("CONV_2D", "model/conv", conv.transpose(0, 2, 3, 1) + 1e-7),
                     ("RELU", "model/relu", relu.transpose(0, 2, 3, 1))]
    assert match_names(onnx_values, tflite_values) == {"model/conv": "features.0",
                                                       "model/relu": "features.0.2"}


def test_a_fused_convolution_is_named_by_the_convolution():
    rng = np.random.default_rng(1)
    conv = rng.standard_normal((1, 8)).astype(np.float32)
    relu = np.maximum(conv, 0)
    renamed = match_names({"fc": conv, "act": relu}, [("FULLY_CONNECTED", "model/fc", relu)],
                          {"act": "fc"})
    assert renamed == {"model/fc": "fc"}


def test_each_onnx_tensor_names_one_tflite_tensor_and_constants_none():
    value = np.arange(6, dtype=np.float32).reshape(1, 6)
    tflite_values = [("PRELU", "a", value), ("RESHAPE", "b", value.reshape(1, 2, 3)),
                     ("MUL", "c", np.zeros((1, 6), np.float32))]
    renamed = match_names({"x.0": value, "x.1": value.reshape(2, 3),
                           "z": np.zeros(6, np.float32)}, tflite_values)
    assert renamed == {"a": "x.0", "b": "x.1"}


def test_a_different_tensor_does_not_match():
    value = np.linspace(-1, 1, 12, dtype=np.float32)
    assert match_names({"x": value}, [("ADD", "t", value * 1.01)]) == {}


@pytest.mark.slow  # TensorFlow's import and converter
def test_rename_tensors_writes_the_names_into_the_flatbuffer():
    tf = pytest.importorskip("tensorflow")
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3)])
    tflite = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    graph = read_tflite(tflite)
    inner = graph.tensor(graph.ops[0].outputs[0]).name
    renamed = read_tflite(rename_tensors(tflite, {inner: "classifier.0"}))
    assert [renamed.tensor(i).name for i in renamed.ops[0].outputs] == ["classifier.0"]
