"""Channel groups: the output channels that must be removed together.

Every output channel of a Conv2D, SeparableConv2D or Dense ("source") is an *atom*. Each
tensor carries a *layout*: for each of its channels the atom it came from, or -1 for a
channel that may not be removed (a model input). Layouts flow through the graph:
BN/activations/pooling keep them, DepthwiseConv2D repeats them ``depth_multiplier`` times,
Concatenate joins them, Flatten tiles them over the spatial positions, and Add-like merges
tie the atoms at equal positions (union-find). A softmax over channels, or a Rescaling
with per-channel constants, locks the atoms it reads, as does a model output. A *cluster*
is a set of tied atoms removed as one channel; a *group* is the set of clusters whose
sources are tied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeopt.compression.graph import LayerNode, ModelGraph, PruneError, as_functional, read_graph

SOURCES = {"Conv2D", "Dense", "SeparableConv2D"}
DEPTHWISE = {"DepthwiseConv2D"}
CHANNELWISE = {
    "BatchNormalization", "ReLU", "LeakyReLU", "PReLU", "ELU", "Dropout",
    "SpatialDropout2D", "MaxPooling2D", "AveragePooling2D", "GlobalAveragePooling2D",
    "GlobalMaxPooling2D", "ZeroPadding2D", "Cropping2D", "UpSampling2D", "Identity",
}
MERGES = {"Add", "Subtract", "Multiply", "Maximum", "Minimum", "Average"}
# A softmax normalizes over all channels: no channel that reaches it may be removed.
COUPLED_ACTIVATIONS = {"softmax", "log_softmax"}


class _UnionFind:
    """Union-find over atom ids with a sticky ``locked`` flag per root."""

    def __init__(self, size: int) -> None:
        self.parent = list(range(size))
        self.locked = [False] * size

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            self.locked[ra] = self.locked[ra] or self.locked[rb]

    def lock(self, a: int) -> None:
        self.locked[self.find(a)] = True


@dataclass(frozen=True)
class ChannelGroup:
    """Channels removed together: ``clusters[i]`` lists (source layer, channel) pairs."""

    sources: tuple[str, ...]
    clusters: tuple[tuple[tuple[str, int], ...], ...]
    roots: tuple[int, ...]

    @property
    def size(self) -> int:
        """How many channels the group has (one per cluster)."""
        return len(self.clusters)


@dataclass
class ChannelGraph:
    """The graph with a layout per layer output and the groups it implies."""

    model: Any
    graph: ModelGraph
    layouts: dict[str, np.ndarray]
    atoms: list[tuple[str, int]]
    groups: list[ChannelGroup]
    roots: np.ndarray

    def keep_mask(self, name: str, kept: np.ndarray) -> np.ndarray:
        """Which channels of layer ``name``'s output survive.

        ``kept`` is a bool array over atom ids, read at each cluster's root atom.
        """
        layout = self.layouts[name]
        safe = np.where(layout < 0, 0, layout)
        root = self.roots[safe]
        return (layout < 0) | (root < 0) | kept[np.where(root < 0, 0, root)]

    def keep_all(self) -> np.ndarray:
        """A ``kept`` array that keeps every channel."""
        return np.ones(len(self.atoms), dtype=bool)

    def input_layout(self, node: LayerNode) -> np.ndarray:
        """Layout of the (single) input of ``node``."""
        return self.layouts[node.inbound[0]]


def _unsupported(node: LayerNode, why: str = "") -> PruneError:
    detail = f": {why}" if why else ""
    return PruneError(f"cannot prune through layer '{node.name}' ({node.class_name}){detail}; "
                      "edgeopt removes no channels across it: build the model unpruned "
                      "(`edgeopt build`), or replace that layer before pruning")


def _check_channels_last(node: LayerNode) -> None:
    cfg = node.config
    if cfg.get("data_format", "channels_last") != "channels_last":
        raise _unsupported(node, "only channels_last is supported")
    if node.class_name == "Conv2D" and cfg.get("groups", 1) != 1:
        raise _unsupported(node, "grouped convolution")
    if node.class_name == "BatchNormalization" and cfg.get("axis") not in (-1, 3, [-1], [3]):
        raise _unsupported(node, "BatchNormalization over a non-channel axis")


class _Builder:
    """Propagates layouts through the graph in topological order."""

    def __init__(self, model: Any, graph: ModelGraph) -> None:
        self.model, self.graph = model, graph
        self.layouts: dict[str, np.ndarray] = {}
        self.atoms: list[tuple[str, int]] = []
        self.uf = _UnionFind(0)

    def run(self) -> None:
        sizes = [int(self.model.get_layer(n.name).output.shape[-1])
                 for n in self.graph.nodes if n.class_name in SOURCES]
        self.uf = _UnionFind(sum(sizes))
        for node in self.graph.nodes:
            self.layouts[node.name] = self._layout(node)
        for name in self.graph.outputs:
            for atom in self.layouts[name][self.layouts[name] >= 0]:
                self.uf.lock(int(atom))

    def _layout(self, node: LayerNode) -> np.ndarray:
        kind = _kind(node)
        if kind is None:
            raise _unsupported(node)
        return RULES[kind](self, node)

    def channels(self, name: str) -> int:
        return int(self.model.get_layer(name).output.shape[-1])


def _rule_input(b: _Builder, node: LayerNode) -> np.ndarray:
    return np.full(b.channels(node.name), -1, dtype=np.int64)


def _rule_source(b: _Builder, node: LayerNode) -> np.ndarray:
    _check_channels_last(node)
    start = len(b.atoms)
    b.atoms.extend((node.name, k) for k in range(b.channels(node.name)))
    return np.arange(start, len(b.atoms), dtype=np.int64)


def _rule_channelwise(b: _Builder, node: LayerNode) -> np.ndarray:
    _check_channels_last(node)
    return b.layouts[node.inbound[0]]


def _rule_lock(b: _Builder, node: LayerNode) -> np.ndarray:
    """Pass the layout through and lock every atom in it (see COUPLED_ACTIVATIONS)."""
    layout = b.layouts[node.inbound[0]]
    for atom in layout[layout >= 0]:
        b.uf.lock(int(atom))
    return layout


def _rule_activation(b: _Builder, node: LayerNode) -> np.ndarray:
    if node.config.get("activation") in COUPLED_ACTIVATIONS:
        return _rule_lock(b, node)
    return _rule_channelwise(b, node)


def _rule_rescaling(b: _Builder, node: LayerNode) -> np.ndarray:
    """Scalar scale and offset act channel by channel; per-channel lists lock the channels."""
    scalars = all(np.ndim(node.config.get(key, 0.0)) == 0 for key in ("scale", "offset"))
    return _rule_channelwise(b, node) if scalars else _rule_lock(b, node)


def _rule_onnx_node(b: _Builder, node: LayerNode) -> np.ndarray:
    """An ONNX node kept whole (converters/onnx_frozen.py): channels pass through it, or
    every channel that reaches it is locked and its outputs carry none that can go."""
    if node.config.get("passthrough"):
        return b.layouts[node.inbound[0]]
    for name in node.inbound:
        layout = b.layouts[name]
        for atom in layout[layout >= 0]:
            b.uf.lock(int(atom))
    shape = b.model.get_layer(node.name).output.shape
    return np.full(int(shape[-1]) if len(shape) > 1 else 1, -1, dtype=np.int64)


def _rule_depthwise(b: _Builder, node: LayerNode) -> np.ndarray:
    _check_channels_last(node)
    return np.repeat(b.layouts[node.inbound[0]], node.config.get("depth_multiplier", 1))


def _rule_merge(b: _Builder, node: LayerNode) -> np.ndarray:
    layouts = [b.layouts[n] for n in node.inbound]
    if len({len(lay) for lay in layouts}) != 1:
        raise _unsupported(node, "inputs broadcast over channels")
    first = layouts[0].copy()
    for other in layouts[1:]:
        for pos, (a, c) in enumerate(zip(first.tolist(), other.tolist())):
            if a >= 0 and c >= 0:
                b.uf.union(a, c)
            elif a >= 0 or c >= 0:
                b.uf.lock(max(a, c))
                first[pos] = max(a, c)
    return first


def _rule_concat(b: _Builder, node: LayerNode) -> np.ndarray:
    rank = len(b.model.get_layer(node.name).output.shape)
    if node.config.get("axis", -1) not in (-1, rank - 1):
        raise _unsupported(node, "concatenation over a non-channel axis")
    return np.concatenate([b.layouts[n] for n in node.inbound])


def _rule_flatten(b: _Builder, node: LayerNode) -> np.ndarray:
    shape = b.model.get_layer(node.inbound[0]).output.shape
    if any(d is None for d in shape[1:]):
        raise _unsupported(node, "Flatten needs static spatial dimensions")
    return np.tile(b.layouts[node.inbound[0]], int(np.prod(shape[1:-1], dtype=np.int64)))


RULES: dict[str, Callable[[_Builder, LayerNode], np.ndarray]] = {
    "input": _rule_input, "source": _rule_source, "channelwise": _rule_channelwise,
    "depthwise": _rule_depthwise, "merge": _rule_merge, "concat": _rule_concat,
    "flatten": _rule_flatten, "lock": _rule_lock, "activation": _rule_activation,
    "rescaling": _rule_rescaling, "onnx_node": _rule_onnx_node,
}


def _kind(node: LayerNode) -> str | None:
    """The propagation rule for ``node``'s class, or None when we cannot handle it."""
    table = {"InputLayer": "input", "Flatten": "flatten", "Concatenate": "concat",
             "Softmax": "lock", "Activation": "activation", "Rescaling": "rescaling",
             "OnnxOp": "onnx_node"}
    table |= dict.fromkeys(SOURCES, "source") | dict.fromkeys(DEPTHWISE, "depthwise")
    table |= dict.fromkeys(CHANNELWISE, "channelwise") | dict.fromkeys(MERGES, "merge")
    return table.get(node.class_name)


