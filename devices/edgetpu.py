"""A simulated Edge TPU (coral-usb, coral-devboard): compile-time mapping and run-time cost.

What it models, each from the profile's figures:

* the compiler: a fully int8 model only; ops mapped up to the first op the Edge TPU cannot
  run (`edgeopt.delegates` Edge TPU rules, else the op list in edgetpu_ops.toml), the rest
  on the host CPU; parameters cached in the on-chip memory in graph order, the rest
  streamed from the host on every inference;
* the run: compute at the TPU's peak times a per-kind efficiency, uncached parameters over
  the host link, the input and output tensors over the link, the per-invoke overhead, and
  the CPU tail on the host's CPU.

    >>> graph = read_tflite("mobilenet_v2_int8.tflite")          # doctest: +SKIP
    >>> result = simulate(graph, load_profile("coral-usb"))      # doctest: +SKIP
    >>> print(compiler_log(result))                              # doctest: +SKIP
    Edge TPU compiler (simulated by edgeopt) ...
"""

from __future__ import annotations

import tomllib
from collections import Counter
from dataclasses import replace
from functools import cache
from importlib import resources
from typing import Any

from edgeopt.delegates.checks import CONTROL_FLOW_OPS
from edgeopt.delegates.engine import place
from edgeopt.devices.assignment import UnitAssignment, assign_units
from edgeopt.devices.costing import estimate_assigned
from edgeopt.devices.opcost import compute_dtype
from edgeopt.devices.profile import DeviceProfile
from edgeopt.devices.result import Estimate
from edgeopt.errors import DeviceError
from edgeopt.graph import Graph

BOUNDARY_OPS = ("QUANTIZE", "DEQUANTIZE")
# Ops that keep a model's state between invokes; with the control-flow ops they compute
# nothing themselves (neither float nor int8) and the Edge TPU compiler maps none of them.
VARIABLE_OPS = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"})
UNMAPPED_KINDS = CONTROL_FLOW_OPS | VARIABLE_OPS
AFTER_FIRST = "More than one subgraph is not supported (comes after the first unmapped op)"


def simulate(graph: Graph, profile: DeviceProfile, placement: Any = None,
             model: Any = None) -> Estimate:
    """Check, map and cost ``graph`` on an Edge TPU profile."""
    assignment = edgetpu_assignment(graph, profile, placement, model)
    result = estimate_assigned(graph, profile, assignment)
    return replace(result, compiler=compiler_summary(profile, assignment, result))


def edgetpu_assignment(graph: Graph, profile: DeviceProfile, placement: Any = None,
                       model: Any = None) -> UnitAssignment:
    """The compiler's mapping: int8 check, then the delegates' rules or the fallback list."""
    require_int8(graph, profile)
    require_mappable_start(graph, profile)
    if placement is None:
        placement = _delegates_placement(graph, model)
    if placement is None:
        return fallback_assignment(graph, profile)
    return assign_units(graph, profile, placement)


def runs_float_ops(profile: DeviceProfile) -> bool:
    """False for an Edge TPU: its compiler takes full-integer models only, so no op of a
    model for it may be left float (a collapse rescue's float tail included)."""
    return profile.delegate != "edgetpu"


def require_int8(graph: Graph, profile: DeviceProfile) -> None:
    """A DeviceError naming the first float ops unless the model is fully int8."""
    float_ops = [op for op in graph.ops_in_subgraph(0) if op.op not in BOUNDARY_OPS
                 and op.op not in UNMAPPED_KINDS  # no arithmetic: CALL_ONCE has no tensor
                 and compute_dtype(graph, op).startswith("float")]
    if not float_ops:
        return
    first = ", ".join(f"#{op.index} {op.op}" for op in float_ops[:3])
    quantized = any(op.op not in BOUNDARY_OPS and not compute_dtype(graph, op).startswith(
        "float") for op in graph.ops_in_subgraph(0))
    # a quantized model whose ops stayed float: the quantizer had no integer kernel for them
    advice = (f"they stayed float in this quantized model (no integer kernel); {profile.name} "
              "cannot run them: replace those ops in the model, or build for a device that "
              "runs float ops beside its accelerator (pixel-npu, host-cpu)") if quantized else (
        "quantize to full integer first (edgeopt build --scheme w8a8 with calibration data)")
    raise DeviceError(
        f"{profile.name} runs fully int8-quantized models only: {len(float_ops)} op(s) "
        f"compute in float ({first}); {advice}")


def require_mappable_start(graph: Graph, profile: DeviceProfile) -> None:
    """A DeviceError with the true reason when a control-flow or resource-variable op comes
    before every op the Edge TPU could run: the compiler maps the main graph only up to the
    first op it cannot run, so nothing would run on the TPU (a streaming model's CALL_ONCE
    is op #0). Such an op later in the graph leaves the ops before it mapped."""
    main = [op for op in graph.ops_in_subgraph(0) if op.op not in BOUNDARY_OPS]
    if not main or main[0].op not in UNMAPPED_KINDS:
        return
    raise DeviceError(unmapped_start_message(graph, profile, main[0]))


