"""`place`: run a delegate's rules over a graph, partition it, explain every CPU op.

    >>> p = place("mobilenet_int8.tflite", "edgetpu")          # doctest: +SKIP
    >>> p = place(graph, "nnapi", api_level=29)                 # doctest: +SKIP
    >>> p = place_for_device(tflite_bytes, "ethos-u55-256")     # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from edgeopt.delegates import checks, rewrites
from edgeopt.delegates.constants import small_int_constants
from edgeopt.delegates.crossings import find_crossings
from edgeopt.delegates.ethosu import place_with_vela
from edgeopt.delegates.notes import device_notes
from edgeopt.delegates.partition import independent_subsets, prefix_partition, select_partitions
from edgeopt.delegates.placement import CPU, OpPlacement, Placement
from edgeopt.delegates.registry import COMPILED, load_delegate_rules
from edgeopt.delegates.rules import DelegateRules, Verdict
from edgeopt.delegates.view import ModelIndex, OpView
from edgeopt.devices.profile import load_profile
from edgeopt.errors import ConfigError
from edgeopt.graph import Graph, Op
from edgeopt.tflite_reader import read_tflite

ModelSource = Graph | bytes | bytearray | str | os.PathLike
PARTITION_KEYS = ("max_partitions", "min_partition_ops")
VELA_SETTINGS = ("accelerator", "system_config", "memory_mode", "timeout")
PARTITION_RULE = "Delegated ops must fall in a partition the runtime keeps"
PREFIX_RULE = "The Edge TPU compiler maps only the ops before the first op it cannot run"
MAIN_GRAPH_RULE = checks.in_main_subgraph.__doc__


def place(model: ModelSource, delegate: str, **settings: Any) -> Placement:
    """Per-op placement of ``model`` (a Graph, .tflite bytes or path) on ``delegate``.

    ``settings`` are the delegate's options (``api_level`` for nnapi, ``runtime_version`` for
    edgetpu, ``precision`` for qnn-htp, ``accelerator`` for ethos-u, ...) plus
    ``max_partitions`` / ``min_partition_ops`` to override how the runtime partitions. Pass
    bytes or a path rather than a Graph when you can: some rules read constant values
    (paddings, axes) that a Graph does not carry.
    """
    if delegate in COMPILED:
        return _place_compiled(model, settings)
    graph, constants = load_model_graph(model)
    return place_with_rules(graph, delegate_rules(delegate, settings), constants)


def delegate_rules(delegate: str, settings: Mapping[str, Any]) -> DelegateRules:
    """The delegate's rules with ``settings`` applied (ConfigError for unknown ones)."""
    settings = dict(settings)
    partition_overrides = {k: settings.pop(k) for k in PARTITION_KEYS if k in settings}
    rules = load_delegate_rules(delegate).with_settings(settings)
    if partition_overrides:
        rules = replace(rules, partitioning=replace(rules.partitioning, **partition_overrides))
    return rules


def _place_compiled(model: ModelSource, settings: Mapping[str, Any]) -> Placement:
    unknown = set(settings) - set(VELA_SETTINGS)
    if unknown:
        raise ConfigError(f"delegate 'ethos-u' has no option(s) {', '.join(sorted(unknown))}; "
                          f"known: {', '.join(VELA_SETTINGS)}")
    return place_with_vela(_tflite_bytes(model), **settings)


def load_model_graph(model: ModelSource) -> tuple[Graph, Mapping[int, tuple]]:
    """The graph and its small integer constants; only .tflite graphs have rules."""
    if isinstance(model, Graph):
        graph, constants = model, {}
    else:
        source = bytes(model) if isinstance(model, (bytes, bytearray, memoryview)) else model
        graph = read_tflite(source)
        constants = small_int_constants(source)
    if graph.format != "tflite":
        raise ConfigError(f"delegate rules cover TFLite graphs; got a {graph.format} graph "
                          "(place its .tflite conversion)")
    return graph, constants


def _tflite_bytes(model: ModelSource) -> bytes:
    if isinstance(model, Graph):
        raise ConfigError("Ethos-U placement runs Vela on the .tflite file: pass its bytes or path")
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)

    read_tflite(model)  # a clear ModelLoadError for a missing or corrupt file
    with open(model, "rb") as fh:
        return fh.read()


def place_with_rules(graph: Graph, rules: DelegateRules,
                     constants: Mapping[int, tuple] | None = None) -> Placement:
    """Evaluate ``rules`` on every op, partition, and assemble the report."""
    index = ModelIndex.build(graph, constants)
    views = {op.index: _view(index, op, rules) for op in graph.ops}
    verdicts = {i: rules.evaluate(v) for i, v in views.items()}
    if rules.finalize is not None:
        verdicts = rules.finalize(rules, views, verdicts)
    partitions, dropped = _partition(graph, rules, verdicts)
    delegated = {i for p in partitions for i in p}
    ops = tuple(_op_placement(op, rules, views[op.index], verdicts[op.index], dropped, delegated)
                for op in graph.ops)
    return Placement(delegate=rules.name, unit=rules.unit, ops=ops,
                     partitions=tuple(partitions),
                     crossings=find_crossings(index, partitions, rules.unit))


