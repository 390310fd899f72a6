"""Run a model in its own runtime: LiteRT for .tflite, onnxruntime for .onnx, Keras/TF.

Every runner takes float (or integer) inputs in its own model's layout and returns
float outputs: quantized IO is quantized and dequantized with the model's own scale and
zero point, so outputs of a float and an int8 model compare directly.

    >>> runner = make_runner(load_model("dist/digits_cnn.tflite"))
    >>> outputs = run_dataset(runner, data)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from edgeopt.deadline import run_deadline
from edgeopt.errors import ConversionError, EdgeoptError, first_line
from edgeopt.model import (
    ModelHandle,
    TensorSpec,
    batch_axis,
    load_keras,
    saved_model_signature_fn,
    tflite_interpreter,
)


class ModelRunner(Protocol):
    """A model loaded in a runtime, as validation, parity checks and `run_dataset` use it."""

    @property
    def label(self) -> str:
        """The runtime, for messages and the report ("LiteRT interpreter")."""
        ...

    @property
    def input_names(self) -> list[str]:
        """The keys `run` takes, in the model's input order."""
        ...

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """All samples (first axis) through the model: float outputs in output order."""
        ...


def quantize_array(x: np.ndarray, dtype: np.dtype, scale: float, zero_point: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale) + zero_point, info.min, info.max).astype(dtype)


