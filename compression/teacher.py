"""The original model, in its own runtime, as the teacher of distillation.

The user's model may be a ``.tflite`` (LiteRT), an ``.onnx`` (onnxruntime), a ``.keras`` or
a SavedModel; the student is the Keras model edgeopt compressed, often in another layout
(onnx2tf turns NCHW into NHWC). The teacher takes batches in the student's layout and moves
them to its own, so distillation compares the same images.

    >>> teacher = runtime_teacher("model.onnx", student)   # doctest: +SKIP
    >>> distill(teacher, student, images)                    # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from edgeopt.converters.float_tflite import _perm_between
from edgeopt.errors import DataError
from edgeopt.model import load_model
from edgeopt.runtime import make_runner, run_dataset


def _batch_one(shape: tuple) -> tuple[int, ...]:
    return tuple(1 if i == 0 else (-1 if d is None else int(d)) for i, d in enumerate(shape))


def input_permutation(student_shape: tuple, teacher_shape: tuple) -> tuple[int, ...] | None:
    """Axes of a student-layout batch that give the teacher's layout (None: same layout)."""
    student, teacher = _batch_one(student_shape), _batch_one(teacher_shape)
    if len(student) != len(teacher):
        raise DataError(f"the teacher takes inputs of rank {len(teacher)}, the student of "
                        f"rank {len(student)}")
    # the teacher's shape may have dynamic (-1) dims: match it as the source, then invert
    perm = _perm_between(teacher, student)
    perm = None if perm is None else tuple(int(i) for i in np.argsort(perm))
    if perm is None and any(t > 0 and s > 0 and t != s for s, t in zip(student, teacher)):
        raise DataError(f"the teacher takes inputs of shape {teacher[1:]}, the student "
                        f"{student[1:]}: they cannot learn from the same samples")
    return perm


def runtime_teacher(model: str | os.PathLike, student: Any,
                    num_threads: int | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """A teacher that runs ``model`` (a file) with its own runtime on student-layout batches.

    Returns its first output as float32 (int8 models are dequantized by the runner). The
    student's batches are float; a teacher with an integer input (token ids, bytes) gets
    them rounded back to its own type.
    """
    handle = load_model(model)
    if len(handle.inputs) != 1:
        raise DataError(f"distillation takes a teacher with one input; {handle.path.name} "
                        f"has {len(handle.inputs)}")
    runner = make_runner(handle, num_threads)
    perm = input_permutation(tuple(student.inputs[0].shape), handle.inputs[0].shape)
    name = runner.input_names[0]
    dtype = np.dtype(handle.inputs[0].dtype)

    def teacher(batch: np.ndarray) -> np.ndarray:
        batch = np.asarray(batch, "float32")
        if dtype.kind in "iub":
            batch = np.rint(batch).astype(dtype)
        feed = batch.transpose(perm) if perm else batch
        return run_dataset(runner, {name: np.ascontiguousarray(feed)})[0]

    return teacher
