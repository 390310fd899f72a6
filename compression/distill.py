"""Knowledge distillation: a student learns the teacher's softened outputs, labels optional.

The teacher is any callable from an input batch to output arrays (a Keras model, or a
function that runs a ``.tflite``/``.onnx`` in its own runtime); the student is a Keras model
with the same output shape. Outputs are read as logits (probabilities are turned back
into log-probabilities first).

>>> result = distill(teacher, pruned.model, unlabeled_images)   # doctest: +SKIP
>>> result.history[-1]["agreement"]                               # top-1 match on held-back data
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgeopt.compression.augment import AUGMENTS
from edgeopt.converters.onnx_frozen import onnxruntime_nodes
from edgeopt.data import HOLDOUT_SHARE
from edgeopt.errors import ConfigError, DataError

Teacher = Callable[[np.ndarray], Any]


@dataclass(frozen=True)
class DistillConfig:
    """Knobs of distillation, defaults visible. ``augment`` names entries of ``AUGMENTS``."""

    epochs: int = 20
    batch_size: int = 32
    temperature: float = 4.0
    learning_rate: float = 1e-3
    # (variable-name suffix, learning rate): variables trained at their own rate (QAT's
    # quantizer ranges, values of ~1-10 next to weights of ~0.01); the rest: learning_rate
    learning_rates: tuple[tuple[str, float], ...] = ()
    holdout: float = HOLDOUT_SHARE  # the share every command holds back
    patience: int = 3
    label_weight: float = 0.5
    augment: tuple[str, ...] = ("shift", "noise")
    seed: int = 0


@dataclass
class DistillResult:
    """The trained student (best held-back epoch) and one record per epoch."""

    student: Any
    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0


def as_logits(outputs: Any) -> np.ndarray:
    """Teacher/student outputs as one float array of logits."""
    out = np.asarray(outputs[0] if isinstance(outputs, list | tuple) else outputs, "float32")
    looks_like_probs = out.min() >= 0 and np.allclose(out.sum(axis=-1), 1.0, atol=1e-3)
    return np.log(np.clip(out, 1e-7, 1.0)) if looks_like_probs else out


def _check_config(config: DistillConfig) -> None:
    unknown = [name for name in config.augment if name not in AUGMENTS]
    if unknown:
        raise ConfigError(f"unknown augmentation '{unknown[0]}' (choose from "
                          f"{', '.join(AUGMENTS)})")
    if not 0 < config.holdout < 1:
        raise ConfigError(f"holdout must be between 0 and 1 (exclusive), got {config.holdout}")
    if config.epochs < 1 or config.batch_size < 1 or config.temperature <= 0:
        raise ConfigError("epochs and batch size must be at least 1, temperature above 0")


def _check(teacher: Teacher, student: Any, inputs: np.ndarray, labels: Any) -> None:
    expected = tuple(student.inputs[0].shape[1:])
    if tuple(inputs.shape[1:]) != expected:
        raise DataError(f"samples have shape {inputs.shape[1:]}, the student expects {expected}")
    if len(inputs) < 4:
        raise DataError("distillation needs at least 4 samples (some are held back)")
    t_shape = as_logits(teacher(inputs[:2])).shape
    s_shape = as_logits(student(inputs[:2], training=False)).shape
    if t_shape != s_shape:
        raise DataError(f"student outputs {s_shape[1:]} do not match the teacher's {t_shape[1:]}")
    if labels is not None:
        _check_labels(np.asarray(labels), len(inputs), t_shape[-1])


def _check_labels(labels: np.ndarray, count: int, classes: int) -> None:
    """Labels are one class index per sample, within the outputs' classes."""
    if len(labels) != count:
        raise DataError(f"{len(labels)} labels for {count} samples")
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise DataError("labels must be one integer class index per sample")
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise DataError(f"labels must be class indices in 0..{classes - 1}, got "
                        f"{int(labels.min())}..{int(labels.max())}")


def _split(count: int, config: DistillConfig) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(config.seed).permutation(count)
    held = max(1, int(round(count * config.holdout)))
    return order[held:], order[:held]


def _augment(batch: np.ndarray, config: DistillConfig, rng: np.random.Generator) -> np.ndarray:
    for name in config.augment:
        batch = AUGMENTS[name](batch, rng)
    return batch


