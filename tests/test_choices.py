"""Every choice set is written once: the CLI offers the enum's values, and the library
accepts exactly those (a name one side takes and the other refuses is a drift bug)."""

from __future__ import annotations

import click

from edgeopt.calibration.config import IO_DTYPES, Scheme, WeightMethod
from edgeopt.calibration.estimators import METHODS
from edgeopt.choices import (
    ArtifactFormat,
    EstimatePrecision,
    IoDtype,
    PruneCriterion,
    PrunePattern,
    RangeMethod,
    values,
)
from edgeopt.cli import cli
from edgeopt.compress_settings import CRITERIA_NAMES, PATTERNS
from edgeopt.compression import CRITERIA
from edgeopt.config import FORMATS
from edgeopt.config import METHODS as BUILD_METHODS
from edgeopt.devices.modelsource import PRECISIONS


def _choices(command: str, option: str) -> set[str]:
    param = next(p for p in cli.commands[command].params if p.name == option)
    assert isinstance(param.type, click.Choice)
    return set(param.type.choices)


def test_library_choice_sets_are_the_enums():
    assert set(CRITERIA) == set(CRITERIA_NAMES) == set(values(PruneCriterion))
    assert set(PATTERNS) == set(values(PrunePattern))
    assert set(METHODS) == set(values(RangeMethod, RangeMethod.CONVERTER))
    assert set(BUILD_METHODS) == set(values(RangeMethod))
    assert set(IO_DTYPES) == set(values(IoDtype))
    assert set(PRECISIONS) == set(values(EstimatePrecision))
    assert set(FORMATS) == set(values(ArtifactFormat))


def test_the_cli_offers_what_the_library_accepts():
    assert _choices("build", "method") == set(BUILD_METHODS)
    assert _choices("quantize", "method") == set(METHODS)
    assert _choices("build", "scheme") == _choices("quantize", "scheme") == set(values(Scheme))
    assert _choices("quantize", "weight_method") == set(values(WeightMethod))
    assert _choices("build", "prune_criterion") == _choices("compress", "criterion") == set(
        CRITERIA)
    assert _choices("build", "format") == set(FORMATS)
    assert _choices("quantize", "io_dtype") == set(IO_DTYPES)
    assert _choices("estimate", "precision") == set(PRECISIONS)
