"""A model loaded for timing on this host: LiteRT for .tflite, onnxruntime for .onnx.

    >>> session = open_session(handle, threads=2, delegate=host_delegate(None))
    >>> session.set_inputs(random_inputs(handle.inputs, seed=0))
    >>> session.invoke()

`invoke` runs the model once on inputs set beforehand, as benchmark_model does; `runner()`
gives the `edgeopt.runtime` runner interface (float in, float out, quantized IO handled)
that the numerics check feeds whole datasets through.
"""

from __future__ import annotations

from importlib import metadata
from typing import Protocol

import numpy as np

from edgeopt.deadline import ENV_NAME, RunWatchdog, exit_now
from edgeopt.devices.runners.delegates import HostDelegate
from edgeopt.errors import ConversionError, DeviceError, ModelLoadError, first_line
from edgeopt.model import ModelHandle, TensorSpec
from edgeopt.runtime import ModelRunner, TFLiteRunner, ort_run_batches


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


def random_inputs(specs: tuple[TensorSpec, ...], seed: int = 0,
                  count: int = 1) -> dict[str, np.ndarray]:
    """`count` seeded samples per input in the tensor's own dtype (dynamic dimensions -> 1):
    floats in [0, 1), 8-bit integers over their range, wider integers in 0..99."""
    rng = np.random.default_rng(seed)
    feed = {}
    for spec in specs:
        shape = tuple(1 if d < 0 else d for d in spec.shape) or (1,)
        shape = (count * shape[0],) + shape[1:]
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            feed[spec.name] = rng.random(shape).astype(dtype)
        elif dtype.kind == "b":
            feed[spec.name] = rng.integers(0, 2, shape).astype(dtype)
        else:
            info = np.iinfo(dtype)
            low, high = (info.min, info.max) if dtype.itemsize == 1 else (0, 99)
            feed[spec.name] = rng.integers(low, high, shape, endpoint=True).astype(dtype)
    return feed


class _InterpreterRunner(TFLiteRunner):
    """edgeopt.runtime's TFLite runner around an interpreter built here."""

    def __init__(self, interpreter):
        self.interpreter = interpreter
        self.input_details = interpreter.get_input_details()
        self.output_details = interpreter.get_output_details()
        self.input_names = [d["name"] for d in self.input_details]


class HostSession(Protocol):
    """A model loaded for timing on this host: `run_host` feeds it once and invokes it
    repeatedly; `numerics` compares two sessions' outputs through `runner()`."""

    @property
    def label(self) -> str:
        """Runtime, version and delegate, for the bench record's `tool`."""
        ...

    def set_inputs(self, feed: dict[str, np.ndarray]) -> None:
        """Bind one sample (one array per model input, in input order) for `invoke`."""
        ...

    def invoke(self) -> None:
        """Run the bound sample once; only this call is timed."""
        ...

    def runner(self) -> ModelRunner:
        """The same loaded model as a runner over whole datasets."""
        ...


class LiteRTSession:
    def __init__(self, handle: ModelHandle, threads: int | None, delegate: HostDelegate):
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        loaded = delegate.load()
        resolver = (OpResolverType.AUTO if delegate.default_delegates
                    else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        try:
            self.interpreter = Interpreter(
                model_path=str(handle.path), num_threads=threads,
                experimental_delegates=[loaded] if loaded else None,
                experimental_op_resolver_type=resolver)
            self.interpreter.allocate_tensors()
        except (ValueError, RuntimeError) as exc:
            raise ModelLoadError(f"LiteRT cannot run {handle.path} with {delegate.label}: "
                                 f"{first_line(exc)}") from exc
        self.label = f"LiteRT {_version('ai-edge-litert')}, {delegate.label}"
        self._indices = [d["index"] for d in self.interpreter.get_input_details()]
        self._watchdog = RunWatchdog(self._give_up)

    def _give_up(self) -> None:
        """LiteRT offers no way to stop an invoke from another thread: say why, and end the
        process (bench writes nothing before its runs finish)."""
        exit_now(f"LiteRT ran one invoke for more than {self._watchdog.deadline:g} s "
                 f"({ENV_NAME}): the model does not finish (a WHILE that never ends?)")

    def set_inputs(self, feed: dict[str, np.ndarray]) -> None:
        for index, value in zip(self._indices, feed.values()):
            self.interpreter.set_tensor(index, value)

    def invoke(self) -> None:
        self._watchdog.arm()
        try:
            self.interpreter.invoke()
        finally:
            self._watchdog.disarm()

    def runner(self) -> TFLiteRunner:
        return _InterpreterRunner(self.interpreter)


class OrtSession:
    def __init__(self, handle: ModelHandle, threads: int | None, optimize: bool = True):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        if threads:
            options.intra_op_num_threads = threads
        level = "ORT_ENABLE_ALL" if optimize else "ORT_DISABLE_ALL"
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        try:
            self.session = ort.InferenceSession(str(handle.path), options,
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
            raise ModelLoadError(f"onnxruntime cannot load {handle.path}: "
                                 f"{first_line(exc)}") from exc
        self.label = f"onnxruntime {_version('onnxruntime')} CPU ({level})"
        self.input_names = [i.name for i in self.session.get_inputs()]
        self._feed: dict[str, np.ndarray] = {}
        self._options = ort.RunOptions()
        self._options.log_severity_level = 4
        # onnxruntime checks `terminate` between nodes and loop iterations
        self._watchdog = RunWatchdog(lambda: setattr(self._options, "terminate", True))

    def set_inputs(self, feed: dict[str, np.ndarray]) -> None:
        self._feed = feed

    def _run_once(self, feed: dict[str, np.ndarray]) -> list:
        self._watchdog.arm()
        try:
            return self.session.run(None, feed, self._options)
        except Exception as exc:  # onnxruntime raises its own Fail type when terminated
            if self._watchdog.expired:
                raise ConversionError(f"onnxruntime stopped the model after "
                                      f"{self._watchdog.deadline:g} s on one run "
                                      f"({ENV_NAME}): it does not finish (a Loop that never "
                                      "ends?)") from exc
            raise
        finally:
            self._watchdog.disarm()

    def invoke(self) -> None:
        self._run_once(self._feed)

    def runner(self) -> OrtSession:
        return self

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """All samples in the batches the model takes, under edgeopt's run deadline."""
        return ort_run_batches(self.session, feeds, error=ModelLoadError)


def open_session(handle: ModelHandle, threads: int | None,
                 delegate: HostDelegate) -> HostSession:
    """A timing session in the model's own runtime; .keras/SavedModel must be converted."""
    if handle.format == "tflite":
        return LiteRTSession(handle, threads, delegate)
    if handle.format == "onnx":
        if delegate.library or not delegate.default_delegates:
            raise DeviceError("onnxruntime runs .onnx on its CPU execution provider here; "
                              "--delegate applies to .tflite models")
        return OrtSession(handle, threads)
    raise ModelLoadError(f"bench runs .tflite and .onnx models; {handle.path} is "
                         f"{handle.format}: convert it first (edgeopt convert)")
