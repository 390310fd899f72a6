"""On-chip parameter caching: what fits in a unit's parameter cache and what streams.

The Edge TPU compiler caches parameters in on-chip SRAM in graph order; once a tensor does
not fit, it and every later one are streamed from the host on every inference (the compiler
log's "On-chip memory used for caching model parameters" and "Off-chip memory used for
streaming uncached model parameters").

    >>> residency = param_residency(graph, units, hw)          # doctest: +SKIP
    >>> residency.on_chip_bytes, residency.off_chip_bytes      # doctest: +SKIP
    (3744768, 0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from edgeopt.devices.hardware import Hardware
from edgeopt.graph import Graph


@dataclass(frozen=True)
class ParamResidency:
    on_chip_bytes: int = 0
    off_chip_bytes: int = 0
    cache_bytes: int = 0
    streamed: Mapping[int, int] = field(default_factory=dict)   # op index -> bytes streamed


def param_residency(graph: Graph, units: Sequence[str], hw: Hardware) -> ParamResidency:
    """Fill each unit's parameter cache in graph order; the rest streams (per op)."""
    cached_units = {name: u.param_cache.value for name, u in hw.units.items() if u.param_cache}
    parameters = set(graph.parameter_indices())
    used = dict.fromkeys(cached_units, 0)
    full = dict.fromkeys(cached_units, False)
    seen: set[int] = set()
    on_chip = off_chip = 0
    streamed: dict[int, int] = {}
    for op in graph.ops_in_subgraph(0):
        unit = units[op.index]
        if unit not in cached_units:
            continue
        for t in op.inputs:
            if t < 0 or t not in parameters or t in seen:
                continue
            seen.add(t)
            size = graph.tensors[t].size_bytes
            if not full[unit] and used[unit] + size <= cached_units[unit]:
                used[unit] += size
                on_chip += size
            else:
                full[unit] = True
                off_chip += size
                streamed[op.index] = streamed.get(op.index, 0) + size
    cache = int(sum(cached_units.values()))
    return ParamResidency(on_chip, off_chip, cache, streamed)
