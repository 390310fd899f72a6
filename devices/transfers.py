"""What moving between compute units costs: crossing tensors and partition switches.

Model inputs start on the CPU and model outputs end there. A tensor that an op on one unit
produces and an op on another unit reads crosses the link between them once per reading
unit (free on a link that shares tensors in place, ``copy = false``); every change of unit
between consecutive ops costs the link's fixed synchronisation latency. Starting and
finishing an inference on a unit is its ``invoke_overhead``, not a switch.

    >>> transfers, switches = unit_crossings(graph, units, cpu="cpu")   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from edgeopt.devices.hardware import Hardware, Link
from edgeopt.devices.opcost import tensor_bytes
from edgeopt.errors import DeviceError
from edgeopt.graph import Graph


@dataclass(frozen=True)
class Transfer:
    """One tensor (or, with ``tensor`` -1, one partition switch) moved over a link."""

    tensor: int
    name: str
    bytes: int
    source: str
    target: str
    latency_s: float
    energy_j: float
    link: str = ""

    def to_json(self) -> dict:
        return {"tensor": self.tensor, "name": self.name, "bytes": self.bytes,
                "from": self.source, "to": self.target,
                "latency_ms": round(self.latency_s * 1e3, 6),
                "energy_mj": round(self.energy_j * 1e3, 9)}


def unit_crossings(graph: Graph, units: Sequence[str], cpu: str
                   ) -> tuple[list[tuple[int, str, str]], list[tuple[str, str]]]:
    """(tensor, from unit, to unit) crossings and the unit switches of the main subgraph."""
    ops = graph.ops_in_subgraph(0)
    home = {t: cpu for t in graph.inputs}
    crossings: list[tuple[int, str, str]] = []
    seen: set[tuple[int, str]] = set()
    for op in ops:
        unit = units[op.index]
        for t in op.inputs:
            if t >= 0 and t in home and home[t] != unit and (t, unit) not in seen:
                seen.add((t, unit))
                crossings.append((t, home[t], unit))
        home.update({t: unit for t in op.outputs if t >= 0})
    for t in graph.outputs:
        if home.get(t, cpu) != cpu:
            crossings.append((t, home[t], cpu))
    path = [units[op.index] for op in ops]
    switches = [(a, b) for a, b in zip(path, path[1:]) if a != b]
    return crossings, switches


def _link(hw: Hardware, a: str, b: str) -> Link:
    link = hw.link(a, b)
    if link is None:
        raise DeviceError(f"the device profile has no link between units '{a}' and '{b}' "
                          "(add a [links.NAME] table with between = [...])")
    return link


def cost_crossings(graph: Graph, units: Sequence[str], hw: Hardware) -> list[Transfer]:
    """Every crossing tensor and partition switch with its latency and energy."""
    crossings, switches = unit_crossings(graph, units, hw.cpu_unit().name)
    transfers = []
    for t, a, b in crossings:
        link = _link(hw, a, b)
        if not link.copy:
            continue
        size = tensor_bytes(graph.tensors[t])
        transfers.append(Transfer(t, graph.tensors[t].name, size, a, b,
                                  size / link.bandwidth.value,
                                  size * link.energy_per_byte.value, link.name))
    for a, b in switches:
        link = _link(hw, a, b)
        transfers.append(Transfer(-1, "partition switch", 0, a, b, link.latency.value, 0.0,
                                  link.name))
    return transfers
