"""The latency and energy of one inference once every op has its unit: the shared last
step of the estimator (estimator.py) and the Edge TPU simulator (edgetpu.py).

Per op: a roofline on the unit that runs it (roofline.py); partition switches cost the
crossing tensors over the link plus a fixed synchronisation (transfers.py); a unit with an
on-chip parameter cache streams what does not fit (params.py); every inference pays the
units' invoke overhead; the device's idle power runs for the whole latency.
"""

from __future__ import annotations

from dataclasses import replace

from edgeopt.devices.assignment import UnitAssignment
from edgeopt.devices.kernel_model import kernel_rows
from edgeopt.devices.opcost import OpCost, op_costs
from edgeopt.devices.params import ParamResidency, param_residency
from edgeopt.devices.profile import DeviceProfile
from edgeopt.devices.result import Estimate, OpEstimate
from edgeopt.devices.roofline import (
    REFERENCE_KERNEL_SLOWDOWN,
    on_int4_cpu_path,
    on_int16_cpu_path,
    time_op,
    unit_dtype,
)
from edgeopt.devices.transfers import cost_crossings
from edgeopt.graph import Graph

# Cost fp16 ops with half the float32 bytes (fp16 tensors)? Measured on the snapdragon-npu
# fp16 rows (benchmarks/fp16_npu.py, BENCHMARKS.md "fp16 on the NPU"): held-out median
# |error| of the kept fit 10% with float32 bytes, 16% with half, so the bytes stay float32.
HALVE_FP16_BYTES = False
# What benchmarks/int4_cpu.py measured on this project's host (BENCHMARKS.md).
INT4_CPU_MEASURED = ("a w4a8 MobileNetV2-0.35 measured 1.9x the int8 model's latency on "
                     "this project's host, benchmarks/int4_cpu.py")


def estimate_assigned(graph: Graph, profile: DeviceProfile, assignment: UnitAssignment,
                      compiler: dict | None = None) -> Estimate:
    """The estimate for a resolved per-op assignment of units."""
    hw = profile.tables()
    residency = param_residency(graph, assignment.units, hw)
    fp16 = fp16_ops(assignment)
    costs = [in_unit_precision(c, hw.unit(assignment.units[c.index]), c.index in fp16)
             for c in op_costs(graph)]
    unit_params = _unit_param_bytes(costs, assignment)
    rows = tuple(_op_row(cost, assignment, residency, hw, unit_params) for cost in costs)
    transfers = tuple(cost_crossings(graph, assignment.units, hw))
    used = {row.unit for row in rows} | {hw.cpu_unit().name}
    invoke = {u: hw.unit(u).invoke_overhead.value for u in used}
    if profile.fit is not None and profile.fit.method == "kernel":
        # the kernel-level model (kernel_model.py) for the units its fit covers
        rows, kernel_invoke = kernel_rows(graph, costs, assignment.units, rows, hw,
                                          profile.fit.values)
        invoke.update({u: v for u, v in kernel_invoke.items() if u in used})
    invoke_s = sum(invoke.values())
    latency = sum(r.latency_s for r in rows) + sum(t.latency_s for t in transfers) + invoke_s
    idle = hw.idle_power.value * latency
    energy = sum(r.energy_j for r in rows) + sum(t.energy_j for t in transfers) + idle
    params = None
    if residency.cache_bytes:
        params = {"on_chip_param_bytes": residency.on_chip_bytes,
                  "off_chip_param_bytes": residency.off_chip_bytes}
    return Estimate(
        device=profile.name, latency_s=latency, energy_j=energy, ops=rows,
        transfers=transfers, invoke_s=invoke_s, idle_energy_j=idle,
        placement=assignment.manifest_json(hw.cpu_unit().name),
        precision=_precision(rows), profile_file=profile.path, params=params,
        compiler=compiler, notes=_notes(graph, assignment, compiler) + int4_cpu_notes(
            costs, assignment, hw) + int16_cpu_notes(costs, assignment, hw),
        basis=profile.basis,
        interval_s=profile.fit.interval(latency) if profile.fit else None)


def fp16_ops(assignment: UnitAssignment) -> set[int]:
    """Ops the placement says run in fp16 (a float model on QNN HTP, ...)."""
    ops = getattr(assignment.placement, "ops", ()) or ()
    return {op.index for op in ops if getattr(op, "precision", "") == "float16"}


