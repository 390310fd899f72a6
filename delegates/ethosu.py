"""Ethos-U placement from a Vela run: per-op units, Vela's reasons, its figures, its model.

    >>> p = place_with_vela(tflite_bytes, "ethos-u65-512")      # doctest: +SKIP
    >>> p.summary_line(), p.compiler["sram_kib"]                 # doctest: +SKIP
"""

from __future__ import annotations

import math
import re
from importlib import metadata
from typing import Any

from edgeopt.delegates import rewrites
from edgeopt.delegates.constants import small_int_constants
from edgeopt.delegates.crossings import find_crossings
from edgeopt.delegates.partition import independent_subsets
from edgeopt.delegates.placement import CPU, OpPlacement, Placement
from edgeopt.delegates.vela import FAILED, NO_REASON, VelaRun, run_vela, system_for
from edgeopt.delegates.view import ModelIndex
from edgeopt.errors import DeviceError
from edgeopt.graph import Graph
from edgeopt.tflite_reader import read_tflite

UNIT = "npu"
TITLE = "Arm Ethos-U (Vela)"
VELA_RULE = "vela"
MAIN_GRAPH_ONLY = "Vela compiles the main graph only; control-flow bodies run on the CPU"
_TRAILING_TENSOR = re.compile(r"\s*\([^()]*\)$")
# Vela reason fragment -> (rewrites.toml rule whose text applies).
REWRITE_RULES = (
    ("unsupported DataType Float", "float_op_in_integer_graph"),
    ("shapeless tensor", "static_shapes"),
    ("constant shape", "static_shapes"),
    ("per-axis", "per_tensor_weights"),
)
GENERIC_REWRITE = ("change the op's parameters to fit Vela's constraints for it, or replace it "
                   "(`vela --supported-ops-report` lists them)")
# Summary CSV column -> (figure name, scale to apply).
FIGURES = {
    "sram_memory_used": ("sram_kib", 1.0),
    "dram_memory_used": ("dram_kib", 1.0),
    "on_chip_flash_memory_used": ("on_chip_flash_kib", 1.0),
    "off_chip_flash_memory_used": ("off_chip_flash_kib", 1.0),
    "cycles_total": ("cycles", 1.0),
    "cycles_npu": ("npu_cycles", 1.0),
    "inference_time": ("inference_ms", 1000.0),
    "inferences_per_second": ("inferences_per_second", 1.0),
    "nn_macs": ("macs", 1.0),
    "core_clock": ("clock_hz", 1.0),
    "total_original_weights": ("weights_bytes", 1.0),
    "total_npu_encoded_weights": ("npu_encoded_weights_bytes", 1.0),
}


def place_with_vela(tflite: bytes, accelerator: str = "ethos-u55-256",
                    system_config: str | None = None, memory_mode: str | None = None,
                    timeout: float = 300) -> Placement:
    """Run Vela on ``tflite`` and turn its verdicts and figures into a Placement.

    When Vela cannot compile the model every op is placed on the CPU with Vela's error as
    the reason (a report, not a crash); ``artifact`` is then None.
    """
    default_system, default_mode = system_for(accelerator)
    system_config, memory_mode = system_config or default_system, memory_mode or default_mode
    try:
        run = run_vela(tflite, accelerator, system_config, memory_mode, timeout)
    except DeviceError as exc:
        return placement_from_run(tflite, None, accelerator, system_config, memory_mode,
                                  error=str(exc))
    return placement_from_run(tflite, run, accelerator, system_config, memory_mode)


def placement_from_run(tflite: bytes, run: VelaRun | None, accelerator: str,
                       system_config: str, memory_mode: str, error: str = "") -> Placement:
    """The Placement for a finished Vela run (or for a failed one, given its error)."""
    graph = read_tflite(tflite)
    settings = {"accelerator": accelerator, "system_config": system_config,
                "memory_mode": memory_mode, "compiler": "vela", "version": _vela_version()}
    if run is None:
        return _failed(graph, accelerator, settings, error or FAILED)
    compiled = read_tflite(run.compiled)
    cpu_names = _cpu_outputs(compiled)
    ops = tuple(_op_placement(graph, op, cpu_names, run.reasons) for op in graph.ops)
    partitions = _npu_partitions(graph, ops)
    compiler = {**settings, **_figures(run.summary), "npu_subgraphs": _ethos_u_ops(compiled)}
    index = ModelIndex.build(graph, small_int_constants(tflite))
    return Placement("ethos-u", UNIT, ops, partitions, find_crossings(index, partitions, UNIT),
                     device=accelerator, compiler=compiler, artifact=run.compiled)


def _vela_version() -> str:
    try:
        return metadata.version("ethos-u-vela")
    except metadata.PackageNotFoundError:
        return "unknown"


def _cpu_outputs(compiled: Graph) -> set[str]:
    """Names of tensors written by the ops Vela left on the CPU."""
    return {compiled.tensors[t].name for op in compiled.ops
            if not (op.op == "CUSTOM" and op.custom_code == "ethos-u")
            for t in op.outputs if t >= 0}


def _ethos_u_ops(compiled: Graph) -> int:
    return sum(op.op == "CUSTOM" and op.custom_code == "ethos-u" for op in compiled.ops)


def _op_placement(graph: Graph, op, cpu_names: set[str], reasons: dict[str, str]) -> OpPlacement:
    names = [graph.tensors[t].name for t in op.outputs if t >= 0]
    if op.subgraph == 0 and not any(n in cpu_names for n in names):
        return OpPlacement(op.index, op.op, UNIT, subgraph=op.subgraph)
    reason = next((reasons[n] for n in names if n in reasons), NO_REASON)
    if op.subgraph:
        reason = MAIN_GRAPH_ONLY
    short = f"{op.op}: {_TRAILING_TENSOR.sub('', reason.split(' - ')[0])}"
    return OpPlacement(op.index, op.op, CPU, f"Vela: {reason}", _rewrite(op.op, reason),
                       VELA_RULE, short, op.subgraph)


def _rewrite(op_name: str, reason: str) -> str:
    """The rewrites.toml text that fits Vela's reason for keeping ``op_name`` on the CPU."""
    if "Unsupported opType" in reason:
        return rewrites.replacement("ethos-u", TITLE, op_name)
    for fragment, rule in REWRITE_RULES:
        if fragment in reason:
            return rewrites.rule_text(rule, op_name, TITLE)
    return GENERIC_REWRITE


def _npu_partitions(graph: Graph, ops: tuple[OpPlacement, ...]) -> tuple[tuple[int, ...], ...]:
    """Connected NPU regions of the main graph (Vela emits one ethos-u op per region)."""
    npu = {op.index for op in ops if op.unit == UNIT}
    subsets = independent_subsets(graph.ops_in_subgraph(0), npu)
    return tuple(s.ops for s in subsets if s.delegated)


def _figures(summary: dict[str, str]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for column, (name, scale) in FIGURES.items():
        try:
            value = float(summary[column]) * scale
        except (KeyError, ValueError):
            value = math.nan
        figures[name] = round(value, 6) if math.isfinite(value) else None
    return figures


def _failed(graph: Graph, accelerator: str, settings: dict, error: str) -> Placement:
    ops = tuple(OpPlacement(op.index, op.op, CPU, error, "", VELA_RULE, error, op.subgraph)
                for op in graph.ops)
    return Placement("ethos-u", UNIT, ops, (), device=accelerator,
                     compiler={**settings, "error": error})
