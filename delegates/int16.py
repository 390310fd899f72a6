"""Which delegates run int16 activations with int8 weights (TFLite 16x8), from int16.toml.

    >>> int16_support("qnn-htp").runs, int16_support("xnnpack").runs
    (True, False)
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

CPU_PATH = ("no delegate here runs int16 activations: LiteRT runs the 16x8 ops on its "
            "builtin reference kernels on the CPU (XNNPACK has no int16 kernels)")


@dataclass(frozen=True)
class Int16Support:
    delegate: str
    runs: bool
    source: str


@cache
def _table() -> dict[str, dict]:
    text = resources.files("edgeopt.delegates").joinpath("int16.toml").read_text()
    return tomllib.loads(text)


def int16_support(delegate: str) -> Int16Support:
    """What the data says of `delegate`; a delegate it does not list does not run int16
    (an external delegate library is not assumed to)."""
    row = _table().get(delegate)
    if row is None:
        return Int16Support(delegate, False, "not listed in delegates/int16.toml")
    return Int16Support(delegate, bool(row["runs"]), str(row["source"]))
