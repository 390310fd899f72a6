"""The ops an ONNX model can run: every node of the graph, of every subgraph (If, Loop,
Scan bodies, any graph attribute) and of every model-local function a node calls, each
function walked once however often it is called. A call of a local function is not an op
itself; its body is checked. Ops are named `domain:op_type`, the default domain as
`ai.onnx`, and looked up in `ops_onnx.toml`: standard ONNX, ai.onnx.ml and the
com.microsoft ops onnxruntime ships, minus those that run Python or vendor binaries.
Any other domain is a custom op library, refused.

    >>> onnx_ops(onnx.load("m.onnx"))               # doctest: +SKIP
    {'ai.onnx:Conv': 'node conv1', 'ai.onnx:Relu': 'node relu1', ...}
"""

from __future__ import annotations

from typing import Any

from edgeopt.op_allowlist import check_ops

_GRAPH_ATTRIBUTE = 5   # AttributeProto.GRAPH
_GRAPHS_ATTRIBUTE = 10  # AttributeProto.GRAPHS


def _subgraphs(node: Any) -> list[Any]:
    graphs = []
    for attr in node.attribute:
        if attr.type == _GRAPH_ATTRIBUTE:
            graphs.append(attr.g)
        elif attr.type == _GRAPHS_ATTRIBUTE:
            graphs.extend(attr.graphs)
    return graphs


def onnx_ops(model: Any) -> dict[str, str]:
    """`domain:op_type` -> where it first appears, over everything the model can run."""
    functions = {(f.domain, f.name): f for f in model.functions}
    ops: dict[str, str] = {}
    seen: set[tuple[str, str]] = set()
    pending: list[tuple[Any, str]] = [(node, "graph") for node in model.graph.node]
    while pending:
        node, where = pending.pop()
        key = (node.domain, node.op_type)
        label = f"node {node.name or node.op_type} of {where}"
        if key in functions:
            if key not in seen:
                seen.add(key)
                body = f"function {node.domain}:{node.op_type}"
                pending += [(inner, body) for inner in functions[key].node]
            continue
        ops.setdefault(f"{node.domain or 'ai.onnx'}:{node.op_type}", label)
        for graph in _subgraphs(node):
            pending += [(inner, f"subgraph {graph.name or '?'}") for inner in graph.node]
    return ops


def check_onnx_ops(model: Any, label: str) -> None:
    """Refuse an ONNX model holding an op outside the allowlist, naming op and node."""
    check_ops("onnx", onnx_ops(model), label)