def _collect_groups(b: _Builder) -> tuple[list[ChannelGroup], np.ndarray]:
    """Clusters of free atoms, grouped by tied source layers; roots[-1 if locked]."""
    roots = np.array([-1 if b.uf.locked[b.uf.find(a)] else b.uf.find(a)
                      for a in range(len(b.atoms))], dtype=np.int64)
    clusters: dict[int, list[tuple[str, int]]] = {}
    for atom, root in enumerate(roots.tolist()):
        if root >= 0:
            clusters.setdefault(root, []).append(b.atoms[atom])
    names = sorted({name for name, _ in b.atoms})
    layer_uf, index = _UnionFind(len(names)), {n: i for i, n in enumerate(names)}
    for members in clusters.values():
        for name, _ in members[1:]:
            layer_uf.union(index[members[0][0]], index[name])
    by_group: dict[int, list] = {}
    for root, members in clusters.items():
        by_group.setdefault(layer_uf.find(index[members[0][0]]), []).append((root, members))
    groups = [_make_group(items) for items in by_group.values()]
    return groups, roots


def _make_group(items: list) -> ChannelGroup:
    items.sort(key=lambda item: item[1][0][1])
    sources = tuple(dict.fromkeys(name for _, members in items for name, _ in members))
    return ChannelGroup(sources, tuple(tuple(members) for _, members in items),
                        tuple(root for root, _ in items))


def build_channel_graph(model: Any) -> ChannelGraph:
    """Trace channels through ``model`` and group those that must be pruned together.

    >>> cg = build_channel_graph(model)          # doctest: +SKIP
    >>> [(g.sources, g.size) for g in cg.groups]  # [(('conv1', 'conv2'), 16), ...]
    """
    model = as_functional(model)
    builder = _Builder(model, read_graph(model))
    builder.run()
    groups, roots = _collect_groups(builder)
    return ChannelGraph(model, builder.graph, builder.layouts, builder.atoms, groups, roots)
