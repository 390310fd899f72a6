"""A Keras 3 functional model read as a list of layer nodes in topological order.

We read the graph from ``model.get_config()`` rather than from ``layer._inbound_nodes``:
the serialized config is Keras' public, versioned format (each layer's ``inbound_nodes``
holds ``__keras_tensor__`` records with a ``keras_history`` of ``[layer, node, tensor]``),
and it is also what the pruned model is rebuilt from, so reading and rebuilding share one
source of truth. ``layer._inbound_nodes`` is private and changed shape between Keras 2 and 3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeopt.errors import ConversionError


class PruneError(ConversionError):
    """The model cannot be pruned as asked (unsupported layer, nothing to prune, ...)."""


@dataclass(frozen=True)
class LayerNode:
    """One layer of the functional graph: its name, Keras class, config and input layers."""

    name: str
    class_name: str
    config: dict
    inbound: tuple[str, ...]


@dataclass(frozen=True)
class ModelGraph:
    """Layer nodes in topological order plus the names of the model's output layers."""

    nodes: tuple[LayerNode, ...]
    outputs: tuple[str, ...]

    def node(self, name: str) -> LayerNode:
        """The node called ``name``."""
        return next(n for n in self.nodes if n.name == name)


def as_functional(model: Any) -> Any:
    """A functional view of ``model``: a Sequential model is wrapped, sharing its layers."""
    import keras

    if isinstance(model, keras.Sequential):
        if not model.built:
            raise PruneError("the Sequential model is not built: give it an Input first")
        return keras.Model(model.inputs[0], model.outputs[0], name=model.name)
    if not hasattr(model, "get_config") or "layers" not in (model.get_config() or {}):
        raise PruneError("structured pruning needs a Keras functional or Sequential model")
    return model


def _tensor_sources(obj: Any) -> list[tuple[str, int, int]]:
    """Every ``keras_history`` found in a serialized call-arguments structure."""
    if isinstance(obj, dict):
        if obj.get("class_name") == "__keras_tensor__":
            return [tuple(obj["config"]["keras_history"])]
        return [s for v in obj.values() for s in _tensor_sources(v)]
    if isinstance(obj, list | tuple):
        return [s for v in obj for s in _tensor_sources(v)]
    return []


def _inbound_names(entry: dict) -> tuple[str, ...]:
    """Input layer names of one serialized layer; refuse shared and multi-output layers."""
    calls = entry.get("inbound_nodes") or []
    if len(calls) > 1:
        raise PruneError(f"cannot prune through layer '{entry['name']}': it is called "
                         f"{len(calls)} times (shared layer)")
    sources = _tensor_sources(calls)
    if any(node != 0 or tensor != 0 for _, node, tensor in sources):
        raise PruneError(f"cannot prune through layer '{entry['name']}': its input comes "
                         "from a shared or multi-output layer")
    return tuple(name for name, _, _ in sources)


def _output_names(spec: Any) -> tuple[str, ...]:
    """Layer names in a config's ``output_layers`` (one ``[name, 0, 0]`` or a list of them)."""
    if isinstance(spec, list | tuple) and spec and isinstance(spec[0], str):
        return (spec[0],)
    return tuple(name for item in spec for name in _output_names(item))


def read_graph(model: Any) -> ModelGraph:
    """Read a functional model's layers and connections from its config.

    >>> graph = read_graph(model)            # doctest: +SKIP
    >>> [n.class_name for n in graph.nodes]  # ['InputLayer', 'Conv2D', ...]
    """
    config = model.get_config()
    nodes, seen = [], set()
    for entry in config["layers"]:
        node = LayerNode(entry["name"], entry["class_name"], entry["config"],
                         _inbound_names(entry))
        missing = [n for n in node.inbound if n not in seen]
        if missing:
            raise PruneError(f"layer '{node.name}' reads '{missing[0]}' before it is defined")
        nodes.append(node)
        seen.add(node.name)
    return ModelGraph(tuple(nodes), _output_names(config["output_layers"]))