def _loss(student_logits: Any, teacher_logits: np.ndarray, labels: Any,
          config: DistillConfig) -> Any:
    """T^2-scaled KL(teacher || student) on softened outputs, plus cross-entropy on labels."""
    import tensorflow as tf

    temp = config.temperature
    target = tf.nn.softmax(teacher_logits / temp)
    log_student = tf.nn.log_softmax(student_logits / temp)
    kl = tf.reduce_sum(target * (tf.math.log(target + 1e-8) - log_student), axis=-1)
    loss = tf.reduce_mean(kl) * temp * temp
    if labels is not None:
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, student_logits)
        loss = (1 - config.label_weight) * loss + config.label_weight * tf.reduce_mean(ce)
    return loss


def require_gradients(student: Any, probe: np.ndarray, what: str,
                      not_weights: tuple[str, ...] = ()) -> None:
    """A clear error when no gradient reaches any trainable weight from the output (an
    imported ONNX model whose nodes after its weights run in onnxruntime). Variables whose
    path ends in one of `not_weights` (QAT's quantizer ranges) do not count as weights."""
    import tensorflow as tf

    variables = [v for v in student.trainable_variables
                 if not (not_weights and v.path.endswith(not_weights))]
    if not variables:
        return
    with tf.GradientTape() as tape:
        out = student(np.asarray(probe, "float32"), training=False)
        out = out[0] if isinstance(out, list | tuple) else out
        loss = tf.reduce_sum(tf.square(tf.cast(out, tf.float32)))
    if any(g is not None for g in tape.gradient(loss, variables)):
        return
    nodes = onnxruntime_nodes(student)
    where = (f": {len(nodes)} ONNX node(s) after them run in onnxruntime, which gives no "
             f"gradient (first {nodes[0]})" if nodes else "")
    raise ConfigError(f"{what} cannot train this model: no gradient reaches its weights"
                      f"{where}")


def teacher_targets(teacher: Teacher, inputs: np.ndarray, config: DistillConfig) -> Any:
    """The teacher's logits on the training samples, computed once, when no augmentation
    changes the samples between epochs (None: the teacher runs on every augmented batch)."""
    return None if config.augment else as_logits(teacher(inputs))


def _groups(student: Any, config: DistillConfig) -> list[tuple[list, Any]]:
    """(variables, their Adam) per learning rate: one group per `learning_rates` suffix."""
    import keras

    rest, groups = list(student.trainable_variables), []
    for suffix, rate in config.learning_rates:
        chosen = [v for v in rest if v.path.endswith(suffix)]
        rest = [v for v in rest if not v.path.endswith(suffix)]
        if chosen:
            groups.append((chosen, keras.optimizers.Adam(rate)))
    return ([(rest, keras.optimizers.Adam(config.learning_rate))] if rest else []) + groups


def _train_step(student: Any, config: DistillConfig) -> Callable:
    """One gradient step, compiled once per run (tf.function): in eager mode the same step
    costs about five times the CPU, Python dispatching every op of the student."""
    import tensorflow as tf

    groups = _groups(student, config)

    @tf.function(reduce_retracing=True)
    def step(batch, target, labels):
        with tf.GradientTape() as tape:
            out = student(batch, training=True)
            out = out[0] if isinstance(out, list | tuple) else out
            loss = _loss(out, target, labels, config)
        grads = tape.gradient(loss, [v for variables, _ in groups for v in variables])
        # a non-finite element (a square root's slope at a variance the int8 grid rounded
        # to 0: magika's fake-quantized layer norm) would make Adam's state, and then every
        # weight it touches, NaN for good: such elements give no step instead
        grads = [g if g is None else tf.where(tf.math.is_finite(g), g, tf.zeros_like(g))
                 for g in grads]
        start = 0
        for variables, optimizer in groups:
            optimizer.apply_gradients(zip(grads[start:start + len(variables)], variables))
            start += len(variables)
        return loss

    return step


def _train_epoch(step: Callable, teacher: Teacher, data: tuple, config: DistillConfig,
                 rng: np.random.Generator, targets: np.ndarray | None = None) -> float:
    inputs, labels = data
    order, losses = rng.permutation(len(inputs)), []
    for start in range(0, len(order), config.batch_size):
        idx = order[start:start + config.batch_size]
        batch = _augment(inputs[idx], config, rng)
        target = targets[idx] if targets is not None else as_logits(teacher(batch))
        losses.append(float(step(batch, target, None if labels is None else labels[idx])))
    return float(np.mean(losses))


