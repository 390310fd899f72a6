"""The kernel-level latency model (nn-Meter's view) and its costing.

Per fused kernel (kernels.py) on a unit the profile's fit covers, by kernel type:

    GEMM kernel (conv, dense)          x[dtype, gemm]      x arithmetic / peak[dtype]
    depthwise kernel (depthwise, dwsep) x[dtype, depthwise] x arithmetic / peak[dtype]
    either also pays w x the bytes of its parameters (streamed from DRAM each inference)
    low-arithmetic kernel (pool, element-wise, movement, other): y x bytes it moves
    a standalone element-wise kernel also pays o (its dispatch and requantization)
    model = kinvoke[dtype] + sum of its kernels

``peak`` includes the unit's array utilization for the kernel's matrix shape; ``dtype``
is the kernel's compute dtype (the graph's for ``kinvoke``: that of its GEMM kernels).
The terms add (no roofline maximum): which kernels are compute- and which memory-bound is
the kernel type's, as nn-Meter predicts each kernel type by its own model. Fitted values
live in a profile's ``[fit]`` table with ``method = "kernel"`` (fitted.py):
``keff/UNIT/DTYPE/GROUP`` (share of peak), ``kmem/UNIT`` and ``kweight/UNIT`` (bytes/s;
a fit without ``kweight`` costs parameters nothing), ``kovh/UNIT/TYPE`` and
``kinvoke/UNIT/DTYPE`` (s); kernel_fit.py fits them. Ops on other units keep the roofline.

    >>> kernel_time(kernel, hw.unit("npu"), profile.fit.values).latency_s  # doctest: +SKIP
    2.1e-05
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from edgeopt.devices.hardware import ComputeUnit
from edgeopt.devices.kernels import Kernel, group_kernels
from edgeopt.devices.opcost import OpCost
from edgeopt.devices.result import OpEstimate
from edgeopt.devices.roofline import unit_dtype
from edgeopt.graph import Graph

# kernel type -> its compute group; a type not here is costed by the bytes it moves
COMPUTE_GROUPS = {"conv": "gemm", "dense": "gemm", "depthwise": "depthwise",
                  "dwsep": "depthwise"}
OVERHEAD_TYPES = ("elementwise",)   # kernel types that pay a per-kernel cost
Key = tuple


def kernel_units(values: Mapping[Key, float]) -> set[str]:
    """The units a kernel fit covers (those with a per-inference value)."""
    return {k[1] for k in values if k[0] == "kinvoke"}


def peak_compute_s(kernel: Kernel, unit: ComputeUnit) -> float:
    """The kernel's arithmetic at the unit's full peak for its dtype."""
    peak = unit.peak_ops[unit_dtype(unit, kernel.dtype)].value
    return kernel.arithmetic / (peak * unit.array_utilization(*kernel.gemm))


def compute_key(kernel: Kernel) -> Key | None:
    group = COMPUTE_GROUPS.get(kernel.kind)
    return ("keff", kernel.unit, kernel.dtype, group) if group else None


def graph_dtype(kernels: Sequence[Kernel]) -> str:
    """The dtype a graph runs in: that of most of its compute kernels."""
    counts = Counter(k.dtype for k in kernels if k.kind in COMPUTE_GROUPS)
    return counts.most_common(1)[0][0] if counts else (kernels[0].dtype if kernels else "")


@dataclass(frozen=True)
class KernelTime:
    latency_s: float
    compute_s: float
    memory_s: float
    overhead_s: float

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"


def kernel_time(kernel: Kernel, unit: ComputeUnit, values: Mapping[Key, float],
                prior_s_per_byte: float = 0.0) -> KernelTime:
    """The kernel's time on ``unit`` under the fitted ``values`` (an efficiency the fit
    did not see, for a dtype it had no rows of, is the nearest one it has; a bandwidth it
    did not see is the prior's, ``prior_s_per_byte``)."""
    key = compute_key(kernel)
    compute = memory = 0.0
    if key is not None:
        compute = _factor(values, key) * peak_compute_s(kernel, unit)
        memory = values.get(("kweight", kernel.unit), 0.0) * kernel.weight_bytes
    else:
        memory = values.get(("kmem", kernel.unit), prior_s_per_byte) * kernel.bytes_moved
    overhead = values.get(("kovh", kernel.unit, kernel.kind), 0.0)
    return KernelTime(compute + memory + overhead, compute, memory, overhead)


def _factor(values: Mapping[Key, float], key: Key) -> float:
    if key in values:
        return values[key]
    same_group = [v for k, v in values.items() if k[0] == "keff" and k[1:2] == key[1:2]
                  and k[3] == key[3]]
    return min(same_group) if same_group else 1.0


def invoke_s(values: Mapping[Key, float], unit: str, dtype: str) -> float:
    """Per-inference cost of a graph that runs ``dtype`` (the lowest fitted one when the
    fit had no rows of that dtype)."""
    if ("kinvoke", unit, dtype) in values:
        return values[("kinvoke", unit, dtype)]
    fitted = [v for k, v in values.items() if k[0] == "kinvoke" and k[1] == unit]
    return min(fitted) if fitted else 0.0


def kernel_rows(graph: Graph, costs: Sequence[OpCost], units: Sequence[str],
                rows: Sequence[OpEstimate], hw, values: Mapping[Key, float]
                ) -> tuple[tuple[OpEstimate, ...], dict[str, float]]:
    """``rows`` with the ops on kernel-fitted units costed as kernels: a kernel's time on
    its first op's row, the ops fused into it at zero time (bound "fused", the reason
    naming the kernel); and each such unit's per-inference cost."""
    covered = kernel_units(values)
    by_index = {r.index: r for r in rows}
    out = dict(by_index)
    kernels = [k for k in group_kernels(graph, costs, units) if k.unit in covered]
    for kernel in kernels:
        unit = hw.unit(kernel.unit)
        timing = kernel_time(kernel, unit, values,
                             1.0 / hw.memory[unit.memory[0]].bandwidth.value)
        energy = sum(by_index[i].energy_j for i in kernel.ops)
        out[kernel.anchor] = replace(
            by_index[kernel.anchor], latency_s=timing.latency_s, energy_j=energy,
            bound=timing.bound, compute_s=timing.compute_s, memory_s=timing.memory_s,
            stream_s=0.0, overhead_s=timing.overhead_s)
        for i in kernel.ops[1:]:
            fused = f"fused into op {kernel.anchor} ({kernel.kind} kernel)"
            reason = f"{by_index[i].reason}; {fused}" if by_index[i].reason else fused
            out[i] = replace(by_index[i], latency_s=0.0, energy_j=0.0, bound="fused",
                             reason=reason, compute_s=0.0, memory_s=0.0, stream_s=0.0,
                             overhead_s=0.0)
    invoke = {u: invoke_s(values, u, graph_dtype([k for k in kernels if k.unit == u]))
              for u in covered}
    return tuple(out[r.index] for r in rows), invoke
