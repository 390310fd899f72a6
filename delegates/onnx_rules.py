"""The checks an ONNX node passes to run on an onnxruntime execution provider.

Each check is ``check(view) -> (ok, detail)``; its docstring is the constraint the user
reads when it fails (the same convention as `edgeopt.delegates.rules`). They follow what
onnxruntime's mobile usability checker tests (op type in the EP's table, fixed input sizes,
the EP's rank limit) plus the element types and QDQ handling the EPs document.

    >>> view = NodeView(index, graph.ops[0], load_ep("nnapi"))   # doctest: +SKIP
    >>> evaluate(view)                                          # doctest: +SKIP
    Verdict(ok=False, rule='op_in_ep_table', constraint='The op type is in ...', detail=...)
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.delegates.onnx_eps import ExecutionProvider, qualified
from edgeopt.delegates.rules import Rule, Verdict
from edgeopt.delegates.view import ModelIndex
from edgeopt.graph import Op, Tensor

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})


@dataclass(frozen=True)
class NodeView:
    """One ONNX node as a check sees it: the node, the graph index, the EP."""

    index: ModelIndex
    op: Op
    ep: ExecutionProvider

    def tensor(self, i: int) -> Tensor:
        return self.index.graph.tensors[i]

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(self.tensor(i) for i in self.op.inputs if i >= 0)

    @property
    def data_tensors(self) -> tuple[Tensor, ...]:
        """Run-time inputs and all outputs (constants are the EP's to convert)."""
        live = tuple(t for t in self.inputs if not t.is_constant)
        return live + tuple(self.tensor(i) for i in self.op.outputs if i >= 0)

    def producer(self, tensor: int) -> Op | None:
        index = self.index.producers.get(tensor)
        return None if index is None else self.index.graph.ops[index]

    def consumers(self, tensor: int) -> list[Op]:
        graph = self.index.graph
        return [graph.ops[i] for i in self.index.consumers.get(tensor, ())]

    def quantized_dtype(self, tensor: int) -> str:
        """The type a tensor has inside a QDQ group: a float tensor a DequantizeLinear
        makes, or that only QuantizeLinear nodes read, is the quantized one to the EP."""
        graph = self.index.graph
        producer = self.producer(tensor)
        if producer is not None and producer.op == "DequantizeLinear":
            return graph.tensors[producer.inputs[0]].dtype
        users = self.consumers(tensor)
        if users and all(u.op == "QuantizeLinear" for u in users):
            return graph.tensors[users[0].outputs[0]].dtype
        return graph.tensors[tensor].dtype

    @property
    def data_dtypes(self) -> tuple[tuple[str, str], ...]:
        """(name, type as the EP computes it) of the run-time inputs and the outputs."""
        graph = self.index.graph
        live = [i for i in self.op.inputs if i >= 0 and not graph.tensors[i].is_constant]
        return tuple((graph.tensors[i].name, self.quantized_dtype(i))
                     for i in live + [o for o in self.op.outputs if o >= 0])


def op_in_ep_table(v: NodeView) -> tuple[bool, str]:
    """The op type is in the execution provider's op table (onnxruntime's supported ops)"""
    return v.ep.supports(v.op.custom_code, v.op.op), qualified(v.op.custom_code, v.op.op)


def in_main_graph(v: NodeView) -> tuple[bool, str]:
    """Nodes inside If/Loop/Scan bodies run on the CPU EP"""
    return v.op.subgraph == 0, f"in control-flow body {v.op.subgraph}"


def fixed_input_shapes(v: NodeView) -> tuple[bool, str]:
    """Every input of the node has a fixed size (the EP compiles for static shapes)"""
    if not v.ep.static_shapes:
        return True, ""
    for t in v.inputs:
        if not t.is_constant and (t.shape_signature is None or t.is_dynamic):
            shown = "unknown" if t.shape_signature is None else list(t.shape_signature)
            return False, f"'{t.name}' has shape {shown}"
    return True, ""


def input_rank(v: NodeView) -> tuple[bool, str]:
    """Inputs are within the execution provider's rank limit"""
    for t in v.inputs:
        if len(t.shape) > v.ep.max_rank:
            return False, f"'{t.name}' is {len(t.shape)}-D, the limit is {v.ep.max_rank}-D"
    return True, ""


def data_dtypes(v: NodeView) -> tuple[bool, str]:
    """Run-time tensors are of an element type the execution provider computes in (inside a
    QDQ group, the quantized type)"""
    bad = [(name, dtype) for name, dtype in v.data_dtypes if dtype not in v.ep.dtypes]
    return not bad, (f"{bad[0][1]} tensor '{bad[0][0]}'" if bad else "")


def outside_qdq_group(v: NodeView) -> tuple[bool, str]:
    """Nodes of a QDQ group stay on the CPU EP, which fuses the group into one quantized
    kernel"""
    if not v.ep.skip_qdq_groups:
        return True, ""
    if v.op.op in QDQ_OPS:
        return False, v.op.op
    fed = [i for i in v.op.inputs if i >= 0 and (p := v.producer(i)) is not None
           and p.op == "DequantizeLinear"]
    return not fed, "reads a DequantizeLinear output"


RULES = tuple(Rule(fn.__name__, fn) for fn in (  # type: ignore[arg-type]
    in_main_graph, outside_qdq_group, op_in_ep_table, fixed_input_shapes, input_rank,
    data_dtypes))


def evaluate(view: NodeView) -> Verdict:
    """The first failing check decides; every check passing delegates the node."""
    for rule in RULES:
        ok, detail = rule(view)  # type: ignore[arg-type]
        if not ok:
            return Verdict(False, rule.name, rule.constraint, detail)
    return Verdict(True)
