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