def dequantize_array(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    return (q.astype(np.float32) - zero_point) * np.float32(scale)


class TFLiteRunner:
    """LiteRT interpreter, one sample per invoke (mobile models are built for batch 1)."""

    label = "LiteRT interpreter"

    def __init__(self, model: Path | bytes, source_input_names: list[str] | None = None,
                 num_threads: int | None = None):
        self.interpreter = tflite_interpreter(model, num_threads=num_threads,
                                              unprepared_ok=True)
        self.input_details = self.interpreter.get_input_details()
        self.output_details = self.interpreter.get_output_details()
        names = source_input_names or [d["name"] for d in self.input_details]
        self.input_names = match_input_names(names, [d["name"] for d in self.input_details])
        self.output_keys = signature_output_keys(self.interpreter, self.output_details)
        self.output_names = [d["name"] for d in self.output_details]
        self.output_shapes = [tuple(int(d) for d in detail["shape"])
                              for detail in self.output_details]

    def _set_input(self, detail: dict, value: np.ndarray) -> None:
        value = in_model_layout(value, tuple(int(d) for d in detail.get(
            "shape_signature", detail["shape"])))
        dtype = np.dtype(detail["dtype"])
        scale, zero_point = detail["quantization"]
        if dtype.kind in "iu" and scale and value.dtype.kind == "f":
            value = quantize_array(value, dtype, scale, zero_point)
        if tuple(value.shape) != tuple(detail["shape"]):
            self.interpreter.resize_tensor_input(detail["index"], list(value.shape))
            self.interpreter.allocate_tensors()
        self.interpreter.set_tensor(detail["index"], value.astype(dtype, copy=False))

    def _get_output(self, detail: dict) -> np.ndarray:
        value = self.interpreter.get_tensor(detail["index"])
        scale, zero_point = detail["quantization"]
        if np.dtype(detail["dtype"]).kind in "iu" and scale:
            return dequantize_array(value, scale, zero_point)
        return value.copy()

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        count = len(next(iter(feeds.values())))
        per_sample = []
        for i in range(count):
            for name, detail in zip(self.input_names, self.input_details):
                self._set_input(detail, feeds[name][i:i + 1])
            try:
                self.interpreter.invoke()
            except RuntimeError as exc:
                raise ConversionError(f"LiteRT failed to run the model: {exc}") from exc
            per_sample.append([batch_first(self._get_output(d), 1) for d in self.output_details])
        return [np.concatenate(outs) for outs in zip(*per_sample)]


def sample_row(value: np.ndarray, index: int) -> np.ndarray:
    """Sample ``index`` as a batch of one for a calibrating tool: float samples as float32,
    integer ones (token ids, bytes) in their own type, which the tools check against the
    model's input type."""
    row = value[index:index + 1]
    return row if row.dtype.kind in "iub" else row.astype(np.float32)


def in_model_layout(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A batch-first chunk (edgeopt.data keeps samples first) as a model input of declared
    `shape` (-1 dynamic) takes it: a scalar input gets the chunk's one value, an input that
    counts samples on another axis (a recurrent state [layers, N, units]) gets them there."""
    if not shape:
        return value.reshape(-1)[0] if value.size else value.reshape(())
    if value.ndim != len(shape) or fits_declared(value.shape, shape):
        return value
    for axis in range(1, value.ndim):
        moved = np.moveaxis(value, 0, axis)
        if fits_declared(moved.shape, shape):
            return moved
    return value


def fits_declared(shape: tuple[int, ...], declared: tuple[int, ...]) -> bool:
    """Whether an array of `shape` is one a tensor `declared` with it (-1 dynamic) takes."""
    return len(shape) == len(declared) and all(d < 0 or d == s
                                               for s, d in zip(shape, declared))


def batch_first(array: np.ndarray, count: int) -> np.ndarray:
    """One run's output for `count` samples, with the samples on axis 0.

    Most models put the batch first; a time-major sequence model (a CTC recognizer's
    [T, N, C]) or a recurrent state ([layers, N, units]) does not, and concatenating such
    outputs along axis 0 mixed time steps with samples. The batch axis is axis 0 when its
    size is `count`, else the one axis of that size; an output with none (its batch
    squeezed away) of a single sample gains one.
    """
    shape = array.shape
    if shape and shape[0] == count:
        return array
    axes = [i for i, d in enumerate(shape) if d == count]
    if axes and (count == 1 or len(axes) == 1):
        return np.moveaxis(array, axes[0], 0)
    if count == 1:
        return array[np.newaxis]
    raise ConversionError(f"an output of shape {list(shape)} for {count} samples has no "
                          "batch axis edgeopt can find")


def signature_keys(interpreter, details: list[dict], kind: str) -> list[str | None]:
    """Each input's or output's (`kind`: "inputs" / "outputs") SignatureDef name, in
    `details` order; None where the model has no signature, or several and none is
    serving_default (which one an app calls is then not ours to guess)."""
    by_index = {}
    try:
        signatures = interpreter._get_full_signature_list() or {}
    except (AttributeError, RuntimeError, ValueError):  # an old LiteRT, a broken signature
        signatures = {}
    if len(signatures) == 1 or "serving_default" in signatures:
        chosen = signatures.get("serving_default") or next(iter(signatures.values()))
        by_index = {int(index): name for name, index in chosen.get(kind, {}).items()}
    return [by_index.get(int(d["index"])) for d in details]


def signature_output_keys(interpreter, details: list[dict]) -> list[str]:
    """Each output's SignatureDef name (the converter's `output_0`, or the ONNX/Keras
    name), in `details` order; its tensor name where the model has no signature."""
    keys = signature_keys(interpreter, details, "outputs")
    return [key or d["name"] for key, d in zip(keys, details)]


def _base_name(name: str) -> str:
    name = name.removeprefix("serving_default_").removesuffix(":0")
    return "".join(c if c.isalnum() else "_" for c in name).lower()


def _shape_fits(source: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Same rank, and every static source dimension past the batch is in the converted
    shape (a layout move permutes the axes)."""
    if len(source) != len(shape):
        return False
    remaining = list(shape[1:])
    for dim in source[1:]:
        if dim < 0:
            continue
        if dim not in remaining:
            return False
        remaining.remove(dim)
    return True


def match_outputs(source: tuple[TensorSpec, ...] | list[TensorSpec], keys: list[str],
                  shapes: list[tuple[int, ...]],
                  tensor_names: list[str] | None = None) -> list[int]:
    """For each source output, the index of ITS output in a converted model.

    The TFLite converter orders a model's outputs its own way (mtcnn's ONet came out
    landmarks, box, score), so position says nothing. Matched, in turn: by name (the
    SignatureDef key or tensor name against the source name); by the converter's own
    SignatureDef names `output_N`, which number the source's outputs; by a shape only one
    converted output has; what is left, by position.
    """
    if len(source) != len(keys):
        raise ConversionError(f"the converted model has {len(keys)} outputs, the source "
                              f"{len(source)}")
    numbered = {f"output_{i}" for i in range(len(keys))}
    names = tensor_names or keys
    rules = [lambda i, j: _base_name(source[i].name) in (_base_name(keys[j]),
                                                         _base_name(names[j])),
             lambda i, j: set(keys) == numbered and keys[j] == f"output_{i}",
             lambda i, j: _shape_fits(source[i].shape, shapes[j])]
    order: dict[int, int] = {}
    for rule in rules:
        for i in range(len(source)):
            if i in order:
                continue
            free = [j for j in range(len(keys)) if j not in order.values() and rule(i, j)]
            if len(free) == 1:
                order[i] = free[0]
    left = iter(j for j in range(len(keys)) if j not in order.values())
    return [order[i] if i in order else next(left) for i in range(len(source))]


def ort_run(session, feeds: dict, outputs: list[str] | None = None) -> list:
    """`session.run` that gives up after `run_deadline()` seconds.

    A valid ONNX model can run forever (a Loop whose trip count never runs out); onnxruntime
    checks `RunOptions.terminate` between nodes and loop iterations, so a timer that sets it
    turns the hang into a ConversionError. Other failures propagate unchanged.
    """
    import threading

    import onnxruntime as ort

    options = ort.RunOptions()
    options.log_severity_level = 4
    deadline = run_deadline()
    timer = threading.Timer(deadline, lambda: setattr(options, "terminate", True))
    timer.daemon = True
    timer.start()
    try:
        return session.run(outputs, feeds, options)
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidArgument types
        if options.terminate:
            raise ConversionError(f"onnxruntime stopped the model after {deadline:.0f} s on one "
                                  "batch: it does not finish (a Loop that never ends?)") from exc
        raise
    finally:
        timer.cancel()


ORT_BATCH = 64


def _declared(ort_input) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) and d >= 0 else -1 for d in (ort_input.shape or ()))


