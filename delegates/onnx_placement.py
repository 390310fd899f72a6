"""Place an .onnx model on an onnxruntime execution provider: per node, the EP or the CPU EP.

The checks are `onnx_rules`; the partitions are the groups of supported nodes onnxruntime's
partitioner forms (`partition.independent_subsets`: topological order, one group grown at a
time, a node whose inputs wait on the other kind starts the next group, as
``CreateSupportedPartitionNodeGroups`` does). The notes give what onnxruntime's usability
checker would conclude (one partition over 75% of the nodes: use the EP) and the caveats of
the tables that neither it nor edgeopt checks.

    >>> p = place_onnx("model.onnx", "nnapi")                    # doctest: +SKIP
    >>> p = place_onnx_for_device(onnx_bytes, "snapdragon-npu")  # doctest: +SKIP
    >>> p.summary_line()                                         # doctest: +SKIP
    'snapdragon-npu: 100% delegated to npu (31/31 ops), 1 partition'
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace

from edgeopt.delegates.onnx_cost_view import folded_at_load
from edgeopt.delegates.onnx_eps import ExecutionProvider, cpu_only_note, ep_for_delegate, load_ep
from edgeopt.delegates.onnx_rules import QDQ_OPS, NodeView, evaluate
from edgeopt.delegates.partition import independent_subsets, select_partitions
from edgeopt.delegates.placement import CPU, OpPlacement, Placement
from edgeopt.delegates.rules import Verdict
from edgeopt.delegates.view import FLOAT_DTYPES, ModelIndex
from edgeopt.devices.profile import DeviceProfile, load_profile
from edgeopt.graph import Graph, Op
from edgeopt.onnx_reader import read_onnx

OnnxSource = Graph | bytes | str | os.PathLike
CPU_EP = "CPUExecutionProvider"
PARTITION_RULE = "Supported nodes must fall in a partition the EP keeps"
MAX_CAVEATS = 4
FOLDED_REASON = ("onnxruntime folds this node into an initializer when it loads the model "
                 "(Constant, Identity, constant inputs); the nodes that read it run on the CPU EP")


def place_onnx(model: OnnxSource, ep: str | ExecutionProvider) -> Placement:
    """Per-node placement of an ONNX model (a Graph, bytes or a path) on ``ep``."""
    graph = _graph(model)
    ep = load_ep(ep) if isinstance(ep, str) else ep
    index = ModelIndex.build(graph)
    folded = folded_at_load(graph)
    verdicts = {op.index: evaluate(NodeView(index, op, ep)) for op in graph.ops
                if op.index not in folded}
    partitions, dropped = _partitions(graph, ep, verdicts, folded)
    partitions = _with_folded(index, folded, partitions)
    delegated = {i for p in partitions for i in p}
    ops = tuple(_folded_placement(op, ep, op.index in delegated) if op.index in folded else
                _op_placement(index, op, ep, verdicts[op.index], dropped, delegated)
                for op in graph.ops)
    placement = Placement(delegate=f"onnxruntime-{ep.name}", unit=ep.unit, ops=ops,
                          partitions=tuple(partitions), execution_provider=ep.provider)
    notes = _ep_notes(graph, ep, placement, folded) + _if_fixed(graph, ep, placement)
    return _with_notes(placement, notes)


def _if_fixed(graph: Graph, ep: ExecutionProvider, placement: Placement) -> tuple[str, ...]:
    """What the EP would take with the model's shapes fixed (the checker's second pass)."""
    if not any(op.rule == "fixed_input_shapes" for op in placement.ops):
        return ()
    fixed = place_onnx(graph, replace(ep, static_shapes=False))
    return (f"{sum(op.rule == 'fixed_input_shapes' for op in placement.ops)} node(s) stay on "
            f"the CPU EP for a shape that is not fixed; with fixed shapes (python -m "
            f"onnxruntime.tools.make_dynamic_shape_fixed) {fixed.delegated_ops}/"
            f"{len(fixed.ops)} nodes would run on {ep.provider} in {len(fixed.partitions)} "
            f"partition(s)",)


def place_onnx_for_device(model: OnnxSource, profile: DeviceProfile | str) -> Placement:
    """Placement on the EP that runs .onnx models on ``profile`` (CPU EP when none does)."""
    if isinstance(profile, str):
        profile = load_profile(profile)
    ep = ep_for_delegate(profile.delegate)
    if ep is None:
        placement = cpu_placement(_graph(model), cpu_only_note(profile.delegate) or
                                  f"onnxruntime has no execution provider for "
                                  f"{profile.delegate}")
    else:
        placement = place_onnx(model, ep)
    return _with_notes(placement, (), device=profile.name)


def cpu_placement(graph: Graph, why: str) -> Placement:
    """Every node on onnxruntime's CPU EP, each with ``why``."""
    ops = tuple(OpPlacement(op.index, op.op, CPU, why, rule="no_execution_provider",
                            short_reason=why, subgraph=op.subgraph) for op in graph.ops)
    return Placement(delegate="onnxruntime-cpu", unit=CPU, ops=ops, partitions=(),
                     notes=(why,), execution_provider=CPU_EP)


