"""What one op asks of the hardware: its kind, compute dtype, arithmetic ops and bytes moved.

These features are all the estimator and the fit see of a model, so measurements of any
model (on this host or on a phone) can be turned into fit data without the model file's
runtime.

    >>> costs = op_costs(read_tflite("model.tflite"))        # doctest: +SKIP
    >>> costs[0].kind, costs[0].ops, costs[0].weight_bytes   # doctest: +SKIP
    ('conv', 21676032, 864)
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from edgeopt.graph import Graph, Op, Tensor

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "int16": 2,
               "int32": 4, "int64": 8, "bool": 1, "int4": 0.5, "float64": 8}
# Tensor dtype -> the dtype an op computes in (keys of a unit's peak_ops).
COMPUTE_DTYPE = {"int8": "int8", "uint8": "int8", "int16": "int16", "float16": "float16",
                 "bfloat16": "float16", "float32": "float32"}


@dataclass(frozen=True)
class OpCost:
    """The estimator's view of one op."""

    index: int
    op: str
    kind: str
    dtype: str               # compute dtype: int8, int16, float16, float32
    ops: float               # arithmetic operations (2 per MAC)
    macs: int
    activation_bytes: int    # run-time inputs read plus outputs written
    weight_bytes: int        # constant inputs (parameters) read
    gemm_k: int = 0          # MAC ops as a matrix product: reduction depth
    gemm_n: int = 0          # ... and output columns (output channels / units)
    weight_dtype: str = ""   # the constant filter's dtype ("int4", "int8", ...), "" if none


CONDITIONS = ("kernel", "max_in_channels")


@cache
def kind_table() -> tuple[dict[str, str], dict[str, float], tuple[tuple[str, dict], ...]]:
    """(op -> kind, kind -> ops per element, conditional kinds) from op_kinds.toml."""
    text = resources.files("edgeopt.devices").joinpath("op_kinds.toml").read_text("utf-8")
    kinds = tomllib.loads(text)["kinds"]
    conditional = tuple((kind, entry) for kind, entry in kinds.items()
                        if any(c in entry for c in CONDITIONS))
    by_op = {op: kind for kind, entry in kinds.items() for op in entry["ops"]
             if (kind, entry) not in conditional}
    per_element = {kind: float(entry.get("ops_per_element", 1)) for kind, entry in kinds.items()}
    return by_op, per_element, conditional


def _filter_shape(graph: Graph, op: Op) -> tuple[int, ...]:
    if len(op.inputs) < 2 or op.inputs[1] < 0:
        return ()
    return graph.tensors[op.inputs[1]].shape


def _matches(graph: Graph, op: Op, entry: dict) -> bool:
    if op.op not in entry["ops"]:
        return False
    shape = _filter_shape(graph, op)  # CONV_2D filter: [out, kh, kw, in]
    if len(shape) != 4:
        return False
    if "kernel" in entry and not shape[1] == shape[2] == entry["kernel"]:
        return False
    return "max_in_channels" not in entry or shape[3] <= entry["max_in_channels"]


def op_kind(graph: Graph, op: Op) -> str:
    """The op's kind in op_kinds.toml (conditional kinds first), else 'other'."""
    by_op, _, conditional = kind_table()
    for kind, entry in conditional:
        if _matches(graph, op, entry):
            return kind
    return by_op.get(op.op, "other")


def tensor_bytes(tensor: Tensor) -> int:
    """Bytes of one value of ``tensor``: its stored size for constants, else shape x dtype."""
    if tensor.is_constant:
        return tensor.size_bytes
    return math.ceil(tensor.elements * DTYPE_BYTES.get(tensor.dtype, 4))


def compute_dtype(graph: Graph, op: Op) -> str:
    """The dtype the op's arithmetic runs in: that of its first run-time (or any) input."""
    tensors = [graph.tensors[i] for i in op.inputs if i >= 0]
    live = [t for t in tensors if not t.is_constant] or tensors
    if not live and op.outputs:
        live = [graph.tensors[op.outputs[0]]]
    dtype = live[0].dtype if live else "float32"
    return COMPUTE_DTYPE.get(dtype, "float32" if dtype.startswith("float") else "int8")


def _elements(graph: Graph, indices: tuple[int, ...]) -> int:
    return max((graph.tensors[i].elements for i in indices if i >= 0), default=0)


def _element_ops(graph: Graph, op: Op, kind: str) -> float:
    """Arithmetic of a non-MAC op: elements x ops per element (pooling: x window size)."""
    elements = max(_elements(graph, op.inputs), _elements(graph, op.outputs))
    if op.op in ("AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D"):
        window = op.options.get("filter_height", 1) * op.options.get("filter_width", 1)
        return float(_elements(graph, op.outputs) * max(window, 1))
    return elements * kind_table()[1].get(kind, 1.0)


def gemm_shape(graph: Graph, op: Op) -> tuple[int, int]:
    """(K, N) of a convolution or fully connected layer seen as a matrix product."""
    shape = _filter_shape(graph, op)
    if op.op in ("CONV_2D", "TRANSPOSE_CONV") and len(shape) == 4:
        return shape[1] * shape[2] * shape[3], shape[0]
    if op.op == "FULLY_CONNECTED" and len(shape) == 2:
        return shape[1], shape[0]
    return 0, 0


def weight_dtype(graph: Graph, op: Op) -> str:
    """The dtype of a MAC op's constant filter (input 1), "" for other ops."""
    if not op.macs or len(op.inputs) < 2 or op.inputs[1] < 0:
        return ""
    filt = graph.tensors[op.inputs[1]]
    return filt.dtype if filt.is_constant else ""


def op_cost(graph: Graph, op: Op) -> OpCost:
    kind = op_kind(graph, op)
    inputs = [graph.tensors[i] for i in op.inputs if i >= 0]
    outputs = [graph.tensors[i] for i in op.outputs if i >= 0]
    weights = sum(tensor_bytes(t) for t in inputs if t.is_constant)
    activations = sum(tensor_bytes(t) for t in inputs if not t.is_constant)
    activations += sum(tensor_bytes(t) for t in outputs)
    ops = 2.0 * op.macs if op.macs else _element_ops(graph, op, kind)
    return OpCost(op.index, op.op, kind, compute_dtype(graph, op), ops, op.macs,
                  activations, weights, *gemm_shape(graph, op), weight_dtype(graph, op))


def op_costs(graph: Graph, subgraph: int | None = 0) -> list[OpCost]:
    """Costs of the ops of one subgraph (0, the main graph, by default; None: all)."""
    ops = graph.ops if subgraph is None else graph.ops_in_subgraph(subgraph)
    return [op_cost(graph, op) for op in ops]
