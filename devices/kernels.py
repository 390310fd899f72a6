"""The kernels a runtime actually runs: ops fused the way delegates fuse them (nn-Meter's
kernel-level view, Zhang et al., MobiSys 2021).

A delegate does not run a TFLite graph op by op: QNN HTP, the GPU delegate and XNNPACK
fuse an activation or an element-wise chain into the convolution that produces its input
(conv + bias + relu, conv + residual add), and the HTP runs a depthwise convolution and
the pointwise one that follows as one kernel. What crosses memory is then the kernel's
inputs and outputs, not every intermediate tensor, and what each step pays once is the
kernel's dispatch, not every op's. The rules, applied in execution order:

* an element-wise op (``elementwise`` / ``transcendental`` kinds of op_kinds.toml) or a
  view (RESHAPE, SQUEEZE, EXPAND_DIMS) folds into the kernel that produced its input when
  that tensor has no other reader and is not a model output, on the same unit, and it
  writes no more elements than that tensor has (an epilogue runs on its producer's tile: a
  broadcast onto a larger tensor, squeeze-excitation's gate times the feature map, is a
  pass of its own);
* a pointwise (1x1) convolution folds into a depthwise kernel the same way (``dwsep``);
* anything else starts a kernel of its own, typed by its op kind (`KERNEL_TYPES`; a
  grouped CONV_2D with one input channel per group is a depthwise kernel, `kernel_type`).

Each kernel also counts the bytes of its parameters (``weight_bytes``): on an NPU whose
on-chip memory holds a few MB they stream from DRAM at every inference.

    >>> [(k.kind, k.ops) for k in group_kernels(graph, costs, units)]   # doctest: +SKIP
    [('conv', (0, 1)), ('dwsep', (2, 3, 4, 5)), ('dense', (6,))]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from edgeopt.devices.opcost import DTYPE_BYTES, OpCost
from edgeopt.graph import Graph, Tensor

# op kind (op_kinds.toml) -> the type of the kernel it starts
KERNEL_TYPES = {"stem": "conv", "pointwise": "conv", "conv": "conv", "depthwise": "depthwise",
                "dense": "dense", "pool": "pool", "softmax": "other", "movement": "movement",
                "elementwise": "elementwise", "transcendental": "elementwise",
                "other": "other"}
FOLDING_KINDS = ("elementwise", "transcendental")
VIEW_OPS = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS")


@dataclass(frozen=True)
class Kernel:
    """One fused kernel: its ops (the first names it), unit, compute dtype, arithmetic
    operations and the bytes it reads and writes (parameters included)."""

    kind: str
    ops: tuple[int, ...]
    unit: str
    dtype: str
    arithmetic: float
    bytes_moved: float
    gemm: tuple[int, int] = (0, 0)   # the anchor's (K, N) as a matrix product
    weight_bytes: float = 0.0        # the parameters among bytes_moved

    @property
    def anchor(self) -> int:
        return self.ops[0]


@dataclass
class _Open:
    kind: str
    ops: list[int]
    unit: str
    output: int            # the tensor its last op wrote


def kernel_type(graph: Graph, op, cost: OpCost) -> str:
    """The type of the kernel ``op`` starts: its op kind's (`KERNEL_TYPES`), except that a
    CONV_2D whose filter is one channel deep on an input of several channels is a
    depthwise convolution written as a grouped one (Keras' ConvNeXt writes its 7x7
    depthwise convolutions so): one filter per channel, a depthwise kernel's arithmetic."""
    if op.op == "CONV_2D" and len(op.inputs) > 1 and min(op.inputs[:2]) >= 0:
        data, weights = (graph.tensors[t].shape for t in op.inputs[:2])
        if len(data) == 4 and len(weights) == 4 and weights[-1] == 1 and data[-1] > 1:
            return "depthwise"
    return KERNEL_TYPES.get(cost.kind, "other")


def _readers(graph: Graph, ops) -> dict[int, int]:
    counts: dict[int, int] = {}
    for op in ops:
        for t in set(op.inputs):
            if t >= 0:
                counts[t] = counts.get(t, 0) + 1
    for t in graph.outputs:
        counts[t] = counts.get(t, 0) + 1
    return counts


