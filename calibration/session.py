"""The state the quantize steps share, and the registry of format objects.

A format object (`tflite_format.TFLiteFormat`, `onnx_format.OnnxFormat`) reads its model
into a `CalibGraph`, streams activations, writes a `QuantPlan` with its library and runs
models in its real runtime; the engine never asks which format it holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from edgeopt.calibration.backend import QuantFormat
from edgeopt.calibration.calibrate import CalibrationStats
from edgeopt.calibration.config import Precision, QuantConfig, WeightMethod
from edgeopt.calibration.onnx_format import OnnxFormat
from edgeopt.calibration.plan import LayerPlan, make_layer_plan
from edgeopt.calibration.precision import LayerChoice
from edgeopt.calibration.tflite_format import TFLiteFormat

FORMATS: dict[str, Callable[..., QuantFormat]] = {"tflite": TFLiteFormat, "onnx": OnnxFormat}
Progress = Callable[[str], None]


def open_format(kind: str, model: Any, num_threads: int | None = None) -> QuantFormat:
    """The format backend for `kind` ("tflite" or "onnx")."""
    return FORMATS[kind](model, num_threads)


@dataclass
class Session:
    """What the steps share: the format, the config, the calibration and the notes."""

    fmt: QuantFormat
    config: QuantConfig
    calib: dict[str, np.ndarray]
    choices: dict[str, LayerChoice]
    stats: CalibrationStats | None = None  # set by engine.calibrate
    warnings: list[str] = field(default_factory=list)
    fallbacks: list[dict] = field(default_factory=list)
    progress: Progress = lambda _msg: None
    bias_correction: bool | None = None   # None: as the config says
    rescue: dict | None = None  # a collapsed output rescued: how (manifest quantization.rescue)

    def replan(self, name: str, precision: Precision) -> LayerPlan:
        """The plan of one layer at another precision (weights re-quantized). A weight
        another layer shares is rounded to nearest (the same codes for the same values)
        and a shared bias is left alone."""
        layer = self.fmt.graph.layer(name)
        method = self.choices[name].method_for(precision)
        shared = self.shared
        if layer.weight in shared:
            method = WeightMethod.RTN
        stats = self.calibration.layers.stats.get(name)
        return make_layer_plan(self.fmt.graph, layer, precision, method,
                               self.choices[name].block_size, stats,
                               self.corrects_bias, layer.bias in shared)

    @property
    def calibration(self) -> CalibrationStats:
        """The calibration pass's statistics; a step that needs them runs after it."""
        if self.stats is None:
            raise RuntimeError("the calibration pass has not run yet")
        return self.stats

    @property
    def corrects_bias(self) -> bool:
        return self.config.bias_correction if self.bias_correction is None else \
            self.bias_correction

    @cached_property
    def shared(self) -> set[str]:
        return self.fmt.graph.shared_constants()


def check_data(session: Session) -> dict[str, np.ndarray]:
    """The calibration samples that score `auto`'s candidates and feed the layer report
    (evaluation data stays held back for validation and the budget search)."""
    count = session.config.check_samples
    return {k: v[-count:] for k, v in session.calib.items()}