def _graph(model: OnnxSource) -> Graph:
    return model if isinstance(model, Graph) else read_onnx(
        bytes(model) if isinstance(model, (bytes, bytearray, memoryview)) else model)


def _with_notes(placement: Placement, notes: tuple[str, ...], device: str | None = None
                ) -> Placement:
    return Placement(placement.delegate, placement.unit, placement.ops, placement.partitions,
                     placement.crossings, placement.notes + notes,
                     device or placement.device, placement.compiler, placement.artifact,
                     placement.execution_provider)


def _partitions(graph: Graph, ep: ExecutionProvider, verdicts: Mapping[int, Verdict],
                folded: set[int]) -> tuple[list[tuple[int, ...]], dict[int, Verdict]]:
    """The partitions of the nodes left after loading (folded nodes are initializers)."""
    ops = [op for op in graph.ops_in_subgraph(0) if op.index not in folded]
    supported = {op.index for op in ops if verdicts[op.index].ok}
    chosen, rejected = select_partitions(independent_subsets(ops, supported),
                                         ep.max_partitions)
    dropped = {i: Verdict(False, "partition_dropped", PARTITION_RULE, why)
               for members, why in rejected for i in members}
    return chosen, dropped


def _with_folded(index: ModelIndex, folded: set[int], partitions: list[tuple[int, ...]]
                 ) -> list[tuple[int, ...]]:
    """Each folded node joins the partition of the first node that reads it there."""
    where = {i: k for k, members in enumerate(partitions) for i in members}
    grown = [list(p) for p in partitions]
    for node in sorted(folded, reverse=True):  # consumers of a folded chain come later
        readers = [c for t in index.graph.ops[node].outputs if t >= 0
                   for c in index.consumers.get(t, ())]
        home = next((where[c] for c in readers if c in where), None)
        if home is not None:
            grown[home].append(node)
            where[node] = home
    return [tuple(sorted(p)) for p in grown]


def _folded_placement(op: Op, ep: ExecutionProvider, with_ep: bool) -> OpPlacement:
    if with_ep:
        return OpPlacement(op.index, op.op, ep.unit, subgraph=op.subgraph)
    return OpPlacement(op.index, op.op, CPU, FOLDED_REASON, "", "folded_at_load",
                       "an initializer read by CPU-EP nodes", op.subgraph)


def _op_placement(index: ModelIndex, op: Op, ep: ExecutionProvider, verdict: Verdict,
                  dropped: Mapping[int, Verdict], delegated: set[int]) -> OpPlacement:
    if op.index in delegated:
        return OpPlacement(op.index, op.op, ep.unit, subgraph=op.subgraph,
                           precision=op_precision(index, op, ep))
    if verdict.ok:
        verdict = dropped.get(op.index, Verdict(False, None, "Not delegated"))
    return OpPlacement(op.index, op.op, CPU, verdict.reason, "", verdict.rule,
                       _short_reason(verdict, op, ep), op.subgraph)