def _folds(cost: OpCost, op_name: str, target: _Open) -> bool:
    if cost.kind in FOLDING_KINDS or op_name in VIEW_OPS:
        return True
    return cost.kind == "pointwise" and target.kind in ("depthwise", "dwsep")


def group_kernels(graph: Graph, costs: Sequence[OpCost], units: Sequence[str]
                  ) -> list[Kernel]:
    """The kernels of the ops in ``costs`` (one subgraph, execution order, each in the
    dtype its unit computes it in) on ``units`` (per op index)."""
    ops = {op.index: op for op in graph.ops}
    readers = _readers(graph, [ops[c.index] for c in costs])
    by_output: dict[int, _Open] = {}
    kernels: list[_Open] = []
    for cost in costs:
        op = ops[cost.index]
        unit = units[cost.index]
        target = _fold_target(graph, op, cost, unit, by_output, readers)
        if target is None:
            target = _Open(kernel_type(graph, op, cost), [], unit, -1)
            kernels.append(target)
        elif cost.kind == "pointwise":
            target.kind = "dwsep"
        target.ops.append(cost.index)
        if op.outputs:
            target.output = op.outputs[0]
            for t in op.outputs:
                by_output[t] = target
    read_by: dict[int, set[int]] = {}
    for op in graph.ops:
        for t in op.inputs:
            read_by.setdefault(t, set()).add(op.index)
    return [_close(graph, k, costs, ops, read_by) for k in kernels]


def _fold_target(graph: Graph, op, cost: OpCost, unit: str, by_output: dict[int, _Open],
                 readers: dict[int, int]) -> _Open | None:
    """The open kernel ``op`` folds into, or None. A binary op (residual add) folds into
    the latest producer of its inputs whose output it alone reads."""
    for t in sorted((i for i in op.inputs if i >= 0 and i in by_output), reverse=True,
                    key=lambda i: by_output[i].ops[-1]):
        target = by_output[t]
        if (target.output == t and target.unit == unit and readers.get(t, 0) == 1
                and len(op.outputs) == 1 and _folds(cost, op.op, target)
                and not graph.tensors[t].is_constant and _epilogue(graph, op, t)):
            return target
    return None


def _epilogue(graph: Graph, op, t: int) -> bool:
    """Whether ``op`` can run as an epilogue on tensor ``t``'s tile: it writes no more
    elements than ``t`` has. A broadcast that writes a larger tensor (squeeze-excitation's
    gate times the feature map, the gate being a 1x1 conv's output) is a pass of its own
    over the larger tensor, not part of the small kernel."""
    return graph.tensors[op.outputs[0]].elements <= graph.tensors[t].elements


def moved_bytes(tensor: Tensor, fp16: bool) -> float:
    """Bytes of one pass over ``tensor`` (float tensors at 2 bytes when run in fp16)."""
    if tensor.is_constant:
        size = float(tensor.size_bytes)
        return size / 2 if fp16 and tensor.dtype == "float32" else size
    per = DTYPE_BYTES.get(tensor.dtype, 4)
    if fp16 and tensor.dtype == "float32":
        per = 2
    return float(tensor.elements * per)


def _close(graph: Graph, k: _Open, costs: Sequence[OpCost], ops,
           read_by: dict[int, set[int]]) -> Kernel:
    members = set(k.ops)
    by_index = {c.index: c for c in costs}
    inside = {t for i in k.ops for t in ops[i].outputs}
    read = {t for i in k.ops for t in ops[i].inputs if t >= 0 and t not in inside}
    # an output leaves the kernel when an op outside it, or the model, reads it
    written = {t for t in inside if read_by.get(t, set()) - members or t in graph.outputs}
    half = by_index[k.ops[0]].dtype == "float16"   # float32 tensors run as fp16
    moved = sum(moved_bytes(graph.tensors[t], half) for t in read | written)
    weights = sum(moved_bytes(graph.tensors[t], half) for t in read
                  if graph.tensors[t].is_constant)
    anchor = by_index[k.ops[0]]
    return Kernel(k.kind, tuple(k.ops), k.unit, anchor.dtype,
                  float(sum(by_index[i].ops for i in k.ops)), moved,
                  (anchor.gemm_k, anchor.gemm_n), weights)
