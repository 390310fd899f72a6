"""Cut a graph into delegate partitions the way the LiteRT runtime does.

`independent_subsets` follows ``PartitionGraphIntoIndependentNodeSubsets`` (LiteRT
``tflite/graph_info.cc``, greedy mode, the default): it walks the ops in execution order
and grows one subset at a time with every op whose inputs are ready and whose kind
(delegated or not) matches the subset's; when nothing more fits, the next subset starts.
`select_partitions` is ``GraphPartitionHelper::GetFirstNLargestPartitions``
(``tflite/delegates/utils.cc``): the largest delegated subsets first, at most
``max_partitions``, none smaller than ``min_partition_ops``. `prefix_partition` is the Edge
TPU compiler's rule: ops up to the first unsupported one.

    >>> subsets = independent_subsets(graph.ops_in_subgraph(0), supported)  # doctest: +SKIP
    >>> chosen, dropped = select_partitions(subsets, max_partitions=1)      # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from edgeopt.graph import Op


@dataclass(frozen=True)
class NodeSubset:
    """Ops, in execution order, that run together on the delegate (or together on the CPU)."""

    delegated: bool
    ops: tuple[int, ...]


def independent_subsets(ops: Sequence[Op], supported: Collection[int]) -> list[NodeSubset]:
    """Split ``ops`` (one subgraph, execution order) into alternating delegated/CPU subsets."""
    computed = {t for op in ops for t in op.outputs if t >= 0}
    ready: set[int] = set()
    pending = list(ops)
    subsets: list[NodeSubset] = []
    while pending:
        kind, taken = _grow_subset(pending, supported, computed, ready)
        if not taken:  # inputs that never become ready (a malformed graph): stop here
            subsets.append(NodeSubset(False, tuple(op.index for op in pending)))
            break
        subsets.append(NodeSubset(kind, tuple(taken)))
        done = set(taken)
        pending = [op for op in pending if op.index not in done]
    return subsets


def _grow_subset(pending: list[Op], supported: Collection[int], computed: set[int],
                 ready: set[int]) -> tuple[bool, list[int]]:
    """One epoch: keep sweeping the pending ops, adding every ready op of the epoch's kind."""
    kind: bool | None = None
    taken: list[int] = []
    taken_set: set[int] = set()
    progress = True
    while progress:
        progress = False
        for op in pending:
            if op.index in taken_set or not _inputs_ready(op, computed, ready):
                continue
            op_kind = op.index in supported
            kind = op_kind if kind is None else kind
            if op_kind != kind:
                continue
            taken.append(op.index)
            taken_set.add(op.index)
            ready.update(t for t in op.outputs if t >= 0)
            progress = True
    return bool(kind), taken


def _inputs_ready(op: Op, computed: set[int], ready: set[int]) -> bool:
    return all(t < 0 or t not in computed or t in ready for t in op.inputs)


def select_partitions(subsets: Sequence[NodeSubset], max_partitions: int = 0,
                      min_partition_ops: int = 1
                      ) -> tuple[list[tuple[int, ...]], list[tuple[tuple[int, ...], str]]]:
    """The delegated subsets the runtime keeps, and the ones it drops with the reason.

    Largest first (ties: earliest first); ``max_partitions`` 0 means no limit.
    """
    delegated = [s.ops for s in subsets if s.delegated]
    ranked = sorted(delegated, key=lambda ops: (-len(ops), ops[0]))
    chosen: list[tuple[int, ...]] = []
    dropped: list[tuple[tuple[int, ...], str]] = []
    for ops in ranked:
        if max_partitions and len(chosen) >= max_partitions:
            dropped.append((ops, f"the delegate keeps only its {max_partitions} largest "
                                 f"partition(s); this one has {len(ops)} op(s)"))
        elif len(ops) < min_partition_ops:
            dropped.append((ops, f"partition of {len(ops)} op(s) is below the delegate's "
                                 f"minimum of {min_partition_ops}"))
        else:
            chosen.append(ops)
    return sorted(chosen, key=lambda ops: ops[0]), dropped


def prefix_partition(ops: Sequence[Op], supported: Collection[int]
                     ) -> tuple[tuple[int, ...], Op | None]:
    """Ops before the first unsupported one (execution order), and that first op."""
    taken: list[int] = []
    for op in ops:
        if op.index not in supported:
            return tuple(taken), op
        taken.append(op.index)
    return tuple(taken), None
