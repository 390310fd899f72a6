"""Bound the graph an ONNX model's local functions expand to, before anything inlines them.

A model-local function may call other functions; onnx's shape inference, the checker's
function handling, onnxslim and onnxruntime all inline the calls. Forty functions that each
call the next twice expand to 2^40 nodes from a file of a few kilobytes, and inference never
returns. Each function's expanded size is counted once (callees first), so the count itself
costs one pass over the file.

    >>> check_function_expansion(onnx.load("model.onnx"), "model.onnx")
"""

from __future__ import annotations

from edgeopt.errors import ModelLoadError

# The largest edge models have some tens of thousands of nodes; a quarter million after
# inlining leaves room for big transformer exports and stops exponential expansions early.
MAX_EXPANDED_NODES = 250_000


def _subgraphs(node):
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.g
        yield from attr.graphs


def _expanded(nodes, functions: dict, sizes: dict, path: tuple) -> int:
    """Nodes `nodes` expand to, counting calls to local functions by their own expansion."""
    total = 0
    stack = [iter(nodes)]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
            continue
        key = (node.domain, node.op_type)
        total += _function_size(key, functions, sizes, path) if key in functions else 1
        stack.extend(iter(g.node) for g in _subgraphs(node))
        if total > MAX_EXPANDED_NODES:
            return total
    return total


def _function_size(key, functions: dict, sizes: dict, path: tuple) -> int:
    if key in sizes:
        return sizes[key]
    if key in path:
        chain = " -> ".join(f"{d}.{n}" if d else n for d, n in (*path, key))
        raise ModelLoadError(f"ONNX function {key[1]} calls itself ({chain}); ONNX functions "
                             "may not recurse")
    size = _expanded(functions[key].node, functions, sizes, (*path, key))
    if size > MAX_EXPANDED_NODES:
        raise ModelLoadError(f"ONNX function '{key[1]}' (domain '{key[0]}') expands to more "
                             f"than {MAX_EXPANDED_NODES:,} nodes once its calls are inlined; "
                             "refusing a model whose inlining would not finish")
    sizes[key] = size
    return size


def check_function_expansion(model, label: str) -> None:
    """Refuse a model whose graph, with every local function inlined, passes
    MAX_EXPANDED_NODES nodes, or whose functions call themselves."""
    functions = {(f.domain, f.name): f for f in model.functions}
    if not functions:
        return
    total = _expanded(model.graph.node, functions, {}, ())
    if total > MAX_EXPANDED_NODES:
        raise ModelLoadError(f"{label}: the graph expands to more than {MAX_EXPANDED_NODES:,} "
                             "nodes once its local functions are inlined; refusing it")
