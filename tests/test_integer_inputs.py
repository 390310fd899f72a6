"""Calibrating tools get integer inputs (token ids, bytes) in their own type.

magika's input is int32 bytes; the TFLite converter and ai-edge-quantizer both refused
float32 samples for it ("Got value of type FLOAT32 but expected type INT32").
"""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.runtime import sample_row


def test_sample_row_keeps_integers_and_makes_floats_float32():
    ids = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert sample_row(ids, 1).dtype == np.int32 and sample_row(ids, 1).tolist() == [[4, 5, 6, 7]]
    assert sample_row(ids.astype(np.float64), 2).dtype == np.float32


@pytest.mark.filterwarnings("ignore")
def test_both_int8_tools_calibrate_a_model_with_an_integer_input(tmp_path):
    keras = pytest.importorskip("keras")
    from edgeopt.calibration import tflite_aeq, tflite_converter
    from edgeopt.converters.tf_source import from_keras, run_converter

    inp = keras.Input((4,), dtype="int32", name="ids")
    x = keras.layers.Embedding(16, 8)(inp)
    x = keras.layers.Flatten()(x)
    model = keras.Model(inp, keras.layers.Dense(3)(x))
    source = from_keras(model, tmp_path)
    float_tflite = run_converter(source.converter(), "float")
    ids = np.random.default_rng(0).integers(0, 16, (16, 4)).astype(np.int32)
    for content in (tflite_converter.full_integer(source, {"ids": ids}, "float32"),
                    tflite_aeq.full_integer(float_tflite, {"ids": ids}, "float32")):
        assert content[4:8] == b"TFL3"


def test_the_teacher_feeds_an_integer_input_model_its_own_type(tmp_path):
    """Distillation's batches are float (the student's); an ONNX teacher with an int32
    input gets them back as int32, not an onnxruntime type error."""
    onnx = pytest.importorskip("onnx")
    keras = pytest.importorskip("keras")
    from onnx import TensorProto, helper, numpy_helper

    from edgeopt.compression.teacher import runtime_teacher

    w = np.random.default_rng(1).normal(0, 1, (4, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("MatMul", ["f", "w"], ["y"])], "ids",
        [helper.make_tensor_value_info("ids", TensorProto.INT32, [None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])],
        [numpy_helper.from_array(w, "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    path = tmp_path / "ids.onnx"
    onnx.save(proto, path)
    student = keras.Model(inp := keras.Input((4,)), keras.layers.Dense(3)(inp))
    ids = np.random.default_rng(2).integers(0, 256, (5, 4))
    out = runtime_teacher(path, student)(ids.astype(np.float32))
    np.testing.assert_allclose(out, ids.astype(np.float32) @ w, rtol=1e-5)
