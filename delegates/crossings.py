"""Tensors that cross between the CPU and an accelerator at partition boundaries.

A partition reads every run-time tensor produced outside it (a model input or a CPU op's
output) and hands back every tensor it produces that something outside reads (or that is a
model output). Constants, and weights unpacked from constants, never cross: the delegate
owns them from initialisation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from edgeopt.delegates.placement import Crossing
from edgeopt.delegates.view import ModelIndex, is_static_tensor
from edgeopt.graph import Tensor

DTYPE_BITS = {"float32": 32, "float16": 16, "bfloat16": 16, "int8": 8, "uint8": 8, "int16": 16,
              "int32": 32, "int64": 64, "bool": 8, "int4": 4, "float64": 64, "uint16": 16,
              "uint32": 32, "complex64": 64}


def tensor_bytes(tensor: Tensor) -> int:
    """Bytes of one activation of ``tensor`` (dynamic dimensions counted as 1)."""
    return math.ceil(tensor.elements * DTYPE_BITS.get(tensor.dtype, 32) / 8)


def find_crossings(index: ModelIndex, partitions: Sequence[tuple[int, ...]],
                   unit: str) -> tuple[Crossing, ...]:
    """Every boundary tensor of every partition, inputs first, in op order."""
    crossings: list[Crossing] = []
    for number, ops in enumerate(partitions):
        crossings += _partition_inputs(index, number, ops, unit)
        crossings += _partition_outputs(index, number, ops, unit)
    return tuple(crossings)


def _subgraph_outputs(index: ModelIndex, subgraph: int) -> set[int]:
    meta = index.graph.metadata.get("subgraphs") or []
    if subgraph < len(meta):
        return set(meta[subgraph].get("outputs", ()))
    return set(index.graph.outputs) if subgraph == 0 else set()


def _partition_inputs(index: ModelIndex, number: int, ops: tuple[int, ...], unit: str):
    members, seen = set(ops), set()
    for op_index in ops:
        for t in index.graph.ops[op_index].inputs:
            if t < 0 or t in seen or is_static_tensor(index, t):
                continue
            producer = index.producers.get(t)
            if producer in members:
                continue
            seen.add(t)
            kind = "model_input" if producer is None else "internal"
            yield _crossing(index, t, f"cpu->{unit}", number, kind)


def _partition_outputs(index: ModelIndex, number: int, ops: tuple[int, ...], unit: str):
    members = set(ops)
    subgraph = index.graph.ops[ops[0]].subgraph if ops else 0
    model_outputs = _subgraph_outputs(index, subgraph)
    for op_index in ops:
        for t in index.graph.ops[op_index].outputs:
            if t < 0:
                continue
            outside = any(c not in members for c in index.consumers.get(t, ()))
            if t in model_outputs or outside:
                kind = "model_output" if t in model_outputs else "internal"
                yield _crossing(index, t, f"{unit}->cpu", number, kind)


def _crossing(index: ModelIndex, t: int, direction: str, number: int, kind: str) -> Crossing:
    tensor = index.graph.tensors[t]
    return Crossing(t, tensor.name, tensor_bytes(tensor), direction, number, kind)
