"""What QAT trains: separable convolutions split as the converter lowers them, BatchNorm
left unfolded frozen, the teacher run once, early stopping on the loss that is trained.

The split graph's converted .tflite runs in LiteRT to the original's outputs; the frozen
BN keeps its moving statistics through a training step; distillation counts its teacher's
calls; with labels the held-back loss is the mixed loss training minimises.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.calibration.qat import (
    SEPARABLE_SUFFIX,
    fold_batchnorm,
    freeze_batchnorm,
    merge_separable,
    qat_model,
    split_separable,
)
from edgeopt.compression.distill import DistillConfig, _evaluate, distill
from edgeopt.converters.tf_source import from_keras, run_converter
from edgeopt.runtime import TFLiteRunner, run_dataset
from edgeopt.tflite_reader import read_tflite

keras = pytest.importorskip("keras")


def _separable_model(rng):
    x = inp = keras.Input((10, 10, 3))
    x = keras.layers.SeparableConv2D(6, 3, padding="same", depth_multiplier=2, name="sep")(x)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.ReLU(name="relu")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    model = keras.Model(inp, keras.layers.Dense(4, name="fc")(x))
    sep = model.get_layer("sep")
    sep.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in sep.weights])
    bn = model.get_layer("bn")
    bn.set_weights([rng.uniform(0.5, 2, 6), rng.normal(0, 0.3, 6), rng.normal(0, 0.3, 6),
                    rng.uniform(0.5, 2, 6)])
    return model


def test_a_separable_conv_splits_as_the_converter_lowers_it_and_merges_back(tmp_path):
    rng = np.random.default_rng(0)
    model = _separable_model(rng)
    data = rng.normal(0, 1, (5, 10, 10, 3)).astype("float32")
    split = split_separable(model)
    names = {la.name: type(la).__name__ for la in split.layers}
    assert names["sep"] == "Conv2D" and names[f"sep{SEPARABLE_SUFFIX}"] == "DepthwiseConv2D"
    np.testing.assert_allclose(split(data), model(data), atol=1e-4)
    # the BN after it now folds into the 1x1 half: every weight layer is fake-quantized
    folded = fold_batchnorm(split)
    assert not [la for la in folded.layers if isinstance(la, keras.layers.BatchNormalization)]
    student = qat_model(folded, {})
    quantized = [la for la in student.layers[-1].layers if la.name.endswith("_qat")]
    assert {la.inner.name for la in quantized} == {"sep", f"sep{SEPARABLE_SUFFIX}", "fc"}
    # the converter runs the split graph with the same two ops as the original's
    contents = [run_converter(from_keras(m, tmp_path / str(i)).converter(), "float")
                for i, m in enumerate((model, folded))]
    ops = [read_tflite(c).op_histogram() for c in contents]
    assert ops[0] == ops[1] and ops[0]["DEPTHWISE_CONV_2D"] == 1
    content = contents[1]
    runner = TFLiteRunner(content)
    np.testing.assert_allclose(run_dataset(runner, {runner.input_names[0]: data})[0],
                               model(data), atol=1e-4)
    merged = merge_separable(model, split)
    assert isinstance(merged.get_layer("sep"), keras.layers.SeparableConv2D)
    np.testing.assert_allclose(merged(data), model(data), atol=1e-5)


def test_a_model_without_separable_conv_is_not_copied():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    assert split_separable(model) is model


def test_an_unfoldable_batchnorm_trains_frozen_on_its_moving_statistics():
    """A BN after an activation cannot fold; in QAT it must not switch to batch statistics
    (the converter's graph uses the moving ones) nor update them."""
    x = inp = keras.Input((6,))
    x = keras.layers.Dense(5, activation="relu", name="fc")(x)
    x = keras.layers.BatchNormalization(name="bn")(x)
    model = keras.Model(inp, keras.layers.Dense(3, name="out")(x))
    rng = np.random.default_rng(1)
    model.get_layer("bn").set_weights([np.ones(5), np.zeros(5), rng.normal(0, 1, 5),
                                       rng.uniform(1, 2, 5)])
    folded = fold_batchnorm(model)
    student = qat_model(folded, {})
    bn = next(la for la in student.layers[-1].layers
              if isinstance(la, keras.layers.BatchNormalization))
    before = [w.numpy().copy() for w in bn.non_trainable_weights]
    data = rng.normal(3, 2, (16, 6)).astype("float32")
    np.testing.assert_allclose(student(data, training=True), student(data, training=False),
                               atol=1e-6)
    for w, old in zip(bn.non_trainable_weights, before):
        np.testing.assert_array_equal(w.numpy(), old)
    assert freeze_batchnorm(student.layers[-1]) == 1


def _teacher():
    x = inp = keras.Input((6,))
    x = keras.layers.Dense(8, activation="relu")(x)
    model = keras.Model(inp, keras.layers.Dense(4)(x))
    model.set_weights([w * 2 for w in model.get_weights()])
    return model


class _Counting:
    def __init__(self, model):
        self.model, self.calls = model, 0

    def __call__(self, batch):
        self.calls += 1
        return np.asarray(self.model(batch, training=False))


def test_without_augmentation_the_teacher_runs_once_not_every_batch():
    teacher = _Counting(_teacher())
    data = np.random.default_rng(2).normal(0, 1, (96, 6)).astype("float32")
    student = keras.models.clone_model(teacher.model)
    config = DistillConfig(epochs=4, batch_size=8, patience=10, augment=())
    result = distill(teacher, student, data, config=config)
    assert len(result.history) == 5
    # the shape check, the held-back share, the training samples: 3 calls, not 4 x 10 batches
    assert teacher.calls == 3


def test_with_labels_early_stopping_watches_the_trained_loss():
    """Labels that disagree with the teacher: training moves away from it, so a held-back
    loss of distillation alone always picked epoch 0 (the student kept untrained)."""
    teacher = _teacher()
    data = np.random.default_rng(3).normal(0, 1, (160, 6)).astype("float32")
    labels = (np.asarray(teacher(data)).argmax(-1) + 1) % 4   # learnable, not the teacher's
    student = keras.models.clone_model(teacher)
    student.set_weights(teacher.get_weights())
    config = DistillConfig(epochs=6, batch_size=16, learning_rate=1e-2, patience=6,
                           augment=(), label_weight=0.9)
    result = distill(teacher, student, data, labels, config=config)
    assert result.best_epoch > 0
    first, best = result.history[0], result.history[result.best_epoch]
    assert best["accuracy"] > first["accuracy"]
    held = np.random.default_rng(config.seed).permutation(160)[:int(round(160 * config.holdout))]
    figures = _evaluate(teacher, result.student, data[held], config, labels[held])
    assert figures["val_loss"] == pytest.approx(best["val_loss"], rel=1e-5)


def test_variables_named_in_learning_rates_train_at_their_own_rate():
    """QAT's quantizer ranges take their own rate: here 0, so they stay as they started
    while the weights (the general rate) move."""
    from edgeopt.calibration.fakequant import qat_layers

    teacher = _teacher()
    x = inp = keras.Input((6,))
    x = keras.layers.Dense(8, activation="relu")(x)
    x = qat_layers().ActivationQuantizer(0.0, 4.0, name="hidden_act")(x)
    student = keras.Model(inp, keras.layers.Dense(4)(x))
    before = {v.path: v.numpy().copy() for v in student.trainable_variables}
    data = np.random.default_rng(4).normal(0, 1, (64, 6)).astype("float32")
    config = DistillConfig(epochs=1, batch_size=16, patience=5, augment=(), learning_rate=1e-2,
                           learning_rates=(("/low", 0.0), ("/high", 0.0)))
    result = distill(teacher, student, data, config=config)
    assert result.best_epoch == 1   # the trained weights are the ones compared
    after = {v.path: v.numpy() for v in student.trainable_variables}
    # the variables are the ends' moves from the start (in units of its width): none
    assert after["hidden_act/low"] == before["hidden_act/low"] == 0.0
    assert after["hidden_act/high"] == before["hidden_act/high"] == 0.0
    assert student.get_layer("hidden_act").range() == (0.0, 4.0)
    moved = [p for p in before if not np.array_equal(before[p], after[p])]
    assert moved and all(not p.startswith("hidden_act") for p in moved)


def test_a_softmax_written_in_other_ops_trains_as_log_probabilities():
    """A softmax the import keeps as Exp/ReduceSum/Div (magika's) is found by its values,
    and QAT trains its log-probabilities, as it does behind a Keras Softmax layer."""
    from edgeopt.calibration.qat import gives_probabilities, training_view

    inp = keras.Input((6,))
    logits = keras.layers.Dense(4)(inp)
    exp = keras.layers.Activation("exponential")(logits)
    probs = keras.layers.Lambda(lambda e: e / keras.ops.sum(e, axis=-1, keepdims=True))(exp)
    model = keras.Model(inp, probs)
    probe = np.random.default_rng(0).normal(0, 1, (8, 6)).astype("float32")
    assert gives_probabilities(model, probe)
    view = training_view(model, model, probe)
    assert view is not model
    np.testing.assert_allclose(np.exp(view(probe).numpy()), model(probe).numpy(), rtol=1e-5)
    plain = keras.Model(inp, logits)
    assert not gives_probabilities(plain, probe) and training_view(plain, plain, probe) is plain


def test_a_non_finite_gradient_element_gives_no_step_instead_of_nan_weights():
    """sqrt(relu(x)) has slope inf at 0, and 0 * inf is NaN below it (as in magika's
    fake-quantized layer norm): those elements are skipped, so the weights stay finite."""
    teacher = _teacher()
    x = inp = keras.Input((6,))
    x = keras.layers.Dense(8, activation="relu")(x)
    x = keras.layers.Lambda(lambda t: keras.ops.sqrt(t))(x)
    student = keras.Model(inp, keras.layers.Dense(4)(x))
    data = np.random.default_rng(5).normal(0, 1, (64, 6)).astype("float32")
    config = DistillConfig(epochs=2, batch_size=16, patience=5, augment=(), learning_rate=1e-2)
    result = distill(teacher, student, data, config=config)
    assert all(np.isfinite(v.numpy()).all() for v in student.trainable_variables)
    assert all(np.isfinite(h["val_loss"]) for h in result.history)
