"""The placement report: which unit runs each op, the partitions, the tensors that cross.

    >>> placement = place("model.tflite", "edgetpu")        # doctest: +SKIP
    >>> placement.summary_line()                             # doctest: +SKIP
    'edgetpu: 94% delegated (47/50 ops), 1 partition; top fallback: HARD_SWISH is not ...'
    >>> placement.manifest_json()                            # doctest: +SKIP
    {'delegate': 'edgetpu', 'delegated_ops': 47, 'cpu_ops': 3, 'partitions': [[0, 1, ...]]}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from edgeopt.errors import DeviceError

CPU = "cpu"
# Fallback rules whose fix `edgeopt build` can apply itself -> the fix's name.
AUTOMATIC_FIXES = {"static_shapes": "fix_dynamic_batch",
                   "float_op_in_integer_graph": "quantize_float_ops"}
# Rules that describe a consequence of partitioning rather than an op the delegate lacks.
CONSEQUENCES = frozenset({"partition_dropped", "after_first_unsupported",
                          "static_unpack_consumers", "folded_at_load"})


@dataclass(frozen=True)
class OpPlacement:
    """Where one op runs; for a CPU op, why (``reason``) and what would fix it (``rewrite``)."""

    index: int
    op: str
    unit: str
    reason: str = ""
    rewrite: str = ""
    rule: str | None = None
    short_reason: str = ""
    subgraph: int = 0
    precision: str = ""      # what a delegated op computes in when the delegate says so

    def to_json(self) -> dict[str, Any]:
        record = {"index": self.index, "op": self.op, "unit": self.unit,
                  "reason": self.reason or None, "rewrite": self.rewrite or None,
                  "rule": self.rule, "subgraph": self.subgraph}
        if self.precision:
            record["precision"] = self.precision
        return record


@dataclass(frozen=True)
class Crossing:
    """A tensor that moves between the CPU and the accelerator at a partition boundary.

    ``direction`` is ``"cpu->npu"`` (into partition ``partition``) or ``"npu->cpu"`` (out of
    it), with the accelerator's unit name; ``kind`` says whether the tensor is a model
    input/output or an intermediate result.
    """

    tensor: int
    name: str
    bytes: int
    direction: str
    partition: int
    kind: str

    def to_json(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "name": self.name, "bytes": self.bytes,
                "direction": self.direction, "partition": self.partition, "kind": self.kind}


@dataclass(frozen=True)
class Placement:
    """Per-op placement of one model on one delegate.

    ``compiler`` holds a vendor compiler's own figures (Vela: SRAM/flash use, cycles,
    inference time) and ``artifact`` the compiled model it wrote, when there is one.
    ``execution_provider`` names the onnxruntime EP for a placement of an .onnx model.
    """

    delegate: str
    unit: str
    ops: tuple[OpPlacement, ...]
    partitions: tuple[tuple[int, ...], ...]
    crossings: tuple[Crossing, ...] = ()
    notes: tuple[str, ...] = ()
    device: str | None = None
    compiler: Mapping[str, Any] | None = None
    artifact: bytes | None = field(default=None, repr=False)
    execution_provider: str | None = None

    @property
    def delegated_ops(self) -> int:
        return sum(op.unit != CPU for op in self.ops)

    @property
    def cpu_ops(self) -> int:
        return len(self.ops) - self.delegated_ops

    @property
    def fully_delegated(self) -> bool:
        return self.cpu_ops == 0

    def fallbacks(self) -> tuple[OpPlacement, ...]:
        """The ops that run on the CPU, in graph order."""
        return tuple(op for op in self.ops if op.unit == CPU)

    def top_reasons(self, limit: int = 3) -> list[tuple[str, int]]:
        """The most frequent fallback reasons with their op counts, root causes first.

        Ops that fell back only because of partitioning (a dropped partition, ops after the
        Edge TPU's first unsupported op) rank after the ops the delegate cannot run.
        """
        roots = Counter(op.short_reason or op.reason for op in self.fallbacks()
                        if op.rule not in CONSEQUENCES)
        knock_on = Counter(op.short_reason or op.reason for op in self.fallbacks()
                           if op.rule in CONSEQUENCES)
        return (roots.most_common() + knock_on.most_common())[:limit]

    def applicable_fixes(self) -> tuple[str, ...]:
        """Fixes edgeopt can apply itself for this placement's fallbacks (sorted names):
        ``fix_dynamic_batch`` (set the batch to 1), ``quantize_float_ops`` (full-integer
        conversion of float ops)."""
        return tuple(sorted({AUTOMATIC_FIXES[op.rule] for op in self.fallbacks()
                             if op.rule in AUTOMATIC_FIXES}))

    def crossing_bytes(self) -> int:
        return sum(c.bytes for c in self.crossings)

    def manifest_json(self) -> dict[str, Any]:
        """The manifest's ``placement`` object (DESIGN.md, schema_version 1)."""
        record: dict[str, Any] = {
            "delegate": self.delegate, "delegated_ops": self.delegated_ops,
            "cpu_ops": self.cpu_ops, "partitions": [list(p) for p in self.partitions]}
        if self.execution_provider:
            record["execution_provider"] = self.execution_provider
        return record

    def to_json(self) -> dict[str, Any]:
        """Manifest fields plus per-op placement, crossings, notes and compiler figures."""
        record = self.manifest_json()
        record.update(
            device=self.device, unit=self.unit,
            ops=[op.to_json() for op in self.ops],
            crossings=[c.to_json() for c in self.crossings],
            crossing_bytes=self.crossing_bytes(),
            notes=list(self.notes), applicable_fixes=list(self.applicable_fixes()),
            compiler=dict(self.compiler) if self.compiler else None)
        return record

    def summary_line(self) -> str:
        """One line for ``--device all``: delegated share, partitions, top fallback reason."""
        total = len(self.ops)
        share = 100.0 * self.delegated_ops / total if total else 0.0
        label = self.device or self.delegate
        line = (f"{label}: {share:.0f}% delegated to {self.unit} ({self.delegated_ops}/{total} "
                f"ops), {len(self.partitions)} partition{'s' if len(self.partitions) != 1 else ''}")
        top = self.top_reasons(1)
        if top:
            line += f"; top fallback: {top[0][0]} ({top[0][1]} op{'s' if top[0][1] != 1 else ''})"
        return line

    def require_full_delegation(self) -> None:
        """Raise DeviceError naming the first fallbacks when any op would run on the CPU."""
        if self.fully_delegated:
            return
        first = "; ".join(f"#{op.index} {op.op}: {op.short_reason or op.reason}"
                          for op in self.fallbacks()[:3])
        more = f" and {self.cpu_ops - 3} more" if self.cpu_ops > 3 else ""
        raise DeviceError(f"{self.cpu_ops} op(s) would fall back to the CPU on "
                          f"{self.device or self.delegate}: {first}{more}")
