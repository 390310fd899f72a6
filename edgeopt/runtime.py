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
from edgeopt.model import ModelHandle, load_keras, saved_model_signature_fn, tflite_interpreter


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
        self.interpreter = tflite_interpreter(model, num_threads=num_threads)
        self.input_details = self.interpreter.get_input_details()
        self.output_details = self.interpreter.get_output_details()
        names = source_input_names or [d["name"] for d in self.input_details]
        self.input_names = _match_names(names, [d["name"] for d in self.input_details])

    def _set_input(self, detail: dict, value: np.ndarray) -> None:
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
            per_sample.append([self._get_output(d) for d in self.output_details])
        return [np.concatenate(outs) for outs in zip(*per_sample)]


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


def ort_batch(session) -> int:
    """The batch an onnxruntime session takes: its fixed batch dimension, else ORT_BATCH."""
    fixed = [i.shape[0] for i in session.get_inputs() if i.shape and isinstance(i.shape[0], int)]
    return fixed[0] if fixed else ORT_BATCH


def ort_run_batches(session, feeds: dict[str, np.ndarray],
                    error: type[EdgeoptError] | None = None) -> list[np.ndarray]:
    """All samples through `session` in the batches it takes, each under `ort_run`'s
    deadline; one float32 array per output. The deadline is a ConversionError;
    onnxruntime's own errors propagate, or become `error` ("could not run the model on
    these inputs") when one is given."""
    names = [i.name for i in session.get_inputs()]
    count = len(next(iter(feeds.values())))
    step = ort_batch(session)
    try:
        chunks = [ort_run(session, {n: feeds[n][start:start + step] for n in names})
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
    """Feeds data in the source model's layout to a converted model with other layouts."""

    runner: ModelRunner
    input_perms: dict[str, tuple[int, ...]]
    output_perms: tuple[tuple[int, ...] | None, ...] = ()

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
        perms = list(self.output_perms) + [None] * (len(outputs) - len(self.output_perms))
        return [o if p is None else o.transpose(p) for o, p in zip(outputs, perms)]


def _match_names(source_names: list[str], model_names: list[str]) -> list[str]:
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
