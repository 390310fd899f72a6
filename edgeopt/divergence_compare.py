"""Where does a delegate's result leave the reference? Per-tensor errors, the first op past
a threshold, and the ops from there to the model's outputs.

    >>> stats = {t: TensorStats(graph.tensor(t).quantization) for t in observed}
    >>> stats[t].add(reference_value, candidate_value)        # once per sample
    >>> checks = op_checks(graph, stats, partitions, arrays=set(stats))
    >>> first = first_divergence(checks, threshold=0.01)
    >>> path_to_outputs(graph, first.index)
    [12, 13, 15]

Knows nothing of runtimes or devices: it reads `edgeopt.graph.Graph` and arrays. Errors
accumulate sample by sample, so no tensor is kept in memory beyond one run.

An op *departs* when the relative error of one of its outputs (‖candidate − reference‖ /
‖reference‖ over all samples) is above the threshold; a quantized output must also differ by
more than one quantized step somewhere, since two correct kernels may round a tie apart.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgeopt.graph import Graph, Quantization

ROUNDING_STEPS = 1          # differences up to this many steps are rounding, never departure
TINY_NORM = 1e-6            # per element: a reference this small counts as zero


class TensorStats:
    """Error figures of one tensor, accumulated over samples."""

    def __init__(self, quantization: Quantization | None):
        self.quantization = quantization
        self.ref_sq = self.diff_sq = 0.0
        self.max_abs, self.max_steps, self.steps_sum = 0.0, 0, 0.0
        self.elements = self.differing = 0
        self.nonfinite = False

    def _dequantize(self, value: np.ndarray) -> np.ndarray:
        q = self.quantization
        if q is None or value.dtype.kind not in "iu" or not q.scale:
            return value.astype(np.float64)
        scale, zero = np.asarray(q.scale, np.float64), np.asarray(q.zero_point, np.float64)
        if scale.size > 1 and q.axis is not None:
            shape = [1] * value.ndim
            shape[q.axis] = scale.size
            scale, zero = scale.reshape(shape), zero.reshape(shape)
        return (value.astype(np.float64) - zero) * scale

    def add(self, reference: np.ndarray, candidate: np.ndarray) -> None:
        reference, candidate = np.asarray(reference), np.asarray(candidate)
        if reference.shape != candidate.shape:
            self.nonfinite = True
            return
        if self.quantized(reference):
            steps = np.abs(reference.astype(np.int64) - candidate.astype(np.int64))
            self.max_steps = max(self.max_steps, int(steps.max(initial=0)))
            self.steps_sum += float(steps.sum())
        ref, cand = self._dequantize(reference), self._dequantize(candidate)
        finite = np.isfinite(ref) & np.isfinite(cand)
        if not np.array_equal(np.isfinite(ref), np.isfinite(cand)):
            self.nonfinite = True
        diff = np.where(finite, cand - ref, 0.0)
        self.ref_sq += float(np.square(np.where(finite, ref, 0.0)).sum())
        self.diff_sq += float(np.square(diff).sum())
        self.max_abs = max(self.max_abs, float(np.abs(diff).max(initial=0.0)))
        self.elements += ref.size
        self.differing += int(np.count_nonzero(diff))

    def quantized(self, value: np.ndarray) -> bool:
        return value.dtype.kind in "iu" and self.quantization is not None \
            and bool(self.quantization.scale)

    @property
    def rel_error(self) -> float:
        if self.nonfinite:
            return math.inf
        floor = TINY_NORM * math.sqrt(max(self.elements, 1))
        return math.sqrt(self.diff_sq) / max(math.sqrt(self.ref_sq), floor)

    @property
    def sqnr_db(self) -> float | None:
        """None when the tensors agree exactly (an infinite SQNR)."""
        if self.nonfinite:
            return -math.inf
        if self.diff_sq == 0:
            return None
        return 10 * math.log10(max(self.ref_sq, 1e-300) / self.diff_sq)

    def departs(self, threshold: float) -> bool:
        steps_ok = self.quantization is None or not self.quantization.scale \
            or self.max_steps > ROUNDING_STEPS or self.nonfinite
        return self.rel_error > threshold and steps_ok

    def to_json(self) -> dict:
        quantized = self.quantization is not None and bool(self.quantization.scale)
        return {"rel_error": _finite(self.rel_error), "sqnr_db": _finite(self.sqnr_db),
                "max_abs": self.max_abs,
                "max_steps": self.max_steps if quantized else None,
                "mean_steps": (self.steps_sum / max(self.elements, 1)) if quantized else None,
                "differing": self.differing / max(self.elements, 1)}


def _finite(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return "inf" if value > 0 else "-inf"


@dataclass(frozen=True)
class OpCheck:
    """One op: where it ran, its outputs' errors (None: not observable), its inputs' worst."""

    index: int
    op: str
    unit: str                                   # "cpu" or "partition N"
    outputs: tuple[tuple[int, TensorStats | None], ...]
    input_error: float | None

    @property
    def observed(self) -> bool:
        return all(stats is not None for _, stats in self.outputs)

    def worst(self) -> tuple[int, TensorStats] | None:
        seen = [(t, s) for t, s in self.outputs if s is not None]
        return max(seen, key=lambda ts: ts[1].rel_error) if seen else None

    def departs(self, threshold: float) -> bool:
        return any(s is not None and s.departs(threshold) for _, s in self.outputs)


def producers(graph: Graph) -> dict[int, int]:
    """tensor index -> index of the op (main subgraph) that writes it."""
    return {t: op.index for op in graph.ops_in_subgraph(0) for t in op.outputs if t >= 0}


def partition_ops(graph: Graph, node_inputs: Sequence[int],
                  node_outputs: Sequence[int]) -> tuple[int, ...]:
    """The original ops one delegate node stands for: walked back from its outputs to its
    inputs (a partition is convex, so nothing else lies between)."""
    made_by, ops = producers(graph), graph.ops_in_subgraph(0)
    by_index = {op.index: op for op in ops}
    stop, found = set(int(t) for t in node_inputs), set()
    queue = deque(int(t) for t in node_outputs)
    while queue:
        tensor = queue.popleft()
        if tensor in stop or tensor not in made_by or made_by[tensor] in found:
            continue
        found.add(made_by[tensor])
        queue.extend(t for t in by_index[made_by[tensor]].inputs if t >= 0)
    return tuple(sorted(found))


def op_checks(graph: Graph, stats: dict[int, TensorStats],
              partitions: Sequence[Sequence[int]], arrays: set[int]) -> list[OpCheck]:
    """Every op of the main subgraph in execution order, with what was measured of it;
    outputs that are not arrays (`arrays` lacks them: resource handles) are left out."""
    unit = {op: f"partition {k}" for k, members in enumerate(partitions) for op in members}
    checks = []
    for op in graph.ops_in_subgraph(0):
        inputs = [stats[t].rel_error for t in op.inputs if t in stats
                  and not graph.tensor(t).is_constant]
        checks.append(OpCheck(op.index, op.op, unit.get(op.index, "cpu"),
                              tuple((t, stats.get(t)) for t in op.outputs if t in arrays),
                              max(inputs) if inputs else None))
    return checks


def first_divergence(checks: Sequence[OpCheck], threshold: float) -> OpCheck | None:
    return next((c for c in checks if c.departs(threshold)), None)


def added_error(check: OpCheck) -> float:
    """How much relative error the op adds to what its inputs already carried."""
    worst = check.worst()
    if worst is None or not math.isfinite(worst[1].rel_error):
        return math.inf if worst is not None else 0.0
    return worst[1].rel_error - (check.input_error or 0.0)


def largest_increase(checks: Sequence[OpCheck]) -> OpCheck | None:
    """The op that adds the most error: the likely culprit when drift only accumulates."""
    seen = [c for c in checks if c.worst() is not None]
    return max(seen, key=added_error) if seen else None


def path_to_outputs(graph: Graph, op_index: int) -> list[int]:
    """The shortest chain of ops from `op_index` to one that writes a model output."""
    ops = {op.index: op for op in graph.ops_in_subgraph(0)}
    consumers: dict[int, list[int]] = {}
    for op in ops.values():
        for t in op.inputs:
            consumers.setdefault(t, []).append(op.index)
    outputs, came_from = set(graph.outputs), {op_index: -1}
    queue = deque([op_index])
    while queue:
        current = queue.popleft()
        if outputs & set(ops[current].outputs):
            chain = [current]
            while came_from[chain[-1]] != -1:
                chain.append(came_from[chain[-1]])
            return chain[::-1]
        for t in ops[current].outputs:
            for nxt in consumers.get(t, []):
                if nxt not in came_from:
                    came_from[nxt] = current
                    queue.append(nxt)
    return [op_index]
