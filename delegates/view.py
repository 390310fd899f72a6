"""What a rule sees: one op with its tensors, constant values and neighbours in the graph.

`ModelIndex` is built once per graph (producers, consumers, small constant values);
`OpView` wraps one op of it together with the delegate's table entry for that op type and
the delegate settings (NNAPI feature level, Edge TPU runtime version, ...).

    >>> index = ModelIndex.build(graph, constants)            # doctest: +SKIP
    >>> view = OpView(index, graph.ops[0], spec, settings={})  # doctest: +SKIP
    >>> view.rank(view.input(0)), view.const(1)                # doctest: +SKIP
    (4, None)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from edgeopt.graph import Graph, Op, Tensor

QUANT_DTYPES = frozenset({"int8", "uint8", "int16", "int4"})
FLOAT_DTYPES = frozenset({"float32", "float16", "bfloat16"})
# Ops whose output is a constant unpacked at init time when their input is a constant.
UNPACK_OPS = frozenset({"DEQUANTIZE", "DENSIFY"})


@dataclass(frozen=True)
class OpSpec:
    """One row of a delegate's op table (see the delegate's TOML file)."""

    op: str
    max_version: int | None = None
    dtypes: tuple[str, ...] = ()
    rank: tuple[int, int] = (0, 6)
    checks: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class ModelIndex:
    """Graph-wide facts rules need: who produces and consumes each tensor, constant values."""

    graph: Graph
    constants: Mapping[int, tuple]
    producers: Mapping[int, int]
    consumers: Mapping[int, tuple[int, ...]]
    integer_graph: bool

    @classmethod
    def build(cls, graph: Graph, constants: Mapping[int, tuple] | None = None) -> ModelIndex:
        producers: dict[int, int] = {}
        consumers: dict[int, list[int]] = {}
        for op in graph.ops:
            for t in op.outputs:
                if t >= 0:
                    producers[t] = op.index
            for t in op.inputs:
                if t >= 0:
                    consumers.setdefault(t, []).append(op.index)
        return cls(graph, constants or {}, producers,
                   {t: tuple(ops) for t, ops in consumers.items()}, _is_integer_graph(graph))


def _is_integer_graph(graph: Graph) -> bool:
    """True when most main-graph activations are 8/16-bit quantized (a full-integer model)."""
    activations = {t for op in graph.ops_in_subgraph(0) for t in op.outputs if t >= 0}
    quantized = sum(graph.tensors[t].dtype in QUANT_DTYPES for t in activations)
    return bool(activations) and quantized * 2 > len(activations)


@dataclass(frozen=True)
class OpView:
    """One op as a rule sees it; all helpers return None rather than raise on odd models."""

    index: ModelIndex
    op: Op
    spec: OpSpec | None
    settings: Mapping[str, Any] = field(default_factory=dict)
    delegate_title: str = "the delegate"

    @property
    def name(self) -> str:
        return self.op.op

    def opt(self, key: str, default: Any = None) -> Any:
        """A builtin option of the op (``stride_w``, ``fused_activation_function``, ...)."""
        return self.op.options.get(key, default)

    def set_slice_mask(self) -> str | None:
        """``"ellipsis_mask = 1"`` for the first slice mask that is set, else None."""
        for mask in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask"):
            if self.opt(mask, 0):
                return f"{mask} = {self.opt(mask)}"
        return None

    def param(self, key: str, default: Any = None) -> Any:
        """A delegate-specific parameter from the op's table row."""
        return self.spec.params.get(key, default) if self.spec else default

    def tensor(self, index: int) -> Tensor | None:
        tensors = self.index.graph.tensors
        return tensors[index] if 0 <= index < len(tensors) else None

    def input(self, position: int) -> Tensor | None:
        """Input at ``position``; None when absent or an omitted optional input (-1)."""
        if position >= len(self.op.inputs):
            return None
        return self.tensor(self.op.inputs[position])

    def output(self, position: int = 0) -> Tensor | None:
        if position >= len(self.op.outputs):
            return None
        return self.tensor(self.op.outputs[position])

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(t for i in self.op.inputs if (t := self.tensor(i)) is not None)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return tuple(t for i in self.op.outputs if (t := self.tensor(i)) is not None)

    def is_static(self, position: int) -> bool:
        """The input is a constant, or unpacked from one (DEQUANTIZE/DENSIFY of a constant)."""
        if position >= len(self.op.inputs) or self.op.inputs[position] < 0:
            return False
        return is_static_tensor(self.index, self.op.inputs[position])

    @property
    def runtime_inputs(self) -> tuple[Tensor, ...]:
        """Inputs computed at run time (not constants, not unpacked constants)."""
        return tuple(self.tensor(t) for p, t in enumerate(self.op.inputs)
                     if t >= 0 and not self.is_static(p))

    @property
    def data_tensors(self) -> tuple[Tensor, ...]:
        """Run-time inputs and all outputs: the tensors a delegate reads and writes."""
        return self.runtime_inputs + self.outputs

    def const(self, position: int) -> tuple | None:
        """Values of a small integer constant input, None when unknown or not constant."""
        if position >= len(self.op.inputs) or self.op.inputs[position] < 0:
            return None
        return self.index.constants.get(self.op.inputs[position])

    @staticmethod
    def rank(tensor: Tensor | None) -> int:
        return len(tensor.shape) if tensor is not None else 0

    def consumers_of_outputs(self) -> tuple[int, ...]:
        return tuple(c for t in self.op.outputs for c in self.index.consumers.get(t, ()))

    def producer_op(self, position: int) -> Op | None:
        if position >= len(self.op.inputs):
            return None
        producer = self.index.producers.get(self.op.inputs[position])
        return None if producer is None else self.index.graph.ops[producer]


def is_static_tensor(index: ModelIndex, tensor_index: int) -> bool:
    """Constant, or the output of a DEQUANTIZE/DENSIFY whose input is (recursively) static."""
    tensors = index.graph.tensors
    for _ in range(8):  # chains of unpack ops are short; the bound guards against cycles
        if not 0 <= tensor_index < len(tensors):
            return False
        if tensors[tensor_index].is_constant:
            return True
        producer = index.producers.get(tensor_index)
        op = index.graph.ops[producer] if producer is not None else None
        if op is None or op.op not in UNPACK_OPS or not op.inputs:
            return False
        tensor_index = op.inputs[0]
    return False
