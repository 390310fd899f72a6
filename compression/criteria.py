"""Channel importance criteria. They read Keras weights and activations, nothing else.

A criterion maps each source layer (Conv2D/Dense) to one score per output channel; a
cluster of tied channels scores the sum of its members' scores, each layer's scores first
divided by their mean so layers of different scale weigh alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edgeopt.compression.graph import PruneError
from edgeopt.compression.groups import ChannelGraph, ChannelGroup
from edgeopt.compression.taylor import taylor as taylor_scores

Scores = dict[str, np.ndarray]
Criterion = Callable[[ChannelGraph, Any], Scores]


def _kernel(cg: ChannelGraph, name: str) -> np.ndarray:
    """The kernel of a source layer with output channels on the first axis.

    For a SeparableConv2D that is the pointwise kernel: the one that makes its outputs.
    """
    layer = cg.model.get_layer(name)
    kernel = np.asarray(layer.pointwise_kernel if hasattr(layer, "pointwise_kernel")
                        else layer.kernel)
    return np.moveaxis(kernel, -1, 0).reshape(kernel.shape[-1], -1)


def l1_norm(cg: ChannelGraph, sample_inputs: Any = None) -> Scores:
    """Sum of absolute filter weights per output channel."""
    return {name: np.abs(_kernel(cg, name)).sum(axis=1) for name in _sources(cg)}


def l2_norm(cg: ChannelGraph, sample_inputs: Any = None) -> Scores:
    """Euclidean norm of each output channel's filter."""
    return {name: np.sqrt((_kernel(cg, name) ** 2).sum(axis=1)) for name in _sources(cg)}


def bn_scale(cg: ChannelGraph, sample_inputs: Any = None) -> Scores:
    """|gamma| of the BatchNormalization right after each source; L2 norm where there is none."""
    scores = l2_norm(cg)
    for node in cg.graph.nodes:
        if node.class_name == "BatchNormalization" and node.inbound[0] in scores:
            layer = cg.model.get_layer(node.name)
            if layer.gamma is not None:
                scores[node.inbound[0]] = np.abs(np.asarray(layer.gamma))
    return scores


def mean_activation(cg: ChannelGraph, sample_inputs: Any) -> Scores:
    """Mean |output| of each source channel over the sample inputs (data-driven)."""
    import keras

    if sample_inputs is None:
        raise PruneError("the 'activation' criterion needs sample inputs")
    names = _sources(cg)
    probe = keras.Model(cg.model.inputs, [cg.model.get_layer(n).output for n in names])
    outputs = probe.predict(sample_inputs, verbose=0)
    outputs = outputs if isinstance(outputs, list) else [outputs]
    return {n: np.abs(o).reshape(-1, o.shape[-1]).mean(axis=0) for n, o in zip(names, outputs)}


def taylor(cg: ChannelGraph, sample_inputs: Any) -> Scores:
    """First-order Taylor importance (gradient x activation) on the sample inputs, with
    the model's own top-1 outputs as targets; see ``edgeopt.compression.taylor``."""
    return taylor_scores(cg, sample_inputs)


CRITERIA: dict[str, Criterion] = {
    "l1": l1_norm, "l2": l2_norm, "bn_scale": bn_scale, "activation": mean_activation,
    "taylor": taylor,
}


def get_criterion(criterion: str | Criterion, labels: Any = None) -> Criterion:
    """A criterion by name (``l1``, ``l2``, ``bn_scale``, ``activation``, ``taylor``) or as
    given. ``labels`` of the sample inputs feed the Taylor criterion's loss."""
    if callable(criterion):
        return criterion
    if criterion not in CRITERIA:
        raise PruneError(f"unknown pruning criterion '{criterion}' "
                         f"(choose from {', '.join(CRITERIA)})")
    if criterion == "taylor" and labels is not None:
        return lambda cg, samples: taylor_scores(cg, samples, labels)
    return CRITERIA[criterion]


def _sources(cg: ChannelGraph) -> list[str]:
    return list(dict.fromkeys(name for name, _ in cg.atoms))


def cluster_scores(group: ChannelGroup, scores: Scores) -> np.ndarray:
    """One importance per cluster of ``group`` (same order as ``group.clusters``)."""
    scale = {n: float(np.mean(s)) or 1.0 for n, s in scores.items()}
    return np.array([sum(scores[n][k] / scale[n] for n, k in members)
                     for members in group.clusters])
