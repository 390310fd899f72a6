"""Issue 20 class 7: `--method auto` writes one model per range candidate, plus one.

Every candidate is a full model write and a runtime run (seconds each on a detector), so
the bias-correction comparison scores only the winning range set again without bias
correction, instead of doubling every candidate (the old code wrote 2 x 5 models).
"""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.calibration.estimators import ESTIMATORS

pytestmark = pytest.mark.slow


def biased_cnn():
    """Conv -> depthwise -> dense with distinct non-zero biases (the converter shares one
    zero constant between zero biases, which bias correction leaves alone)."""
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import keras

    keras.utils.set_random_seed(7)
    init = keras.initializers.RandomNormal(stddev=0.3)
    inputs = keras.Input((16, 16, 3), name="image")
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu", bias_initializer=init)(
        inputs)
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu", bias_initializer=init)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(4, bias_initializer=init)(x))


def test_auto_scores_each_range_set_once_and_the_winner_without_bias_correction():
    import tensorflow as tf

    from edgeopt.quantize import QuantConfig, quantize_tflite

    float_tflite = tf.lite.TFLiteConverter.from_keras_model(biased_cnn()).convert()
    name = tf.lite.Interpreter(model_content=float_tflite).get_signature_list()[
        "serving_default"]["inputs"][0]
    images = np.random.default_rng(7).random((24, 16, 16, 3), dtype=np.float32)
    result = quantize_tflite(float_tflite, {name: images[:16]},
                             QuantConfig(layer_report=False),
                             {name: images[16:]})
    scores = result.validation["candidates"]
    with_bc = [k for k in scores if not k.endswith("without bias correction")]
    without = [k for k in scores if k.endswith("without bias correction")]
    assert sorted(with_bc) == sorted(["auto", *ESTIMATORS])
    assert len(without) == 1 and without[0].split(" without")[0] in with_bc
    assert np.isfinite(result.validation["sqnr_db"])
