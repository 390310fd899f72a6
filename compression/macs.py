"""Multiply-accumulate counts, from a built model's layer shapes or from a pruning plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeopt.compression.groups import ChannelGraph


@dataclass(frozen=True)
class MacTerm:
    """MACs of one layer = ``factor`` x kept inputs (if ``uses_input``) x kept outputs."""

    name: str
    input_name: str
    factor: int
    uses_input: bool


def _term(layer: Any, source: str = "") -> MacTerm | None:
    """The MAC term of a Conv2D, DepthwiseConv2D or Dense layer reading ``source``."""
    kind = type(layer).__name__
    if kind not in ("Conv2D", "DepthwiseConv2D", "Dense"):
        return None
    out_shape = layer.output.shape
    spatial = int(np.prod(out_shape[1:-1], dtype=np.int64))
    area = int(np.prod(layer.kernel_size)) if kind != "Dense" else 1
    return MacTerm(layer.name, source, spatial * area, kind != "DepthwiseConv2D")


def count_macs(model: Any) -> int:
    """MACs of one forward pass (batch 1) counted from the built layers' shapes."""
    total = 0
    for layer in model.layers:
        term = _term(layer)
        if term is None:
            continue
        cin = int(layer.input.shape[-1]) if term.uses_input else 1
        total += term.factor * cin * int(layer.output.shape[-1])
    return total


class MacModel:
    """MACs of ``cg.model`` after keeping the clusters marked in a ``kept`` array."""

    def __init__(self, cg: ChannelGraph) -> None:
        self.cg = cg
        terms = (_term(cg.model.get_layer(n.name), n.inbound[0] if n.inbound else "")
                 for n in cg.graph.nodes)
        self.terms = [t for t in terms if t is not None]

    def __call__(self, kept: np.ndarray) -> int:
        total = 0
        for term in self.terms:
            cout = int(self.cg.keep_mask(term.name, kept).sum())
            cin = int(self.cg.keep_mask(term.input_name, kept).sum()) if term.uses_input else 1
            total += term.factor * cin * cout
        return total
