"""Label-free distillation brings a pruned student back towards its teacher."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.errors import DataError

keras = pytest.importorskip("keras")
L = keras.layers


def teacher_model() -> keras.Model:
    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 1))
    x = L.Conv2D(16, 3, padding="same", activation="relu", name="c1")(inp)
    x = L.Conv2D(16, 3, padding="same", activation="relu", name="c2")(x)
    return keras.Model(inp, L.Dense(5, name="head")(L.Flatten()(x)))


def images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 8, 8, 1)).astype("float32")


def test_distilled_student_agrees_more_with_teacher():
    from edgeopt.compression import prune_structured
    from edgeopt.compression.distill import DistillConfig, agreement, distill

    teacher, train = teacher_model(), images(320, 0)
    student = prune_structured(teacher, 0.6, "l1", train[:16]).model
    held_out = images(200, 1)
    before = agreement(teacher, student, held_out)
    records = []
    config = DistillConfig(epochs=10, temperature=2.0, learning_rate=3e-3, augment=("noise",))
    result = distill(teacher, student, train, config=config, progress=records.append)
    assert agreement(teacher, result.student, held_out) > before + 0.05
    assert records and records[-1]["epoch"] == len(result.history) - 1
    assert 1 <= result.best_epoch <= config.epochs


def test_student_with_other_outputs_is_refused():
    from edgeopt.compression.distill import distill

    inp = keras.Input((8, 8, 1))
    student = keras.Model(inp, L.Dense(3)(L.Flatten()(inp)))
    with pytest.raises(DataError, match="do not match the teacher"):
        distill(teacher_model(), student, images(16, 0))


def test_samples_of_wrong_shape_are_refused():
    from edgeopt.compression.distill import distill

    model = teacher_model()
    with pytest.raises(DataError, match="the student expects"):
        distill(model, model, np.zeros((16, 4, 4, 1), "float32"))


def test_probabilities_are_read_as_log_probabilities():
    from edgeopt.compression.distill import as_logits

    probs = np.array([[0.2, 0.8], [0.5, 0.5]], "float32")
    assert np.allclose(as_logits(probs), np.log(probs))
    logits = np.array([[2.0, -1.0]], "float32")
    assert np.allclose(as_logits(logits), logits)


def test_augmentations_keep_shape():
    from edgeopt.compression.augment import AUGMENTS

    batch, rng = images(4, 0), np.random.default_rng(0)
    for augment in AUGMENTS.values():
        assert augment(batch, rng).shape == batch.shape


def test_early_stopping_restores_the_best_epoch():
    from edgeopt.compression.distill import DistillConfig, _evaluate, distill

    teacher, data = teacher_model(), images(64, 0)
    student = keras.models.clone_model(teacher)
    config = DistillConfig(epochs=10, patience=1, learning_rate=1.0, augment=())
    result = distill(teacher, student, data, config=config)
    assert len(result.history) < 11
    best = min(r["val_loss"] for r in result.history)
    assert result.history[result.best_epoch]["val_loss"] == best
    held = data[np.random.default_rng(0).permutation(64)[:13]]
    assert _evaluate(teacher, result.student, held, config)["val_loss"] == pytest.approx(best)


def test_runtime_teacher_runs_the_tflite_file(tmp_path):
    """A .tflite teacher in LiteRT gives the Keras model's outputs, and distillation uses it."""
    import tensorflow as tf

    from edgeopt.compression import prune_structured, runtime_teacher
    from edgeopt.compression.distill import DistillConfig, distill

    teacher, data = teacher_model(), images(40, 0)
    path = tmp_path / "teacher.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(teacher).convert())
    student = prune_structured(teacher, 0.5, "l1").model
    run = runtime_teacher(path, student, num_threads=1)
    assert np.allclose(run(data[:5]), np.asarray(teacher(data[:5])), atol=1e-4)
    config = DistillConfig(epochs=2, augment=())
    result = distill(run, student, data, config=config)
    assert len(result.history) == 3


def test_runtime_teacher_moves_nhwc_batches_to_an_nchw_onnx_model():
    """The bundled sample: the ONNX export (NCHW) teaches its own Keras model (NHWC)."""
    from conftest import SAMPLES
    from edgeopt.compression import runtime_teacher

    student = keras.models.load_model(SAMPLES / "digits_cnn.keras")
    batch = np.load(SAMPLES / "digits_calib.npz")["image"][:8]
    teacher = runtime_teacher(SAMPLES / "digits_cnn.onnx", student)
    assert np.allclose(teacher(batch), np.asarray(student(batch)), atol=1e-4)


def test_runtime_teacher_of_other_input_shape_is_refused():
    from conftest import SAMPLES
    from edgeopt.compression import runtime_teacher

    inp = keras.Input((16, 16, 1))
    student = keras.Model(inp, L.Dense(10)(L.Flatten()(inp)))
    with pytest.raises(DataError, match="cannot learn from the same samples"):
        runtime_teacher(SAMPLES / "digits_cnn.onnx", student)


@pytest.mark.parametrize("labels, message", [
    (np.full(16, 7), "class indices in 0..4"),
    (np.zeros(16, "float32"), "one integer class index"),
    (np.zeros(12, "int64"), "12 labels for 16 samples"),
])
def test_bad_labels_are_refused(labels, message):
    from edgeopt.compression.distill import distill

    model = teacher_model()
    with pytest.raises(DataError, match=message):
        distill(model, model, images(16, 0), labels)


@pytest.mark.parametrize("config, message", [
    ({"augment": ("rotate",)}, "unknown augmentation 'rotate'"),
    ({"holdout": 1.0}, "holdout must be between 0 and 1"),
])
def test_bad_distill_config_is_refused(config, message):
    from edgeopt.compression.distill import DistillConfig, distill
    from edgeopt.errors import ConfigError

    model = teacher_model()
    with pytest.raises(ConfigError, match=message):
        distill(model, model, images(16, 0), config=DistillConfig(**config))
