"""Multiply-accumulate counts, from a built model's layer shapes or from a pruning plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeopt.compression.graph import PruneError
from edgeopt.compression.groups import ChannelGraph


@dataclass(frozen=True)
class MacTerm:
    """MACs = ``factor`` x kept inputs (if ``uses_input``) x kept outputs (if ``uses_output``)."""

    name: str
    input_name: str
    factor: int
    uses_input: bool
    uses_output: bool = True


def _terms(layer: Any, source: str = "") -> list[MacTerm]:
    """The MAC terms of a Conv2D, DepthwiseConv2D, SeparableConv2D or Dense layer.

    A SeparableConv2D is two terms: its depthwise part scales with the inputs only, its
    pointwise part with inputs x depth multiplier x outputs.
    """
    kind = type(layer).__name__
    if kind not in ("Conv2D", "DepthwiseConv2D", "SeparableConv2D", "Dense"):
        return []
    dims = tuple(layer.output.shape[1:-1])
    if any(d is None for d in dims):  # a fully convolutional model saved without a size
        raise PruneError(f"cannot count the MACs of layer '{layer.name}': its output size "
                         f"{list(layer.output.shape)} is not fixed; give the input size with "
                         "--input-shape NAME:1,H,W,C, or save the model with a fixed input")
    spatial = int(np.prod(dims, dtype=np.int64))
    area = int(np.prod(layer.kernel_size)) if kind != "Dense" else 1
    if kind == "SeparableConv2D":
        multiplier = int(layer.depth_multiplier)
        return [MacTerm(layer.name, source, spatial * area * multiplier, True, False),
                MacTerm(layer.name, source, spatial * multiplier, True, True)]
    return [MacTerm(layer.name, source, spatial * area, kind != "DepthwiseConv2D")]


def _term_macs(term: MacTerm, cin: int, cout: int) -> int:
    return term.factor * (cin if term.uses_input else 1) * (cout if term.uses_output else 1)


def count_macs(model: Any) -> int:
    """MACs of one forward pass (batch 1) counted from the built layers' shapes."""
    total = 0
    for layer in model.layers:
        for term in _terms(layer):
            total += _term_macs(term, int(layer.input.shape[-1]), int(layer.output.shape[-1]))
    return total


class MacModel:
    """MACs of ``cg.model`` after keeping the clusters marked in a ``kept`` array."""

    def __init__(self, cg: ChannelGraph) -> None:
        self.cg = cg
        self.terms = [term for n in cg.graph.nodes
                      for term in _terms(cg.model.get_layer(n.name), (n.inbound or ("",))[0])]

    def __call__(self, kept: np.ndarray) -> int:
        total = 0
        for term in self.terms:
            cout = int(self.cg.keep_mask(term.name, kept).sum()) if term.uses_output else 1
            cin = int(self.cg.keep_mask(term.input_name, kept).sum()) if term.uses_input else 1
            total += _term_macs(term, cin, cout)
        return total
