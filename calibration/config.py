"""The one config object of the quantize stage, the schemes it knows, and its result.

    >>> config = QuantConfig(scheme="w4a8", method="auto")
    >>> config.scheme, traits(config.scheme).activation_bits
    (<Scheme.W4A8: 'w4a8'>, 8)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum

from edgeopt.calibration.estimators import METHODS
from edgeopt.choices import IoDtype, values
from edgeopt.errors import ConfigError


class Scheme(StrEnum):
    W8A8 = "w8a8"          # int8 weights per channel, int8 activations (full integer)
    W4A8 = "w4a8"          # int4 weights on conv/dense layers, int8 activations
    W8A16 = "w8a16"        # int8 weights, int16 activations (TFLite 16x8, zero point 0)
    W4A16 = "w4a16"        # int4 weights, activations kept float (weight-only)
    W4AFP32 = "w4afp32"    # same as w4a16: int4 weights, float compute
    DYNAMIC = "dynamic"    # int8 weights, activations quantized on the fly by the runtime
    FP16 = "fp16"          # float16 weights
    FLOAT = "float"        # no quantization


class Precision(StrEnum):
    INT4 = "int4"
    INT8 = "int8"
    INT16 = "int16"        # int8 weights, int16 activations around the op (16x8 kernels)
    FP16 = "fp16"
    FLOAT = "float"


class WeightMethod(StrEnum):
    RTN = "rtn"            # round to nearest, absmax scales
    GPTQ = "gptq"          # error-compensating rounding from calibration data


class Mode(StrEnum):
    STATIC = "static"
    WEIGHT_ONLY = "weight_only"
    DYNAMIC = "dynamic"
    FP16 = "fp16"
    FLOAT = "float"


@dataclass(frozen=True)
class SchemeTraits:
    mode: Mode
    activation_bits: int | None
    int4_layers: Precision      # conv and dense layers
    other_layers: Precision     # depthwise and grouped convolutions


SCHEMES: dict[Scheme, SchemeTraits] = {
    Scheme.W8A8: SchemeTraits(Mode.STATIC, 8, Precision.INT8, Precision.INT8),
    Scheme.W4A8: SchemeTraits(Mode.STATIC, 8, Precision.INT4, Precision.INT8),
    Scheme.W8A16: SchemeTraits(Mode.STATIC, 16, Precision.INT8, Precision.INT8),
    Scheme.W4A16: SchemeTraits(Mode.WEIGHT_ONLY, None, Precision.INT4, Precision.INT8),
    Scheme.W4AFP32: SchemeTraits(Mode.WEIGHT_ONLY, None, Precision.INT4, Precision.INT8),
    Scheme.DYNAMIC: SchemeTraits(Mode.DYNAMIC, None, Precision.INT8, Precision.INT8),
    Scheme.FP16: SchemeTraits(Mode.FP16, None, Precision.FP16, Precision.FP16),
    Scheme.FLOAT: SchemeTraits(Mode.FLOAT, None, Precision.FLOAT, Precision.FLOAT),
}
IO_DTYPES = values(IoDtype)
BLOCK_SIZES = (32, 64, 128)


def traits(scheme: Scheme | str) -> SchemeTraits:
    return SCHEMES[Scheme(scheme)]


@dataclass(frozen=True)
class QuantConfig:
    """Everything the quantize stage decides, with its defaults in sight."""

    scheme: Scheme = Scheme.W8A8
    method: str = "auto"                      # minmax | percentile | mse | entropy | auto
    weight_method: WeightMethod | None = None  # None: gptq for int4 layers, rtn for int8
    block_size: int | None = None             # int4 blocks (dense layers); None: per channel
    bias_correction: bool = True
    percentile: float = 99.99
    recipe: object | None = None              # a calibration.recipes.Recipe
    accuracy_budget: float | None = None      # metric points (labels) or an SQNR floor in dB
    int16_search: bool = True                 # the budget search may give layers int16
                                              # activations (off: the device has no 16x8)
    float_tail: bool = True                   # a collapse may be rescued by ops kept float
                                              # (off: the device runs no float op)
    io_dtype: str = "float32"
    rescue: bool = True                       # rescue an output that collapses in int8
                                              # (off: --accept-collapsed ships the int8 one)
    layer_report: bool = True
    isolate_layers: int = 8                   # worst layers also measured quantized alone
    check_samples: int = 128                  # calibration samples that score auto's candidates
    batch_size: int = 8
    num_threads: int | None = None
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "scheme", _enum(Scheme, self.scheme, "scheme"))
        if self.weight_method is not None:
            object.__setattr__(self, "weight_method",
                               _enum(WeightMethod, self.weight_method, "weight method"))

        if self.method not in METHODS:
            raise ConfigError(f"unknown range method '{self.method}'; choose from "
                              f"{', '.join(METHODS)}")
        if self.io_dtype not in IO_DTYPES:
            raise ConfigError(f"io dtype '{self.io_dtype}' not one of {', '.join(IO_DTYPES)}")
        if self.io_dtype != "float32" and traits(self.scheme).mode != Mode.STATIC:
            raise ConfigError(f"{self.io_dtype} model inputs and outputs need a full-integer "
                              f"scheme (w8a8 or w4a8); {self.scheme} keeps float activations")
        if self.io_dtype != "float32" and traits(self.scheme).activation_bits == 16:
            raise ConfigError(f"{self.io_dtype} model inputs and outputs need int8 "
                              f"activations; {self.scheme} has int16 ones (keep float32 IO)")
        if self.block_size is not None and self.block_size not in BLOCK_SIZES:
            raise ConfigError(f"block size {self.block_size} not one of "
                              f"{', '.join(map(str, BLOCK_SIZES))}")
        if not 50.0 < self.percentile < 100.0:
            raise ConfigError(f"percentile {self.percentile} must lie in (50, 100)")

    def replace(self, **changes) -> QuantConfig:
        return replace(self, **changes)

    def to_json(self) -> dict:
        record = asdict(self)
        record["recipe"] = getattr(self.recipe, "name", None)
        return {k: (str(v) if isinstance(v, StrEnum) else v) for k, v in record.items()}


def _enum(kind, value, what: str):
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        raise ConfigError(f"unknown {what} '{value}'; choose from {choices}") from None


@dataclass(frozen=True)
class QuantResult:
    """A quantized model that the real runtime has loaded and run, and how it was made."""

    model: bytes
    format: str
    scheme: str
    method: str
    layer_report: list[dict]
    precision_per_layer: dict[str, str]
    warnings: list[str]
    io_dtype: str
    validation: dict | None = None
    search: dict | None = None
    ranges: dict[str, dict] = field(default_factory=dict)
    float_ops: list[dict] | None = None  # full-integer schemes: ops the file runs in float
    rescue: dict | None = None  # an output that collapsed in int8, rescued: how
    output_ops: list[str | None] | None = None  # the op computing each output (validate)

    def to_json(self) -> dict:
        return {"format": self.format, "scheme": self.scheme, "method": self.method,
                "size_bytes": len(self.model), "io_dtype": self.io_dtype,
                "precision_per_layer": self.precision_per_layer,
                "validation": self.validation, "search": self.search,
                "layer_report": self.layer_report, "float_ops": self.float_ops,
                "rescue": self.rescue, "warnings": self.warnings}
