"""The hardware half of a device profile: compute units, memory levels, links, power.

Kept apart from what the delegate accepts (profile.py), as Vela keeps the accelerator
apart from the system config. Every number is a `Figure` with its source.

    [units.tpu]                       # a compute unit
    kind = "tpu"
    memory = ["sram"]                 # memory levels it reads, nearest first
    weight_memory = "flash"           # optional: where parameters stream from
    peak_ops.int8 = { value = "4 TOPS", source = "..." }
    efficiency.int8 = { source = "...", default = 0.3, depthwise = 0.05 }
    overhead = { source = "...", default = "8 us" }     # per op, by op kind
    invoke_overhead = { value = "0.25 ms", source = "..." }
    static_power = { value = "0.3 W", source = "..." }
    energy_per_op.int8 = { value = "0.5 pJ", source = "..." }
    param_cache = { value = "8 MiB", source = "..." }   # optional: on-chip parameter cache
    array_rows = { value = 64, source = "..." }         # optional: a MAC array's K x N
    array_cols = { value = 64, source = "..." }         #   tiles (partly empty tiles idle)
    overlap = { value = 0.0, source = "..." }           # optional: how much of compute and
                                      # memory time overlap (1, the default: a pure roofline)

    [memory.sram]                     # a memory level
    bandwidth = { value = "100 GB/s", source = "..." }
    energy_per_byte = { value = "1 pJ", source = "..." }
    capacity = { value = "8 MiB", source = "..." }      # omitted for the outermost level

    [links.usb]                       # an interconnect between two units
    between = ["cpu", "tpu"]
    bandwidth = ...; latency = ...; energy_per_byte = ...
    copy = false                      # optional: tensors are shared in place, not copied

    [power]
    idle = { value = "2.5 W", source = "..." }          # drawn for the whole inference
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from edgeopt.devices.figures import Figure, TableReader

UNIT_KINDS = ("cpu", "gpu", "npu", "tpu")
COMPUTE_DTYPES = ("int8", "int16", "float16", "float32")


@dataclass(frozen=True)
class MemoryLevel:
    name: str
    bandwidth: Figure            # bytes/s
    energy_per_byte: Figure      # J/byte
    capacity: Figure | None      # bytes; None for the outermost level


@dataclass(frozen=True)
class ComputeUnit:
    name: str
    kind: str
    memory: tuple[str, ...]
    peak_ops: Mapping[str, Figure]                      # dtype -> ops/s (a MAC is 2 ops)
    efficiency: Mapping[str, Mapping[str, Figure]]      # dtype -> op kind -> share of peak
    overhead: Mapping[str, Figure]                      # op kind -> s per op
    invoke_overhead: Figure                             # s per inference
    static_power: Figure                                # W while the unit works
    energy_per_op: Mapping[str, Figure]                 # dtype -> J per op
    cores: Figure | None = None
    clock: Figure | None = None
    threads: Figure | None = None
    param_cache: Figure | None = None                   # bytes of on-chip parameter cache
    weight_memory: str | None = None                    # level parameters stream from
    overlap: Figure | None = None                       # share of memory time hidden
    array_rows: Figure | None = None                    # MAC array: reduction depth
    array_cols: Figure | None = None                    # ... and output columns

    def efficiency_for(self, dtype: str, kind: str) -> float:
        table = self.efficiency[dtype]
        return (table.get(kind) or table["default"]).value

    def array_utilization(self, k: int, n: int) -> float:
        """Share of a MAC array's cells a (K x N) matrix product keeps busy: the last tile
        along each side is partly empty (1.0 for units without an array, or non-GEMM ops)."""
        if not (self.array_rows and self.array_cols and k and n):
            return 1.0
        share = 1.0
        for size, side in ((k, self.array_rows.value), (n, self.array_cols.value)):
            share *= size / (math.ceil(size / side) * side)
        return share

    @property
    def overlap_share(self) -> float:
        return 1.0 if self.overlap is None else self.overlap.value

    def overhead_for(self, kind: str) -> float:
        return (self.overhead.get(kind) or self.overhead["default"]).value


@dataclass(frozen=True)
class Link:
    name: str
    between: tuple[str, str]
    bandwidth: Figure            # bytes/s
    latency: Figure              # s per partition switch (synchronisation)
    energy_per_byte: Figure      # J/byte
    copy: bool = True            # False: both units use the tensors in place (no transfer)


@dataclass(frozen=True)
class Hardware:
    main_unit: str
    units: Mapping[str, ComputeUnit]
    memory: Mapping[str, MemoryLevel]
    links: Mapping[str, Link]
    idle_power: Figure

    def unit(self, name: str) -> ComputeUnit:
        return self.units[name]

    def cpu_unit(self) -> ComputeUnit:
        """The unit CPU-fallback ops run on: the unit named 'cpu', else the first of kind cpu."""
        if "cpu" in self.units:
            return self.units["cpu"]
        return next(u for u in self.units.values() if u.kind == "cpu")

    def link(self, a: str, b: str) -> Link | None:
        return next((link for link in self.links.values() if set(link.between) == {a, b}), None)


def parse_hardware(top: TableReader) -> Hardware:
    """Read and cross-check the hardware tables of one profile."""
    memory = {name: _memory(name, t) for name, t in top.tables("memory").items()}
    units = {name: _unit(name, t) for name, t in top.tables("units").items()}
    links = {name: _link(name, t) for name, t in top.tables("links").items()} \
        if "links" in top.raw else {}
    power = top.table("power")
    hardware = Hardware(top.string("main_unit"), units, memory, links,
                        power.figure("idle", "power"))
    _cross_check(top, hardware)
    return hardware


def _memory(name: str, t: TableReader) -> MemoryLevel:
    return MemoryLevel(name, t.figure("bandwidth", "bandwidth", strict=True),
                       t.figure("energy_per_byte", "energy"),
                       t.figure("capacity", "bytes", strict=True, required=False))


def _unit(name: str, t: TableReader) -> ComputeUnit:
    efficiency = {dtype: table.figures("ratio", strict=True)
                  for dtype, table in t.tables("efficiency").items()}
    for dtype, table in efficiency.items():
        if "default" not in table:
            raise t.table("efficiency").table(dtype).fail("default", "is missing")
    overhead = t.table("overhead").figures("time")
    if "default" not in overhead:
        raise t.table("overhead").fail("default", "is missing")
    return ComputeUnit(
        name=name, kind=t.string("kind", UNIT_KINDS), memory=t.strings("memory"),
        peak_ops=_by_dtype(t, "peak_ops", "ops", strict=True), efficiency=efficiency,
        overhead=overhead, invoke_overhead=t.figure("invoke_overhead", "time"),
        static_power=t.figure("static_power", "power"),
        energy_per_op=_by_dtype(t, "energy_per_op", "energy"),
        cores=t.figure("cores", "count", 1, required=False),
        clock=t.figure("clock", "frequency", strict=True, required=False),
        threads=t.figure("threads", "count", 1, required=False),
        param_cache=t.figure("param_cache", "bytes", required=False),
        weight_memory=t.string("weight_memory") if "weight_memory" in t.raw else None,
        overlap=_overlap(t), array_rows=t.figure("array_rows", "count", 1, required=False),
        array_cols=t.figure("array_cols", "count", 1, required=False))


def _overlap(t: TableReader) -> Figure | None:
    figure = t.figure("overlap", "ratio", required=False)
    if figure is not None and figure.value > 1:
        raise t.fail("overlap", f"must be between 0 and 1, got {figure.value:g}")
    return figure


def _by_dtype(t: TableReader, key: str, quantity: str, strict: bool = False
              ) -> dict[str, Figure]:
    table = t.table(key)
    for dtype in table.raw:
        if dtype != "source" and dtype not in COMPUTE_DTYPES:
            raise table.fail(dtype, f"is not a compute dtype ({', '.join(COMPUTE_DTYPES)})")
    figures = table.figures(quantity, strict=strict)
    if not figures:
        raise t.fail(key, "must give at least one dtype")
    return figures


def _link(name: str, t: TableReader) -> Link:
    a, b = t.strings("between", length=2)
    copy = t.raw.get("copy", True)
    if not isinstance(copy, bool):
        raise t.fail("copy", f"must be true or false, got {copy!r}")
    return Link(name, (a, b), t.figure("bandwidth", "bandwidth", strict=True),
                t.figure("latency", "time"), t.figure("energy_per_byte", "energy"), copy)


def _cross_check(top: TableReader, hw: Hardware) -> None:
    """Names that refer to other tables must exist; dtypes must line up."""
    if hw.main_unit not in hw.units:
        raise top.fail("main_unit", f"names unknown unit '{hw.main_unit}' "
                                    f"(units: {', '.join(hw.units)})")
    _check_links(top, hw)
    units = top.table("units")
    for unit in hw.units.values():
        _check_unit(units.table(unit.name), unit, hw)


def _check_links(top: TableReader, hw: Hardware) -> None:
    for link in hw.links.values():
        for end in link.between:
            if end not in hw.units:
                raise top.table("links").table(link.name).fail(
                    "between", f"names unknown unit '{end}' (units: {', '.join(hw.units)})")
    if not any(u.kind == "cpu" for u in hw.units.values()):
        raise top.fail("units", "must include a unit of kind 'cpu' for CPU-fallback ops")
    cpu = hw.cpu_unit().name
    if hw.main_unit != cpu and hw.link(hw.main_unit, cpu) is None:
        raise top.fail("links", f"must link the main unit '{hw.main_unit}' with '{cpu}' "
                                "(tensors cross between them)")


def _check_unit(t: TableReader, unit: ComputeUnit, hw: Hardware) -> None:
    for level in (*unit.memory, *([unit.weight_memory] if unit.weight_memory else [])):
        if level not in hw.memory:
            raise t.fail("memory", f"names unknown memory level '{level}' "
                                   f"(levels: {', '.join(hw.memory)})")
    for dtype in unit.peak_ops:
        for table in ("efficiency", "energy_per_op"):
            if dtype not in getattr(unit, table):
                raise t.table(table).fail(dtype, f"is missing (peak_ops has {dtype})")
