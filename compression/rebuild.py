"""Rebuild a functional model with fewer channels: edited config plus sliced weights."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from edgeopt.compression.graph import LayerNode, PruneError
from edgeopt.compression.groups import DEPTHWISE, SOURCES, ChannelGraph

WIDTH_KEY = {"Conv2D": "filters", "Dense": "units", "SeparableConv2D": "filters"}


def _slice_weights(node: LayerNode, weights: list[np.ndarray], in_mask: np.ndarray,
                   out_mask: np.ndarray) -> list[np.ndarray]:
    """The weights of ``node`` restricted to the kept input and output channels."""
    if node.class_name == "SeparableConv2D":
        return _slice_separable(weights, in_mask, out_mask)
    if node.class_name in SOURCES:
        kernel = weights[0][..., in_mask, :][..., out_mask]
        return [kernel] + [b[out_mask] for b in weights[1:]]
    if node.class_name in DEPTHWISE:
        return [weights[0][:, :, in_mask, :]] + [b[out_mask] for b in weights[1:]]
    if in_mask.all():
        return weights  # a layer whose channels are all locked keeps its weights as they are
    # per-channel weights on the last axis: BatchNormalization's vectors, PReLU's alpha
    # ((C,), or (1, 1, C) with shared_axes=[1, 2], or (H, W, C))
    if any(w.ndim == 0 or w.shape[-1] != len(in_mask) for w in weights):
        raise PruneError(f"cannot slice the weights of layer '{node.name}' ({node.class_name})")
    return [w[..., in_mask] for w in weights]


def _slice_separable(weights: list[np.ndarray], in_mask: np.ndarray,
                     out_mask: np.ndarray) -> list[np.ndarray]:
    """[depthwise (kh, kw, cin, dm), pointwise (1, 1, cin*dm, cout), bias?] sliced.

    The pointwise input of channel ``c`` is the block ``c*dm .. c*dm+dm-1``.
    """
    depthwise, pointwise, *bias = weights
    pw_in = np.repeat(in_mask, depthwise.shape[-1])
    return ([depthwise[:, :, in_mask, :], pointwise[:, :, pw_in, :][..., out_mask]]
            + [b[out_mask] for b in bias])


def _edited_config(cg: ChannelGraph, kept: np.ndarray) -> dict:
    """The model config with new widths and no stale ``build_config`` shapes."""
    config = copy.deepcopy(cg.model.get_config())
    for entry in config["layers"]:
        entry.pop("build_config", None)
        key = WIDTH_KEY.get(entry["class_name"])
        if key:
            entry["config"][key] = int(cg.keep_mask(entry["name"], kept).sum())
    return config


def rebuild(cg: ChannelGraph, kept: np.ndarray) -> Any:
    """A fresh functional model holding only the kept channels of ``cg.model``."""
    import keras

    model = keras.Model.from_config(_edited_config(cg, kept))
    for node in cg.graph.nodes:
        weights = cg.model.get_layer(node.name).get_weights()
        if not weights:
            continue
        in_mask = cg.keep_mask(node.inbound[0], kept)
        out_mask = cg.keep_mask(node.name, kept)
        model.get_layer(node.name).set_weights(_slice_weights(node, weights, in_mask, out_mask))
    return model


def masked_weights(cg: ChannelGraph, kept: np.ndarray) -> dict[str, list[np.ndarray]]:
    """Weights that make ``cg.model`` compute what the rebuilt model would.

    Zeroing the input rows of every Conv2D/Dense for removed channels is exactly removal:
    a removed channel reaches the output only through such a consumer (outputs are locked).
    A SeparableConv2D's depthwise part has no bias, so zeroing its input slices is enough.
    """
    changed = {}
    for node in cg.graph.nodes:
        if node.class_name not in SOURCES:
            continue
        in_mask = cg.keep_mask(node.inbound[0], kept)
        if in_mask.all():
            continue
        weights = cg.model.get_layer(node.name).get_weights()
        weights[0] = weights[0].copy()
        weights[0][..., ~in_mask, :] = 0.0  # for SeparableConv2D: its depthwise kernel
        changed[node.name] = weights
    return changed
