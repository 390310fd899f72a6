"""The ops a SavedModel's serving signature can run, read from `saved_model.pb` alone.

The protobuf is parsed, nothing is loaded or executed. What is checked is what edgeopt
would run: the nodes the `serving_default` outputs depend on (through data and control
inputs), then every node of every function they reach, transitively: a node's function
attributes (`f` of PartitionedCall / StatefulPartitionedCall, `then_branch` /
`else_branch` of If, `cond` / `body` of While, `branches` of Case, any other func attr)
and a node whose op is itself a library function. Also checked: the
`__saved_model_init_op` signature and the resource initializers of the object graph
(`_initialize`, `_create_resource`), which `tf.saved_model.load` runs, and the functions
of custom saveables. Not checked: the saver functions (`__inference__traced_save_*`,
`_traced_restore_*`) that every SavedModel holds, full of SaveV2, RestoreV2 and
MergeV2Checkpoints: no serving output reaches them, and edgeopt never calls them
(TensorFlow restores the variables with its own loader). For a TF1 SavedModel (no object
graph), whose loader runs the graph's restore op, that subgraph is checked too, with the
checkpoint-reading ops RestoreV2, Restore and RestoreSlice allowed there only.

    >>> serving_ops(Path("model_dir"))              # doctest: +SKIP
    {'Conv2D': 'function __inference_serve_123', 'Placeholder': 'node image', ...}
"""

from __future__ import annotations

from pathlib import Path

from edgeopt.errors import ModelLoadError, first_line
from edgeopt.op_allowlist import check_ops
from edgeopt.tf_env import quiet_tensorflow

SIGNATURE = "serving_default"
INIT_SIGNATURE = "__saved_model_init_op"
LOAD_TIME_FUNCTIONS = ("_initialize", "_create_resource")
# TF1 loaders run the ops in these collections after restoring the variables.
INIT_COLLECTIONS = ("saved_model_main_op", "legacy_init_op", "table_initializer", "init_op")
RESTORE_OPS = frozenset({"RestoreV2", "Restore", "RestoreSlice"})
MAX_PB_BYTES = 2 * 1024 ** 3  # protobuf's own limit


def read_saved_model(folder: Path):
    """The SavedModel protobuf of `folder` (binary or text), or ModelLoadError."""
    quiet_tensorflow()
    from google.protobuf import message, text_format
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    binary = folder / "saved_model.pb"
    path = binary if binary.is_file() else folder / "saved_model.pbtxt"
    try:
        if path.stat().st_size > MAX_PB_BYTES:
            raise ModelLoadError(f"{path} is over 2 GiB, more than a SavedModel can hold")
        data = path.read_bytes()
        if path is binary:
            proto.ParseFromString(data)
        else:
            text_format.Parse(data.decode("utf-8"), proto)
    except (OSError, message.DecodeError, text_format.ParseError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path} is not a readable SavedModel: {first_line(exc)}") from exc
    if not proto.meta_graphs:
        raise ModelLoadError(f"{path} holds no MetaGraph")
    return proto


def _node_name(tensor: str) -> str:
    return tensor.lstrip("^").split(":")[0]


def _functions_of(node) -> list[str]:
    names = []
    for value in node.attr.values():
        if value.HasField("func"):
            names.append(value.func.name)
        names += [f.name for f in value.list.func]
    return names


class _Walker:
    """Collects op -> where, for the nodes reachable from roots and the functions reached."""

    def __init__(self, meta_graph):
        self.nodes = {n.name: n for n in meta_graph.graph_def.node}
        self.library = {f.signature.name: f for f in meta_graph.graph_def.library.function}
        self.ops: dict[str, str] = {}
        self._seen_nodes: set[str] = set()
        self._seen_functions: set[str] = set()

    def graph_nodes(self, roots: list[str]) -> None:
        pending = [_node_name(r) for r in roots]
        while pending:
            name = pending.pop()
            if name in self._seen_nodes or name not in self.nodes:
                continue
            self._seen_nodes.add(name)
            node = self.nodes[name]
            self._visit(node, f"node {name}")
            pending += [_node_name(i) for i in node.input]

    def _visit(self, node, where: str) -> None:
        self.ops.setdefault(node.op, where)
        called = _functions_of(node) + ([node.op] if node.op in self.library else [])
        for function in called:
            self.function(function)

    def function(self, name: str) -> None:
        if name in self._seen_functions:
            return
        self._seen_functions.add(name)
        if name not in self.library:
            self.ops.setdefault(f"<missing function {name}>", f"function {name}")
            return
        for node in self.library[name].node_def:
            self._visit(node, f"function {name}")


def _signature_roots(meta_graph, key: str) -> list[str]:
    signature = meta_graph.signature_def.get(key)
    return [t.name for t in signature.outputs.values()] if signature is not None else []


def _load_time_functions(meta_graph) -> list[str]:
    names = []
    for obj in meta_graph.object_graph_def.nodes:
        for saveable in obj.saveable_objects.values():
            names += [saveable.save_function, saveable.restore_function]
        for child in obj.children:
            target = meta_graph.object_graph_def.nodes[child.node_id] \
                if child.node_id < len(meta_graph.object_graph_def.nodes) else None
            if child.local_name in LOAD_TIME_FUNCTIONS and target is not None:
                names += list(target.function.concrete_functions)
                if target.HasField("bare_concrete_function"):
                    names.append(target.bare_concrete_function.concrete_function_name)
    return [n for n in names if n]


def serving_ops(folder: Path) -> dict[str, str]:
    """op -> where it first appears, for everything loading and serving the model runs."""
    meta_graph = read_saved_model(folder).meta_graphs[0]
    if SIGNATURE not in meta_graph.signature_def:
        raise ModelLoadError(f"SavedModel {folder} has no '{SIGNATURE}' signature")
    walker = _Walker(meta_graph)
    init = [n for key in INIT_COLLECTIONS if key in meta_graph.collection_def
            for n in meta_graph.collection_def[key].node_list.value]
    walker.graph_nodes(_signature_roots(meta_graph, SIGNATURE)
                       + _signature_roots(meta_graph, INIT_SIGNATURE) + init)
    for name in _load_time_functions(meta_graph):
        walker.function(name)
    if not meta_graph.object_graph_def.nodes and meta_graph.saver_def.restore_op_name:
        restore = _Walker(meta_graph)
        restore.graph_nodes([meta_graph.saver_def.restore_op_name])
        for op, where in restore.ops.items():
            if op not in RESTORE_OPS:
                walker.ops.setdefault(op, where)
    return walker.ops


def check_saved_model_ops(folder: Path) -> None:
    """Refuse a SavedModel whose serving (or loading) can run an op outside the TensorFlow
    allowlist, naming the op and the node or function that holds it."""
    check_ops("tensorflow", serving_ops(folder), f"SavedModel {folder}")
