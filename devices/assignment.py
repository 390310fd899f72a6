"""Which compute unit of a device runs each op: the estimator's view of a placement.

The estimator takes a placement in any of three forms and turns it into a `UnitAssignment`:

* an `edgeopt.delegates` ``Placement`` (per-op ``unit`` 'cpu' or the delegate's unit,
  ``partitions``);
* a mapping ``{op index: unit name}`` or a sequence of unit names in op order, where a
  name is a unit of the profile, ``"cpu"`` (the profile's CPU unit) or ``"accelerator"``
  (its main unit);
* nothing: `edgeopt.delegates.place_for_device` (`default_assignment` — every op on the
  device's main unit, except ops in a dtype it cannot compute — when there is no placement).

    >>> a = assign_units(graph, load_profile("pixel-npu"), {0: "npu", 1: "cpu"})  # doctest: +SKIP
    >>> a.units, a.partitions                                                      # doctest: +SKIP
    (('npu', 'cpu'), ((0,),))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from edgeopt.delegates import place_for_device
from edgeopt.devices.opcost import compute_dtype
from edgeopt.devices.profile import DeviceProfile
from edgeopt.errors import DeviceError
from edgeopt.graph import Graph

ACCELERATOR = "accelerator"


class OpPlacementView(Protocol):
    """Where a delegate put one op, as the estimator reads it."""

    @property
    def index(self) -> int:
        """The op's index in the graph (``graph.ops`` order)."""
        ...

    @property
    def unit(self) -> str:
        """``"cpu"`` for a fallback, else the delegate's unit."""
        ...

    @property
    def reason(self) -> str:
        """Why a CPU op is not delegated (the user reads it); "" when delegated."""
        ...

    @property
    def short_reason(self) -> str:
        """The reason in a few words, for tables ("" falls back to ``reason``)."""
        ...


@runtime_checkable
class PlacementView(Protocol):
    """What a delegate's placement result offers its consumers (the estimator, the device
    comparison, the manifest); `edgeopt.delegates.placement.Placement` is the one
    implementation, and estimator tests may pass their own."""

    @property
    def delegate(self) -> str:
        """The delegate's name (``google-tensor``, ``edgetpu``, ...)."""
        ...

    @property
    def ops(self) -> Sequence[OpPlacementView]:
        """Every op of the main graph, in graph order."""
        ...

    @property
    def partitions(self) -> Sequence[Sequence[int]]:
        """Op indices of each delegated partition, in execution order."""
        ...

    @property
    def delegated_ops(self) -> int:
        """How many ops the delegate runs."""
        ...

    @property
    def cpu_ops(self) -> int:
        """How many ops fall back to the CPU."""
        ...

    def manifest_json(self) -> dict[str, Any]:
        """The manifest's ``placement`` object (`edgeopt.manifest.Placement`)."""
        ...


# The forms a caller may give (see the module doc).
PlacementInput = PlacementView | Mapping[int, str] | Sequence[str] | None


@dataclass(frozen=True)
class UnitAssignment:
    """Per op (in ``graph.ops`` order) the profile unit that runs it, and the partitions."""

    delegate: str
    units: tuple[str, ...]
    partitions: tuple[tuple[int, ...], ...]
    reasons: Mapping[int, str] = field(default_factory=dict)
    origin: str = "default"
    placement: PlacementView | None = field(default=None, repr=False, compare=False)

    def manifest_json(self, cpu_unit: str) -> dict:
        """DESIGN.md's ``placement`` object."""
        if self.placement is not None:
            return self.placement.manifest_json()
        delegated = sum(u != cpu_unit for u in self.units)
        return {"delegate": self.delegate, "delegated_ops": delegated,
                "cpu_ops": len(self.units) - delegated,
                "partitions": [list(p) for p in self.partitions]}


