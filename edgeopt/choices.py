"""The choice sets that commands offer, one str-Enum each; the CLI builds its
`click.Choice` lists from these, and the library checks its configs against them, so a
name cannot be accepted by one and refused by the other.

Choice sets owned by a stage live with it: `edgeopt.calibration.config.Scheme` and
`WeightMethod`. These are the ones several parts share.

    >>> [m.value for m in RangeMethod]
    ['auto', 'minmax', 'percentile', 'mse', 'entropy', 'converter']
"""

from __future__ import annotations

from enum import StrEnum


class ArtifactFormat(StrEnum):
    TFLITE = "tflite"
    ONNX = "onnx"


class TorchRoute(StrEnum):
    """How a PyTorch program becomes a model: torch.onnx.export into the ONNX path (the
    default: equal or better parity on the models measured), or litert-torch straight to a
    float .tflite."""

    ONNX = "onnx"
    LITERT = "litert"


class RangeMethod(StrEnum):
    """Activation-range estimators; `converter` is the converter's own min-max baseline."""

    AUTO = "auto"
    MINMAX = "minmax"
    PERCENTILE = "percentile"
    MSE = "mse"
    ENTROPY = "entropy"
    CONVERTER = "converter"


class PruneCriterion(StrEnum):
    L1 = "l1"
    L2 = "l2"
    BN_SCALE = "bn_scale"
    ACTIVATION = "activation"
    TAYLOR = "taylor"


class PrunePattern(StrEnum):
    STRUCTURED = "structured"
    TWO_FOUR = "2:4"
    UNSTRUCTURED = "unstructured"


class IoDtype(StrEnum):
    FLOAT32 = "float32"
    INT8 = "int8"
    UINT8 = "uint8"


class EstimatePrecision(StrEnum):
    """auto: a .tflite as it is, other formats at the device's precision."""

    AUTO = "auto"
    MODEL = "model"
    INT8 = "int8"


class BenchClock(StrEnum):
    WALL = "wall"
    CPU = "cpu"


class BenchRunner(StrEnum):
    AUTO = "auto"
    BENCHMARK_MODEL = "benchmark_model"
    PYTHON = "python"


class Shell(StrEnum):
    BASH = "bash"
    ZSH = "zsh"


def values(choices: type[StrEnum], *leave_out: StrEnum) -> tuple[str, ...]:
    """The names of a choice set, in order, without `leave_out`."""
    return tuple(c.value for c in choices if c not in leave_out)
