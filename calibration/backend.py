"""The contract between the calibration core and a model format (NNCF's backend split).

The algorithms (`engine`, `calibrate`, `selection`, `report`, `finish`, `search`) take a
`QuantFormat` and never ask which format it is; `tflite_format.TFLiteFormat` and
`onnx_format.OnnxFormat` implement it over their thin I/O modules (`tflite_backend`,
`onnx_backend`), and `session.open_format` imports the one asked for only when used.

    >>> fmt: QuantFormat = open_format("onnx", "model.onnx")          # doctest: +SKIP
    >>> for batch in fmt.capture().stream(calib, {"conv1_out"}):      # doctest: +SKIP
    ...     observe(batch["conv1_out"])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np

from edgeopt.calibration.config import Mode
from edgeopt.calibration.graphspec import CalibGraph, Layer
from edgeopt.calibration.plan import QuantPlan

Arrays = dict[str, np.ndarray]


class ActivationCapture(Protocol):
    """Runs one model over calibration samples and hands out chosen tensors."""

    def stream(self, calib: Arrays, tensors: set[str],
               batch_size: int = 8) -> Iterator[Arrays]:
        """Yield, batch after batch of samples, `{tensor name: float values}` for each of
        `tensors` the model has (the float model's names, also for a quantized model);
        `calib` holds one array per model input, samples on the first axis."""
        ...


class QuantFormat(Protocol):
    """A format backend of the calibration core: everything the engine asks of a model
    format, so the algorithms never ask which format they hold."""

    @property
    def name(self) -> str:
        """"tflite" or "onnx", in messages and results."""
        ...

    @property
    def runtime(self) -> str:
        """The real runtime that checks results ("LiteRT interpreter"), for the report."""
        ...

    @property
    def int4_modes(self) -> tuple[Mode, ...]:
        """The modes whose writer can store int4 weights (others get int8)."""
        ...

    @property
    def int16_activations(self) -> bool:
        """Whether the writer can give single ops int16 activations in an int8 model."""
        ...

    @property
    def keeps_ops_float(self) -> bool:
        """Whether the writer can keep single ops without weights float in an int8 model
        (`QuantPlan.keep_float`)."""
        ...

    @property
    def float_model(self) -> bytes:
        """The float model the plans apply to."""
        ...

    @property
    def graph(self) -> CalibGraph:
        """Layers, weights and activations of `float_model`."""
        ...

    def capture(self, model: bytes | None = None) -> ActivationCapture:
        """Activations of `model` (default: the float model)."""
        ...

    def capture_quantized(self, model: bytes) -> ActivationCapture:
        """Dequantized activations of a quantized `model`, under the float tensor names."""
        ...

    def write(self, plan: QuantPlan) -> bytes:
        """The quantized model the format's library writes from `plan`."""
        ...

    def run(self, model: bytes, feeds: Arrays) -> list[np.ndarray]:
        """All samples through the real runtime: float outputs in output order. Raises
        RuntimeRejected when the runtime refuses the model (the engine falls back)."""
        ...

    def check(self, model: bytes, sample: Arrays) -> None:
        """Load and invoke once; RuntimeRejected (naming the tensor, if known) if refused."""
        ...

    def limitations(self, plan: QuantPlan) -> list[str]:
        """What the format cannot express of `plan`, said in the result's warnings."""
        ...

    def float_reasons(self, plan: QuantPlan) -> dict[str, str]:
        """Ops the writer keeps float on purpose (by output tensor or node), with why."""
        ...

    def node_name(self, tensor: str) -> str:
        """The op writing `tensor` as the written file and `quantization.float_ops` name it
        (.tflite: the tensor itself; .onnx: its node's name)."""
        ...

    def report_tensor(self, layer: Layer) -> str:
        """The tensor where a layer's output is compared (after ops the writer folds in)."""
        ...
