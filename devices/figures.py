"""Read sourced figures out of a profile's TOML tables, naming the file and field on error.

Every number in a profile carries where it came from. A figure is written either as an
inline table ``{ value = "4 TOPS", source = "coral.ai/docs/edgetpu/benchmarks" }`` or as a
plain value inside a table that has its own ``source`` key (the source then covers every
number of that table, as for a block of fitted efficiency factors):

    [units.cpu.efficiency.int8]
    source = "fitted by edgeopt devices calibrate host-cpu on 2026-01-01"
    default = 0.3
    conv = 0.55
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeopt.devices.quantities import QuantityError, parse_quantity
from edgeopt.errors import DeviceError


@dataclass(frozen=True)
class Figure:
    """One number in SI base units and where it came from."""

    value: float
    source: str

    def to_toml(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source}


@dataclass(frozen=True)
class TableReader:
    """A TOML table of a profile file, with its dotted path for error messages."""

    path: Path
    where: str
    raw: dict

    def fail(self, key: str, why: str) -> DeviceError:
        field = f"{self.where}.{key}" if self.where else key
        return DeviceError(f"device profile {self.path}: field '{field}' {why}")

    def table(self, key: str, required: bool = True) -> TableReader | None:
        value = self.raw.get(key)
        if value is None:
            if required:
                raise self.fail(key, "is missing")
            return None
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a table, got {value!r}")
        where = f"{self.where}.{key}" if self.where else key
        return TableReader(self.path, where, value)

    def tables(self, key: str) -> dict[str, TableReader]:
        """Sub-tables of ``key`` by name (``[units.cpu]``, ``[units.tpu]`` ...)."""
        outer = self.table(key)
        return {name: outer.table(name) for name in outer.raw if name != "source"}

    def string(self, key: str, choices: tuple[str, ...] = ()) -> str:
        value = self.raw.get(key)
        if value is None:
            raise self.fail(key, "is missing")
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {value!r}")
        if choices and value not in choices:
            raise self.fail(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def strings(self, key: str, length: int | None = None) -> tuple[str, ...]:
        value = self.raw.get(key)
        if value is None:
            raise self.fail(key, "is missing")
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"must be a non-empty list of strings, got {value!r}")
        if length is not None and len(value) != length:
            raise self.fail(key, f"must list exactly {length} names, got {value!r}")
        return tuple(value)

    def figure(self, key: str, quantity: str, minimum: float = 0.0, strict: bool = False,
               required: bool = True) -> Figure | None:
        """The figure at ``key``; ``strict`` requires it to be above ``minimum``."""
        if key not in self.raw:
            if required:
                raise self.fail(key, "is missing")
            return None
        value, source = self._value_and_source(key)
        try:
            number = parse_quantity(value, quantity)
        except QuantityError as exc:
            raise self.fail(key, str(exc)) from None
        if number < minimum or (strict and number <= minimum):
            relation = "above" if strict else "at least"
            raise self.fail(key, f"must be {relation} {minimum:g}, got {value!r}")
        return Figure(number, source)

    def figures(self, quantity: str, minimum: float = 0.0, strict: bool = False
                ) -> dict[str, Figure]:
        """Every figure of this table by key (the table's own ``source`` excluded)."""
        return {key: self.figure(key, quantity, minimum, strict)
                for key in self.raw if key != "source"}

    def _value_and_source(self, key: str) -> tuple[Any, str]:
        value = self.raw[key]
        if isinstance(value, dict):
            if "value" not in value:
                raise self.fail(key, "is a table without 'value'")
            source = value.get("source")
            if not isinstance(source, str) or not source.strip():
                raise self.fail(key, "needs a 'source' saying where the number came from")
            return value["value"], source
        source = self.raw.get("source")
        if not isinstance(source, str) or not source.strip():
            raise self.fail(key, "needs a source: write { value = ..., source = \"...\" } or "
                                 "give its table a 'source' key")
        return value, source