def agreement(teacher: Teacher, student: Any, inputs: np.ndarray) -> float:
    """Share of samples where student and teacher pick the same top-1 output."""
    t = as_logits(teacher(inputs)).argmax(axis=-1)
    s = as_logits(student(inputs, training=False)).argmax(axis=-1)
    return float((t == s).mean())


def _inference(student: Any) -> Callable:
    """``student(x, training=False)`` compiled once (tf.function), as the training step is:
    the held-back evaluation after every epoch ran eagerly, 3-4x the time (PP-OCRv4's
    recognizer: 30 s against 8 s for 80 lines)."""
    import tensorflow as tf

    call = tf.function(lambda x: student(x, training=False), reduce_retracing=True)
    return lambda x, training=False: call(tf.constant(x))


def _evaluate(teacher: Teacher | np.ndarray, student: Any, inputs: np.ndarray,
              config: DistillConfig, labels: np.ndarray | None = None) -> dict:
    """Held-back loss and top-1 agreement; ``teacher`` may be its logits computed once;
    ``student`` is the model or a compiled call of it (``_inference``).

    With labels the held-back loss is the training loss (distillation and cross-entropy
    mixed, as trained), and the labels' top-1 accuracy is recorded beside it."""
    target = teacher if isinstance(teacher, np.ndarray) else as_logits(teacher(inputs))
    out = as_logits(student(inputs, training=False))
    loss = _loss(out, target, labels, config)
    found = {"val_loss": float(loss),
             "agreement": float((out.argmax(axis=-1) == target.argmax(axis=-1)).mean())}
    if labels is not None:
        found["accuracy"] = float((out.argmax(axis=-1) == labels).mean())
    return found


class _EarlyStopping:
    """Remembers the best held-back loss and its weights; says when patience runs out."""

    def __init__(self, student: Any, loss: float, patience: int) -> None:
        self.student, self.best, self.patience = student, loss, patience
        self.weights, self.waited, self.best_epoch = student.get_weights(), 0, 0

    def should_stop(self, epoch: int, loss: float) -> bool:
        if loss < self.best:
            self.best, self.weights, self.waited = loss, self.student.get_weights(), 0
            self.best_epoch = epoch
            return False
        self.waited += 1
        return self.waited >= self.patience

    def restore(self) -> None:
        self.student.set_weights(self.weights)


def distill(teacher: Teacher, student: Any, inputs: np.ndarray, labels: Any = None,
            config: DistillConfig | None = None,
            progress: Callable[[dict], None] | None = None) -> DistillResult:
    """Train ``student`` to match ``teacher`` on ``inputs`` (labels optional).

    A ``holdout`` share of the samples is held back; training stops after ``patience``
    epochs without a better held-back loss and the best weights are restored.
    ``progress`` receives each epoch's record ``{epoch, loss, val_loss, agreement}`` (the
    CLI draws the bar; ``config.epochs`` is its length). ``teacher`` is any callable from a
    batch to outputs: a Keras model, or ``runtime_teacher(path, student)`` for a file.
    """

    config = config or DistillConfig()
    _check_config(config)
    inputs = np.asarray(inputs, dtype="float32")
    _check(teacher, student, inputs, labels)
    labels = None if labels is None else np.asarray(labels)
    train, held = _split(len(inputs), config)
    train_data = (inputs[train], None if labels is None else labels[train])
    rng = np.random.default_rng(config.seed)
    held_targets = as_logits(teacher(inputs[held]))  # the teacher runs once on held-back data
    held_labels = None if labels is None else labels[held]
    targets = teacher_targets(teacher, train_data[0], config)
    step = _train_step(student, config)

    compiled = _inference(student)

    def evaluate() -> dict:
        return _evaluate(held_targets, compiled, inputs[held], config, held_labels)

    history = [{"epoch": 0} | evaluate()]
    stopper = _EarlyStopping(student, history[0]["val_loss"], config.patience)
    for epoch in range(1, config.epochs + 1):
        loss = _train_epoch(step, teacher, train_data, config, rng, targets)
        history.append({"epoch": epoch, "loss": loss} | evaluate())
        if progress:
            progress(history[-1])
        if stopper.should_stop(epoch, history[-1]["val_loss"]):
            break
    stopper.restore()
    return DistillResult(student, history, stopper.best_epoch)