def ort_batch(session) -> int:
    """The batch an onnxruntime session takes: its fixed batch dimension (on each input's
    batch axis), else ORT_BATCH."""
    fixed = []
    for spec in session.get_inputs():
        shape = _declared(spec)
        axis = batch_axis(shape)
        if axis is not None and shape[axis] > 0:
            fixed.append(shape[axis])
    return fixed[0] if fixed else ORT_BATCH


def ort_feed(session, feeds: dict[str, np.ndarray], start: int, step: int) -> dict:
    """One chunk of batch-first samples, each input in the layout the session declares."""
    feed = {}
    for spec in session.get_inputs():
        shape = _declared(spec)
        chunk = feeds[spec.name][start:start + step]
        axis = batch_axis(shape)
        if axis is None:
            chunk = chunk.reshape(-1)[0] if chunk.size else chunk.reshape(())
            chunk = np.asarray(chunk)
        elif axis:
            chunk = np.moveaxis(chunk, 0, axis)
        else:  # a static state [2, 1, 128] has no dynamic axis to say where samples go
            chunk = in_model_layout(chunk, shape)
        feed[spec.name] = chunk
    return feed


def varying_scalar(session, feeds: dict[str, np.ndarray]) -> bool:
    """A scalar input whose value changes between samples: one sample per run."""
    return any(not spec.shape and len(np.unique(feeds[spec.name])) > 1
               for spec in session.get_inputs())


def ort_run_batches(session, feeds: dict[str, np.ndarray],
                    error: type[EdgeoptError] | None = None) -> list[np.ndarray]:
    """All samples through `session` in the batches it takes, each under `ort_run`'s
    deadline; one float32 array per output. The deadline is a ConversionError;
    onnxruntime's own errors propagate, or become `error` ("could not run the model on
    these inputs") when one is given."""
    count = len(next(iter(feeds.values())))
    step = 1 if varying_scalar(session, feeds) else ort_batch(session)
    try:
        chunks = [[batch_first(out, min(step, count - start)) for out in
                   ort_run(session, ort_feed(session, feeds, start, step))]
                  for start in range(0, count, step)]
    except EdgeoptError:
        raise
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidArgument types
        if error is None:
            raise
        raise error(f"onnxruntime could not run the model on these inputs: "
                    f"{first_line(exc)}") from exc
    return [np.concatenate(outs).astype(np.float32, copy=False) for outs in zip(*chunks)]