def in_unit_precision(cost: OpCost, unit, fp16: bool) -> OpCost:
    """A float32 op as the unit runs it: in fp16 when the placement says so or the unit
    computes float only in fp16 (an NPU's float path), its arithmetic at the fp16 rate.
    Its tensors keep their float32 size unless `HALVE_FP16_BYTES` (see there)."""
    if cost.dtype != "float32" or not (fp16 or unit_dtype(unit, "float32") == "float16"):
        return cost
    if not HALVE_FP16_BYTES:
        return replace(cost, dtype="float16")
    weights = cost.weight_bytes // 2 if cost.weight_dtype in ("", "float32") else \
        cost.weight_bytes
    return replace(cost, dtype="float16", activation_bytes=cost.activation_bytes // 2,
                   weight_bytes=weights)


def _slow_path(costs, assignment: UnitAssignment, hw, on_path) -> list:
    return [c for c in costs if on_path(c, hw.unit(assignment.units[c.index]), hw)]


def int4_cpu_notes(costs, assignment: UnitAssignment, hw) -> tuple[str, ...]:
    """Say so when int4-weight ops land on a CPU's builtin kernels (the slow int4 path)."""
    slow = _slow_path(costs, assignment, hw, on_int4_cpu_path)
    if not slow:
        return ()
    return (f"{len(slow)} int4-weight op(s) ({', '.join(sorted({c.op for c in slow}))}) run "
            f"on the CPU's builtin kernels: no delegate takes int4 convolutions, so they are "
            f"costed on LiteRT's int4 path ({INT4_CPU_MEASURED}); int8 weights (--scheme "
            "w8a8) run faster on a CPU",)


def int16_cpu_notes(costs, assignment: UnitAssignment, hw) -> tuple[str, ...]:
    """Say so when int16-activation ops (16x8) land on a CPU: reference kernels."""
    slow = _slow_path(costs, assignment, hw, on_int16_cpu_path)
    if not slow:
        return ()
    return (f"{len(slow)} int16-activation op(s) ({', '.join(sorted({c.op for c in slow}))}) "
            f"run on the CPU: XNNPACK has no int16 kernels, so LiteRT's reference 16x8 "
            f"kernels run them, costed at {REFERENCE_KERNEL_SLOWDOWN['int16']:.0f}x the int8 "
            "time (a 3x3 conv measured on this project's host, benchmarks/int16.py --cpu)",)


def _unit_param_bytes(costs, assignment: UnitAssignment) -> dict[str, float]:
    """Parameter bytes each unit reads per inference (a shared tensor counts per use)."""
    totals: dict[str, float] = {}
    for cost in costs:
        unit = assignment.units[cost.index]
        totals[unit] = totals.get(unit, 0.0) + cost.weight_bytes
    return totals


def _op_row(cost, assignment: UnitAssignment, residency: ParamResidency, hw,
            unit_params: dict[str, float]) -> OpEstimate:
    unit = hw.unit(assignment.units[cost.index])
    streamed = residency.streamed.get(cost.index, 0)
    link = hw.link(unit.name, hw.cpu_unit().name) if streamed else None
    timing = time_op(cost, unit, hw, streamed, link, unit_params.get(unit.name, 0.0))
    return OpEstimate(cost.index, cost.op, unit.name, cost.kind, timing.dtype,
                      timing.latency_s, timing.energy_j, timing.bound,
                      assignment.reasons.get(cost.index, ""), timing.compute_s,
                      timing.memory_s, timing.stream_s, timing.overhead_s,
                      timing.memory_bytes)


def _precision(rows: tuple[OpEstimate, ...]) -> str:
    """The dtypes the MAC-heavy ops compute in ('int8', 'float32', 'int8+float32')."""
    heavy = {r.dtype for r in rows if r.kind in ("conv", "depthwise", "dense")}
    return "+".join(sorted(heavy or {r.dtype for r in rows})) or "none"


def _notes(graph: Graph, assignment: UnitAssignment, compiler: dict | None
           ) -> tuple[str, ...]:
    notes = []
    if compiler and "inference_ms" in compiler:
        notes.append(f"{compiler.get('compiler', 'the compiler')} {compiler.get('version', '')} "
                     f"itself estimates {compiler['inference_ms']:.3f} ms "
                     f"({compiler.get('system_config', '')})")
    if graph.subgraph_count > 1:
        extra = len(graph.ops) - len(graph.ops_in_subgraph(0))
        notes.append(f"{extra} op(s) in control-flow subgraphs are not costed (their trip "
                     "counts are only known at run time)")
    if assignment.origin == "default":
        notes.append("placement: every op on the device's main unit (no delegate placement "
                     "was available); CPU only for dtypes the unit cannot compute")
    return tuple(notes)