def unmapped_start_message(graph: Graph, profile: DeviceProfile, first: Any) -> str:
    """Why a model that starts with control flow or state cannot use the Edge TPU, and what
    to do, in the words of the ops it holds."""
    counts = Counter(op.op for op in graph.ops if op.op in UNMAPPED_KINDS)
    held = ", ".join(f"{n} {name}" for name, n in sorted(counts.items()))
    why, fixes = [], []
    if counts.keys() & (VARIABLE_OPS | {"CALL_ONCE"}):
        init = first.options.get("init_subgraph_index") if first.op == "CALL_ONCE" else None
        why.append("it keeps state between invokes in resource variables (a streaming "
                   "model: VAR_HANDLE names a variable, READ_VARIABLE and ASSIGN_VARIABLE "
                   "read and write it" + (f", CALL_ONCE runs subgraph {init} once to "
                                          "initialise it" if init is not None else "") + ")")
        fixes.append("export it stateless, each variable's state an extra model input and "
                     "output that the app carries from one invoke to the next (the "
                     "non-streaming export)")
    if counts.keys() & {"WHILE", "IF", "CALL", "STABLEHLO_WHILE", "STABLEHLO_CASE"}:
        why.append("its control flow (WHILE, IF, CALL) runs other subgraphs from the "
                   "interpreter")
        fixes.append("unroll the loop (a fixed trip count) or fold the branch (a known "
                     "condition) when exporting")
    return (f"{profile.name} cannot run this model: {'; '.join(why)} ({held}). The Edge TPU "
            "compiler maps no control-flow or resource-variable op and maps the main graph "
            f"only up to the first op it cannot run: here #{first.index} {first.op}, before "
            "every layer, so no op would run on the Edge TPU; "
            f"{' and '.join(fixes)}, then quantize it to full integer; or build for a device "
            "that runs these ops on its CPU (pixel-npu, host-cpu)")


def _delegates_placement(graph: Graph, model: Any):
    """The delegates package's Edge TPU placement (its Edge TPU rules)."""
    return place(model if model is not None else graph, "edgetpu")


@cache
def _fallback_ops() -> frozenset[str]:
    text = resources.files("edgeopt.devices").joinpath("edgetpu_ops.toml").read_text("utf-8")
    return frozenset(tomllib.loads(text)["ops"])


def fallback_assignment(graph: Graph, profile: DeviceProfile) -> UnitAssignment:
    """Map ops up to the first one missing from coral.ai's supported-ops list."""
    hw = profile.hardware
    tpu, cpu = hw.main_unit, hw.cpu_unit().name
    units, reasons, first = [], {}, None
    for op in graph.ops:
        if first is None and op.subgraph == 0 and op.op not in _fallback_ops():
            first = op
            reasons[op.index] = f"{op.op}: Operation is not supported by the Edge TPU"
        elif first is not None or op.subgraph != 0:
            reasons[op.index] = AFTER_FIRST if op.subgraph == 0 else "Not in the main subgraph"
        units.append(tpu if op.index not in reasons else cpu)
    mapped = tuple(i for i, u in enumerate(units) if u == tpu)
    return UnitAssignment("edgetpu", tuple(units), (mapped,) if mapped else (), reasons,
                          "edgetpu_ops.toml")


def compiler_summary(profile: DeviceProfile, assignment: UnitAssignment,
                     result: Estimate) -> dict:
    """The figures the Edge TPU compiler log reports, as a dict."""
    tpu = profile.hardware.unit(profile.hardware.main_unit)
    status = Counter()
    for row in result.ops:
        text = "Mapped to Edge TPU" if row.unit == tpu.name else (row.reason or "On the CPU")
        status[(row.op, text)] += 1
    cache_bytes = int(tpu.param_cache.value) if tpu.param_cache else 0
    params = result.params or {"on_chip_param_bytes": 0, "off_chip_param_bytes": 0}
    return {
        "ops_mapped": sum(1 for r in result.ops if r.unit == tpu.name),
        "ops_on_cpu": sum(1 for r in result.ops if r.unit != tpu.name),
        "edgetpu_subgraphs": len(assignment.partitions),
        "on_chip_param_bytes": params["on_chip_param_bytes"],
        "on_chip_remaining_bytes": max(cache_bytes - params["on_chip_param_bytes"], 0),
        "off_chip_param_bytes": params["off_chip_param_bytes"],
        "operators": [{"op": op, "count": n, "status": text}
                      for (op, text), n in sorted(status.items())],
        "cpu_ops": [{"index": r.index, "op": r.op, "reason": r.reason}
                    for r in result.ops if r.unit != tpu.name],
        "mapping": assignment.origin,
    }


def compiler_log(result: Estimate) -> str:
    """A compiler-style summary, like edgetpu_compiler's log."""
    c = result.compiler or {}
    lines = ["Edge TPU compiler (simulated by edgeopt)",
             f"On-chip memory used for caching model parameters: {_size(c['on_chip_param_bytes'])}",
             f"On-chip memory remaining for caching model parameters: "
             f"{_size(c['on_chip_remaining_bytes'])}",
             f"Off-chip memory used for streaming uncached model parameters: "
             f"{_size(c['off_chip_param_bytes'])}",
             f"Number of Edge TPU subgraphs: {c['edgetpu_subgraphs']}",
             f"Total number of operations: {c['ops_mapped'] + c['ops_on_cpu']} "
             f"({c['ops_mapped']} mapped, {c['ops_on_cpu']} on the CPU)",
             "", f"{'Operator':<28} {'Count':>5}  Status"]
    lines += [f"{o['op']:<28} {o['count']:>5}  {o['status']}" for o in c["operators"]]
    return "\n".join(lines)


def _size(n: float) -> str:
    for unit, scale in (("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{int(n)}.00B"