class OnnxRunner:
    label = "onnxruntime (CPU)"

    def __init__(self, model: Path | bytes, num_threads: int | None = None):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        if num_threads:
            options.intra_op_num_threads = num_threads
        source = str(model) if isinstance(model, Path) else model
        try:
            self.session = ort.InferenceSession(source, options,
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
            raise ConversionError(f"onnxruntime cannot load the model: "
                                  f"{first_line(exc)}") from exc
        self.inputs = self.session.get_inputs()
        self.input_names = [i.name for i in self.inputs]

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return ort_run_batches(self.session, feeds, error=ConversionError)


class KerasRunner:
    label = "Keras (TensorFlow)"

    def __init__(self, model):
        self.model = model
        self.input_names = [t.name for t in model.inputs]

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        args = [feeds[name] for name in self.input_names]
        try:
            outputs = self.model.predict(args if len(args) > 1 else args[0], verbose=0,
                                         batch_size=64)
        except Exception as exc:  # Keras/TF raise many types for inputs a model cannot take
            raise ConversionError(f"Keras could not run the model on these inputs: "
                                  f"{first_line(exc)}") from exc
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        return [np.asarray(o, dtype=np.float32) for o in outputs]


class SavedModelRunner:
    label = "TensorFlow SavedModel"

    def __init__(self, path: Path):
        self._loaded, self.signature = saved_model_signature_fn(path)
        self.input_names = list(self.signature.structured_input_signature[1])
        self.output_names = list(self.signature.structured_outputs)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        import tensorflow as tf

        count = len(next(iter(feeds.values())))
        chunks = []
        for start in range(0, count, 64):
            args = {k: tf.constant(v[start:start + 64]) for k, v in feeds.items()}
            try:
                result = self.signature(**args)
            except Exception as exc:  # TF raises many types for inputs a model cannot take
                raise ConversionError(f"TensorFlow could not run the SavedModel on these "
                                      f"inputs: {first_line(exc)}") from exc
            chunks.append([result[name].numpy() for name in self.output_names])
        return [np.concatenate(outs).astype(np.float32, copy=False) for outs in zip(*chunks)]


@dataclass(frozen=True)
class LayoutAdapter:
    """Feeds data in the source model's layout to a converted model with other layouts,
    and gives its outputs back in the source's order (`source_outputs`, matched by
    `match_outputs`) and layout (`output_perms`, in source order)."""

    runner: ModelRunner
    input_perms: dict[str, tuple[int, ...]]
    output_perms: tuple[tuple[int, ...] | None, ...] = ()
    source_outputs: tuple[TensorSpec, ...] = ()

    @property
    def output_order(self) -> list[int] | None:
        """The converted model's output index for each source output (None: as it is)."""
        keys = getattr(self.runner, "output_keys", None)
        shapes = getattr(self.runner, "output_shapes", None)
        if not self.source_outputs or keys is None or shapes is None:
            return None
        return match_outputs(self.source_outputs, keys, shapes,
                             getattr(self.runner, "output_names", None))

    @property
    def label(self) -> str:
        return self.runner.label

    @property
    def input_names(self) -> list[str]:
        return self.runner.input_names

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        moved = {k: (v.transpose(self.input_perms[k]) if k in self.input_perms else v)
                 for k, v in feeds.items()}
        outputs = self.runner.run(moved)
        order = self.output_order
        if order is not None:
            outputs = [outputs[j] for j in order]
        perms = list(self.output_perms) + [None] * (len(outputs) - len(self.output_perms))
        return [o if p is None else o.transpose(p) for o, p in zip(outputs, perms)]


def match_input_names(source_names: list[str], model_names: list[str]) -> list[str]:
    """Map each model input to a source input name (TFLite prefixes `serving_default_`)."""
    def base(name: str) -> str:
        return name.removeprefix("serving_default_").split(":")[0]

    by_base = {base(n): n for n in source_names}
    if all(base(m) in by_base for m in model_names):
        return [by_base[base(m)] for m in model_names]
    if len(source_names) != len(model_names):
        raise ConversionError(f"the converted model has {len(model_names)} inputs, the source "
                              f"{len(source_names)}")
    return list(source_names)


def make_runner(handle: ModelHandle, num_threads: int | None = None,
                keras_model=None,
                source_input_names: list[str] | None = None) -> ModelRunner:
    """The runner of the model's own runtime."""
    if handle.format == "tflite":
        return TFLiteRunner(handle.tflite_bytes(), source_input_names, num_threads)
    if handle.format == "onnx":
        return OnnxRunner(handle.path, num_threads)
    if handle.format == "keras":
        return KerasRunner(keras_model or load_keras(handle.path))
    return SavedModelRunner(handle.path)


def run_dataset(runner: ModelRunner, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    """All samples through the runner; one stacked array per model output."""
    feeds = {name: arrays[name] for name in runner.input_names}
    return runner.run(feeds)
