"""Numbers with units in device profiles: ``"4 TOPS"``, ``"68 GB/s"``, ``"8 MiB"``, ``"2 W"``.

A profile may write a figure as a plain number in SI base units (ops/s, bytes/s, bytes,
watts, joules, seconds, hertz) or as a string ``"<number> <unit>"``; each field accepts the
units of one quantity, and anything else is an error that names the allowed units.

    >>> parse_quantity("4 TOPS", "ops")
    4000000000000.0
    >>> parse_quantity("8 MiB", "bytes")
    8388608.0
"""

from __future__ import annotations

import re

UNITS: dict[str, dict[str, float]] = {
    "ops": {"OPS": 1.0, "GOPS": 1e9, "TOPS": 1e12, "FLOPS": 1.0, "GFLOPS": 1e9,
            "TFLOPS": 1e12, "MACS": 2.0, "GMACS": 2e9, "TMACS": 2e12},
    "bandwidth": {"B/s": 1.0, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "MiB/s": 2.0 ** 20,
                  "GiB/s": 2.0 ** 30, "Gbit/s": 1.25e8, "Mbit/s": 1.25e5},
    "bytes": {"B": 1.0, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 2.0 ** 10, "MiB": 2.0 ** 20,
              "GiB": 2.0 ** 30},
    "power": {"W": 1.0, "mW": 1e-3},
    "energy": {"J": 1.0, "mJ": 1e-3, "uJ": 1e-6, "nJ": 1e-9, "pJ": 1e-12},
    "time": {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9},
    "frequency": {"Hz": 1.0, "MHz": 1e6, "GHz": 1e9},
    "count": {},
    "ratio": {},
}
_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S+)\s*$")


class QuantityError(ValueError):
    """A figure that is not a number, or a number in a unit the field does not take."""


def parse_quantity(value: object, quantity: str) -> float:
    """``value`` (a number, or a string with a unit of ``quantity``) in SI base units."""
    if isinstance(value, bool):
        raise QuantityError(f"must be a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        raise QuantityError(f"must be a number or a string such as {_example(quantity)}, "
                            f"got {value!r}")
    match = _QUANTITY.match(value)
    if not match:
        raise QuantityError(f"must look like {_example(quantity)}, got {value!r}")
    number, unit = match.groups()
    scale = UNITS[quantity].get(unit)
    if scale is None:
        allowed = ", ".join(UNITS[quantity]) or "none (write a plain number)"
        raise QuantityError(f"has unknown unit '{unit}' in {value!r}; allowed units: {allowed}")
    return float(number) * scale


def _example(quantity: str) -> str:
    units = list(UNITS[quantity])
    return f"'10 {units[0]}'" if units else "a plain number"