def _view(index: ModelIndex, op: Op, rules: DelegateRules) -> OpView:
    key = f"CUSTOM:{op.custom_code}" if op.op == "CUSTOM" else op.op
    return OpView(index, op, rules.spec(key), rules.settings, rules.title)


def _partition(graph: Graph, rules: DelegateRules, verdicts: Mapping[int, Verdict]
               ) -> tuple[list[tuple[int, ...]], dict[int, Verdict]]:
    """Partitions per subgraph, and a verdict for every supported op left out of them."""
    policy = rules.partitioning
    partitions: list[tuple[int, ...]] = []
    dropped: dict[int, Verdict] = {}
    for subgraph in range(graph.subgraph_count):
        ops = graph.ops_in_subgraph(subgraph)
        supported = {op.index for op in ops if verdicts[op.index].ok}
        if subgraph > 0 and policy.subgraphs != "all":
            outside = Verdict(False, "in_main_subgraph", MAIN_GRAPH_RULE)
            dropped.update({i: outside for i in supported})
        elif policy.prefix_only:
            partitions += _prefix(ops, supported, dropped)
        else:
            chosen, rejected = select_partitions(independent_subsets(ops, supported),
                                                 policy.max_partitions, policy.min_partition_ops)
            partitions += chosen
            for members, why in rejected:
                dropped.update({i: Verdict(False, "partition_dropped", PARTITION_RULE, why)
                                for i in members})
    return sorted(partitions, key=lambda p: p[0]), dropped


def _prefix(ops, supported: set[int], dropped: dict[int, Verdict]) -> list[tuple[int, ...]]:
    taken, first = prefix_partition(ops, supported)
    if first is not None:
        why = f"comes after op #{first.index} ({first.op}), the first op it cannot run"
        dropped.update({op.index: Verdict(False, "after_first_unsupported", PREFIX_RULE, why)
                        for op in ops if op.index in supported and op.index not in taken})
    return [taken] if taken else []


def _op_placement(op: Op, rules: DelegateRules, view: OpView, verdict: Verdict,
                  dropped: Mapping[int, Verdict], delegated: set[int]) -> OpPlacement:
    if op.index in delegated:
        precision = rules.precision(view) if rules.precision else ""
        return OpPlacement(op.index, op.op, rules.unit, subgraph=op.subgraph,
                           precision=precision)
    if verdict.ok:
        verdict = dropped.get(op.index, Verdict(False, None, "Not delegated"))
    short = _short_reason(verdict, op, rules.title)
    rewrite = rewrites.suggest(rules.name, rules.title, verdict.rule, view)
    return OpPlacement(op.index, op.op, CPU, verdict.reason, rewrite, verdict.rule, short,
                       op.subgraph)


def _short_reason(verdict: Verdict, op: Op, title: str) -> str:
    """A reason that groups well across ops, for summaries (no tensor names)."""
    if verdict.rule == "op_in_table":
        return verdict.detail
    if verdict.rule == "partition_dropped":
        return "not in a partition the delegate keeps"
    if verdict.rule == "after_first_unsupported":
        return "after the first op the Edge TPU compiler cannot map"
    if verdict.rule == "data_dtypes" and verdict.detail:
        return f"{op.op} has no {verdict.detail.split()[0]} kernel in {title}"
    if verdict.constraint.startswith(op.op):
        return verdict.constraint
    return f"{op.op}: {verdict.constraint}"


def place_for_device(model: ModelSource, profile, **settings: Any) -> Placement:
    """Placement on a device profile's delegate (a `DeviceProfile` or a profile name).

    Ethos-U profiles run Vela with the profile's accelerator config; the others use the
    rules of ``profile.delegate``. Model-level advice (IO types the device expects, a
    dynamic batch, a float model on an integer-only NPU) goes to ``Placement.notes``.
    """
    if isinstance(profile, str):
        profile = load_profile(profile)
    if profile.delegate in COMPILED:
        settings.setdefault("accelerator", profile.name)
        placement = _place_compiled(model, settings)
        graph = load_model_graph(model)[0]
    else:
        graph, constants = load_model_graph(model)
        rules = delegate_rules(profile.delegate, settings)
        placement = place_with_rules(graph, rules, constants)
    notes = placement.notes + device_notes(graph, profile, placement)
    return replace(placement, device=profile.name, notes=notes)
