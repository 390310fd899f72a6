"""The partitioner (LiteRT's greedy subsets, largest-N selection, Edge TPU prefix) and the
tensors that cross partition boundaries, on hand-built graphs."""

from __future__ import annotations

from edgeopt.delegates.crossings import find_crossings, tensor_bytes
from edgeopt.delegates.partition import (
    NodeSubset,
    independent_subsets,
    prefix_partition,
    select_partitions,
)
from edgeopt.delegates.view import ModelIndex
from edgeopt.graph import Graph, Op, Tensor


def chain_with_branch() -> list[Op]:
    """0 -> 1 -> 2 -> 3 in a line, and 4 reading op 0's output (a side branch)."""
    return [Op(0, "A", 1, (0,), (1,)), Op(1, "B", 1, (1,), (2,)), Op(2, "C", 1, (2,), (3,)),
            Op(3, "D", 1, (3,), (4,)), Op(4, "E", 1, (1,), (5,))]


def test_greedy_subsets_pull_ready_ops_forward():
    """Op 4 only needs op 0's output, so it joins the first delegated subset (greedy mode)."""
    subsets = independent_subsets(chain_with_branch(), {0, 1, 3, 4})
    assert subsets == [NodeSubset(True, (0, 1, 4)), NodeSubset(False, (2,)),
                       NodeSubset(True, (3,))]


def test_subsets_respect_data_dependencies():
    """A delegated op after a CPU op cannot join the partition before that CPU op."""
    ops = [Op(0, "A", 1, (0,), (1,)), Op(1, "B", 1, (1,), (2,)), Op(2, "C", 1, (2, 1), (3,))]
    subsets = independent_subsets(ops, {0, 2})
    assert [s.ops for s in subsets] == [(0,), (1,), (2,)]


def test_select_partitions_keeps_largest_up_to_the_limit():
    subsets = independent_subsets(chain_with_branch(), {0, 1, 3, 4})
    chosen, dropped = select_partitions(subsets, max_partitions=1)
    assert chosen == [(0, 1, 4)]
    assert dropped[0][0] == (3,) and "1 largest" in dropped[0][1]


def test_select_partitions_drops_small_partitions():
    subsets = [NodeSubset(True, (0, 1, 2)), NodeSubset(False, (3,)), NodeSubset(True, (4,))]
    chosen, dropped = select_partitions(subsets, max_partitions=0, min_partition_ops=2)
    assert chosen == [(0, 1, 2)]
    assert dropped == [((4,), "partition of 1 op(s) is below the delegate's minimum of 2")]


def test_unlimited_partitions_keep_everything_in_graph_order():
    subsets = [NodeSubset(True, (5,)), NodeSubset(True, (0, 1))]
    assert select_partitions(subsets)[0] == [(0, 1), (5,)]


def test_prefix_stops_at_the_first_unsupported_op():
    taken, first = prefix_partition(chain_with_branch(), {0, 1, 3, 4})
    assert taken == (0, 1) and first.index == 2


def test_malformed_graph_does_not_loop_forever():
    """An op reading a tensor that no op ever produces before it still ends up somewhere."""
    ops = [Op(0, "A", 1, (1,), (0,)), Op(1, "B", 1, (0,), (1,))]
    subsets = independent_subsets(ops, {0, 1})
    assert sorted(i for s in subsets for i in s.ops) == [0, 1]


def test_crossings_cover_model_io_and_cpu_boundaries():
    def t(name, shape, dtype="float32", const=False):
        return Tensor(name, shape, dtype, None, const, 64 if const else 0, None)

    tensors = (t("in", (1, 8, 8, 3)), t("w", (4, 3, 3, 3), const=True), t("a", (1, 8, 8, 4)),
               t("b", (1, 8, 8, 4)), t("out", (1, 8, 8, 4), "int8"))
    ops = (Op(0, "CONV_2D", 1, (0, 1), (2,)), Op(1, "CUMSUM", 1, (2,), (3,)),
           Op(2, "QUANTIZE", 1, (3,), (4,)))
    graph = Graph("tflite", tensors, ops, (0,), (4,), 1, {})
    crossings = find_crossings(ModelIndex.build(graph), [(0,), (2,)], "npu")
    summary = [(c.name, c.direction, c.kind, c.bytes) for c in crossings]
    assert summary == [("in", "cpu->npu", "model_input", 768),
                       ("a", "npu->cpu", "internal", 1024),
                       ("b", "cpu->npu", "internal", 1024),
                       ("out", "npu->cpu", "model_output", 256)]
    assert tensor_bytes(Tensor("x", (3, 5), "int4", None, False, 0, None)) == 8
