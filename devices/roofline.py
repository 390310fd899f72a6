"""Latency and energy of one op on one compute unit: a roofline plus a per-op overhead.

    compute = ops / (peak[dtype] x efficiency[dtype][kind] x array utilization)
    memory  = activation bytes / bandwidth(level) + weight bytes / bandwidth(weight level)
    latency = max(compute, memory) + (1 - overlap) x min(compute, memory)
              + bytes streamed over a link / link bandwidth
              + overhead[kind]
    energy  = ops x energy_per_op[dtype] + bytes x energy_per_byte(level)
              + streamed bytes x link energy_per_byte + static_power x latency

Activations come from the nearest memory level of the unit that holds the op's working
set; parameters from the level that holds all the parameters the model keeps on that unit
(between two inferences every other layer's weights pass through the caches too), or from
the unit's ``weight_memory`` when it streams weights from flash or DRAM.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.devices.hardware import ComputeUnit, Hardware, Link, MemoryLevel
from edgeopt.devices.opcost import OpCost

# An int4-weight convolution with int8 activations is not delegated to XNNPACK (it has
# no int4 convolution): LiteRT's builtin kernel unpacks the weights and runs it. Its
# compute relative to the builtin int8 kernel, measured on this project's host with
# benchmarks/int4_cpu.py (BENCHMARKS.md, "int4 on a CPU"): 1.0x for a 3x3 conv.
# An int16-activation MAC op (TFLite 16x8) is not delegated to XNNPACK either (it has no
# int16 kernels): LiteRT's reference 16x8 kernels run it; a 3x3 conv measured 24x the
# int8 XNNPACK time on this host (benchmarks/int16.py --cpu, BENCHMARKS.md "int16").
REFERENCE_KERNEL_SLOWDOWN = {"int4": 1.0, "int16": 24.0}
FLOAT_FALLBACK = ("float32", "float16")
INT_FALLBACK = ("int8", "int16")


@dataclass(frozen=True)
class OpTiming:
    """Where one op's time and energy go, in seconds and joules."""

    latency_s: float
    compute_s: float
    memory_s: float
    stream_s: float
    overhead_s: float
    energy_j: float
    dtype: str
    level: str
    memory_bytes: tuple[tuple[str, float], ...] = ()   # (level, bytes) read or written

    @property
    def bound(self) -> str:
        """What limits the op: compute, memory, stream (parameters over a link), overhead."""
        parts = {"compute": self.compute_s, "memory": self.memory_s, "stream": self.stream_s,
                 "overhead": self.overhead_s}
        return max(parts, key=parts.get)


def unit_dtype(unit: ComputeUnit, dtype: str) -> str:
    """The dtype ``unit`` computes ``dtype`` in: itself if it has a peak for it, else the
    nearest of the same family (float32 on an fp16 GPU), else its first dtype."""
    if dtype in unit.peak_ops:
        return dtype
    family = FLOAT_FALLBACK if dtype.startswith("float") else INT_FALLBACK
    return next((d for d in family if d in unit.peak_ops), next(iter(unit.peak_ops)))


def on_int4_cpu_path(cost: OpCost, unit: ComputeUnit, hw: Hardware) -> bool:
    """An int4-weight MAC op with integer activations left to the CPU's builtin kernels."""
    return (unit.name == hw.cpu_unit().name and bool(cost.macs)
            and cost.dtype.startswith("int") and cost.weight_dtype == "int4")


def on_int16_cpu_path(cost: OpCost, unit: ComputeUnit, hw: Hardware) -> bool:
    """An int16-activation MAC op (16x8) left to the CPU's reference kernels."""
    return unit.name == hw.cpu_unit().name and bool(cost.macs) and cost.dtype == "int16"


def reference_slowdown(cost: OpCost, unit: ComputeUnit, hw: Hardware) -> float:
    """How many times the int8 kernel's time the op computes in on `unit`."""
    if on_int16_cpu_path(cost, unit, hw):
        return REFERENCE_KERNEL_SLOWDOWN["int16"]
    if not on_int4_cpu_path(cost, unit, hw):
        return 1.0
    return REFERENCE_KERNEL_SLOWDOWN[cost.weight_dtype]


def memory_level(unit: ComputeUnit, hw: Hardware, working_set: float) -> MemoryLevel:
    """The nearest level of ``unit`` whose capacity holds ``working_set`` bytes."""
    for name in unit.memory:
        level = hw.memory[name]
        if level.capacity is None or working_set <= level.capacity.value:
            return level
    return hw.memory[unit.memory[-1]]


def _combine(compute_s: float, memory_s: float, overlap: float) -> float:
    """The roofline's max, plus the share of the smaller time that does not overlap."""
    return max(compute_s, memory_s) + (1.0 - overlap) * min(compute_s, memory_s)


def time_op(cost: OpCost, unit: ComputeUnit, hw: Hardware, streamed_bytes: float = 0.0,
            link: Link | None = None, unit_param_bytes: float = 0.0) -> OpTiming:
    """Latency and energy of ``cost`` on ``unit``; ``streamed_bytes`` of its parameters come
    over ``link`` on every inference (the Edge TPU's uncached parameters);
    ``unit_param_bytes`` is what the whole model keeps on the unit."""
    dtype = unit_dtype(unit, cost.dtype)
    peak = unit.peak_ops[dtype].value * unit.efficiency_for(dtype, cost.kind)
    compute_s = cost.ops / (peak * unit.array_utilization(cost.gemm_k, cost.gemm_n))
    compute_s *= reference_slowdown(cost, unit, hw)
    resident = cost.weight_bytes - streamed_bytes
    level = memory_level(unit, hw, cost.activation_bytes + resident)
    if unit.weight_memory:
        weight_level = hw.memory[unit.weight_memory]
    else:
        weight_level = memory_level(unit, hw, max(unit_param_bytes, resident))
    memory_s = cost.activation_bytes / level.bandwidth.value
    memory_s += resident / weight_level.bandwidth.value
    stream_s = streamed_bytes / link.bandwidth.value if link and streamed_bytes else 0.0
    overhead_s = unit.overhead_for(cost.kind)
    latency = _combine(compute_s, memory_s, unit.overlap_share) + stream_s + overhead_s
    energy = (cost.ops * unit.energy_per_op[dtype].value
              + cost.activation_bytes * level.energy_per_byte.value
              + resident * weight_level.energy_per_byte.value
              + (streamed_bytes * link.energy_per_byte.value if link else 0.0)
              + unit.static_power.value * latency)
    moved = ((level.name, float(cost.activation_bytes)), (weight_level.name, float(resident)))
    return OpTiming(latency, compute_s, memory_s, stream_s, overhead_s, energy, dtype,
                    level.name, moved)