def op_precision(index: ModelIndex, op: Op, ep: ExecutionProvider) -> str:
    """What a delegated node computes in: the quantized type of a QDQ group's input, the
    EP's float precision for float nodes, else its first tensor's type."""
    graph = index.graph
    for t in op.inputs:
        producer = index.producers.get(t) if t >= 0 else None
        if producer is not None and graph.ops[producer].op == "DequantizeLinear":
            source = graph.ops[producer].inputs[0]
            return graph.tensors[source].dtype
    if op.op in QDQ_OPS:
        return graph.tensors[op.inputs[0]].dtype if op.op == "DequantizeLinear" \
            else graph.tensors[op.outputs[0]].dtype
    live = [graph.tensors[t] for t in op.inputs if t >= 0 and not graph.tensors[t].is_constant]
    dtype = live[0].dtype if live else "float32"
    return ep.float_precision if dtype in FLOAT_DTYPES else dtype


def _short_reason(verdict: Verdict, op: Op, ep: ExecutionProvider) -> str:
    short = {
        "op_in_ep_table": f"{verdict.detail} is not in {ep.title}'s op table",
        "fixed_input_shapes": "input shape is not fixed (the EP needs static shapes)",
        "input_rank": f"input above {ep.max_rank}-D",
        "data_dtypes": f"{verdict.detail.split()[0] if verdict.detail else ''} tensors, "
                       f"which the accelerator does not compute",
        "outside_qdq_group": "QDQ group, fused on the CPU EP",
        "in_main_graph": "inside a control-flow body",
        "partition_dropped": "not in a partition the EP keeps",
    }
    return short.get(verdict.rule or "", verdict.constraint)


def _ep_notes(graph: Graph, ep: ExecutionProvider, placement: Placement, folded: set[int]
              ) -> tuple[str, ...]:
    notes = [f"placed on {ep.title} ({ep.provider}) by its op table: "
             f"{ep.source.split(';')[0]}"]
    if folded:
        notes.append(f"{len(folded)} node(s) become initializers when onnxruntime loads the "
                     "model (Constant, Identity, constant inputs); they go with their readers")
    if ep.unit not in ("xnnpack",):
        notes.append(usability_verdict(placement, ep, folded))
    caveats = sorted({f"{op.op}: {ep.caveat(o.custom_code, o.op)}"
                      for op, o in zip(placement.ops, graph.ops)
                      if op.unit != CPU and ep.caveat(o.custom_code, o.op)})
    if caveats:
        more = f" (+{len(caveats) - MAX_CAVEATS} more)" if len(caveats) > MAX_CAVEATS else ""
        notes.append("caveats of the EP's op table that are not checked: "
                     + "; ".join(caveats[:MAX_CAVEATS]) + more)
    if ep.float_precision == "float16" and any(op.precision == "float16"
                                               for op in placement.ops):
        notes.append(f"float nodes run in fp16 on {ep.title} (its default float precision)")
    return tuple(notes)


def usability_verdict(placement: Placement, ep: ExecutionProvider,
                      folded: set[int] = frozenset()) -> str:  # type: ignore[assignment]
    """The usability checker's rule of thumb: one partition over 75% of the nodes is worth
    trying, two only above 75%, more partitions cost more in copies than they gain. Nodes
    folded at load are not counted (the checker runs on the optimized model)."""
    kept = [op for op in placement.ops if op.index not in folded]
    share = 100.0 * sum(op.unit != CPU for op in kept) / (len(kept) or 1)
    count = len(placement.partitions)
    if count == 1 and share > 75:
        verdict = "YES"
    elif (count == 1 and share > 50) or (count == 2 and share > 75):
        verdict = "MAYBE"
    else:
        verdict = "NO"
    return (f"onnxruntime's usability rule for {ep.provider}: {verdict} ({count} "
            f"partition{'s' if count != 1 else ''} covering {share:.0f}% of the nodes)")