def assign_units(graph: Graph, profile: DeviceProfile, placement: PlacementInput = None,
                 model: Any = None) -> UnitAssignment:
    """The `UnitAssignment` for ``placement`` (see the module doc for the accepted forms).

    ``model`` (the .tflite bytes or path) lets `edgeopt.delegates` read constant values.
    """
    if placement is None:
        placement = _delegates_placement(graph, profile, model)
    if placement is None:
        return default_assignment(graph, profile)
    if isinstance(placement, PlacementView):
        return _from_delegates(graph, profile, placement)
    return _from_units(graph, profile, placement)


def default_assignment(graph: Graph, profile: DeviceProfile) -> UnitAssignment:
    """Every op on the main unit, except ops whose dtype the main unit has no peak for."""
    hw = profile.tables()
    main, cpu = hw.unit(hw.main_unit), hw.cpu_unit().name
    units, reasons = [], {}
    for op in graph.ops:
        dtype = compute_dtype(graph, op)
        if op.subgraph != 0 or dtype not in main.peak_ops:
            units.append(cpu)
            reasons[op.index] = (f"{main.name} computes {', '.join(main.peak_ops)}, not {dtype}"
                                 if op.subgraph == 0 else "not in the main subgraph")
        else:
            units.append(main.name)
    return UnitAssignment(profile.delegate, tuple(units),
                          contiguous_partitions(graph, units, cpu), reasons, "default")


def contiguous_partitions(graph: Graph, units: Sequence[str], cpu: str
                          ) -> tuple[tuple[int, ...], ...]:
    """Runs of consecutive non-CPU ops (execution order, per subgraph)."""
    partitions: list[list[int]] = []
    previous = None
    for op in graph.ops:
        unit = units[op.index]
        if unit == cpu:
            previous = None
            continue
        if previous != (unit, op.subgraph):
            partitions.append([])
        partitions[-1].append(op.index)
        previous = (unit, op.subgraph)
    return tuple(tuple(p) for p in partitions)


def _delegates_placement(graph: Graph, profile: DeviceProfile, model: Any) -> PlacementView:
    """`edgeopt.delegates.place_for_device` on the model file when given, else on the graph."""
    return place_for_device(model if model is not None else graph, profile)


def _from_delegates(graph: Graph, profile: DeviceProfile,
                    placement: PlacementView) -> UnitAssignment:
    hw = profile.tables()
    cpu = hw.cpu_unit().name
    by_index = {op.index: op for op in placement.ops}
    units, reasons = [], {}
    for op in graph.ops:
        placed = by_index.get(op.index)
        on_cpu = placed is None or placed.unit == "cpu"
        units.append(cpu if on_cpu else hw.main_unit)
        if on_cpu:
            reasons[op.index] = (placed.short_reason or placed.reason if placed else "") \
                or "not placed by the delegate"
    partitions = tuple(tuple(p) for p in placement.partitions)
    return UnitAssignment(placement.delegate or profile.delegate, tuple(units),
                          partitions, reasons, "edgeopt.delegates", placement)


def _from_units(graph: Graph, profile: DeviceProfile,
                placement: Mapping[int, str] | Sequence[str]) -> UnitAssignment:
    hw = profile.tables()
    cpu = hw.cpu_unit().name
    aliases = {"cpu": cpu, ACCELERATOR: hw.main_unit, profile.delegate: hw.main_unit}
    if isinstance(placement, Mapping):
        named = {int(k): v for k, v in placement.items()}
    else:
        named = dict(enumerate(placement))
    units = []
    for op in graph.ops:
        name = named.get(op.index, cpu)
        unit = name if name in hw.units else aliases.get(name)
        if unit is None:
            raise DeviceError(f"placement puts op #{op.index} ({op.op}) on unknown unit "
                              f"'{name}'; {profile.name} has units {', '.join(hw.units)}")
        units.append(unit)
    reasons = {i: "placed on the CPU by the caller" for i, u in enumerate(units) if u == cpu}
    return UnitAssignment(profile.delegate, tuple(units),
                          contiguous_partitions(graph, units, cpu), reasons, "given")
