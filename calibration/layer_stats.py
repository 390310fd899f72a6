"""Statistics of each layer's inputs, streamed: patch means (bias correction) and the
Hessian `sum(x x^T)` of the patches a layer multiplies with its weights (GPTQ).

A convolution's input is turned into its patches (im2col) in the canonical order of
the weights, `(I, kh, kw)`; a dense layer's patches are its input rows. At most
`max_rows` patches per batch are kept (seeded random choice), so the cost per batch is
bounded whatever the image size. State is `d` and `d*d` numbers per layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from edgeopt.calibration.graphspec import CalibGraph, ConvGeometry, Layer, LayerKind


def to_nchw(layer: Layer, x: np.ndarray) -> np.ndarray:
    return x.transpose(0, 3, 1, 2) if layer.input_layout == "NHWC" else x


def _pads(size: int, geo: ConvGeometry, axis: int) -> tuple[int, int]:
    if not geo.same_padding:
        return (geo.pads[axis], geo.pads[axis + 2])
    stride, dilation, kernel = geo.strides[axis], geo.dilations[axis], geo.kernel[axis]
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def conv_patches(layer: Layer, x: np.ndarray, max_rows: int,
                 rng: np.random.Generator) -> np.ndarray:
    """Rows of `(I * kh * kw)` values, one per output position (a random subset)."""
    geo = layer.geometry
    x = to_nchw(layer, x)
    (pt, pb), (pl, pr) = _pads(x.shape[2], geo, 0), _pads(x.shape[3], geo, 1)
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    kh, kw = geo.kernel
    (sh, sw), (dh, dw) = geo.strides, geo.dilations
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    windows = np.lib.stride_tricks.sliding_window_view(x, (span_h, span_w), axis=(2, 3))
    windows = windows[:, :, ::sh, ::sw, ::dh, ::dw]          # (N, C, Ho, Wo, kh, kw)
    n, c, ho, wo = windows.shape[:4]
    total = n * ho * wo
    picks = np.arange(total) if total <= max_rows else rng.choice(total, max_rows, False)
    ni, rest = np.divmod(picks, ho * wo)
    hi, wi = np.divmod(rest, wo)
    rows = windows[ni, :, hi, wi]                              # (rows, C, kh, kw)
    return rows.reshape(len(picks), c * kh * kw)


def dense_rows(x: np.ndarray, features: int, max_rows: int,
               rng: np.random.Generator) -> np.ndarray:
    """Input rows of a dense layer (TFLite and MatMul flatten leading dimensions)."""
    rows = x.reshape(-1, features)
    if len(rows) > max_rows:
        rows = rows[rng.choice(len(rows), max_rows, False)]
    return rows


@dataclass
class LayerInputStats:
    """Sum of patches and (optionally) of their outer products."""

    with_hessian: bool
    rows: int = 0
    total: np.ndarray | None = field(default=None, repr=False)
    hessian: np.ndarray | None = field(default=None, repr=False)

    def update(self, patches: np.ndarray) -> None:
        p = patches.astype(np.float32, copy=False)
        if self.total is None:
            self.total = np.zeros(p.shape[1])
            if self.with_hessian:
                self.hessian = np.zeros((p.shape[1], p.shape[1]))
        self.rows += len(p)
        self.total += p.sum(axis=0, dtype=np.float64)
        if self.with_hessian:
            self.hessian += p.T @ p  # float32 product, float64 running sum

    @property
    def mean(self) -> np.ndarray:
        return self.total / max(self.rows, 1)


class LayerStatsCollector:
    """Feeds each layer's input batches into its `LayerInputStats`."""

    def __init__(self, graph: CalibGraph, hessian_layers: set[str],
                 max_rows: int = 512, mean_rows: int = 128, seed: int = 0):
        layers = graph.layers
        self.features = {layer.name: graph.weights[layer.weight].shape[1] for layer in layers}
        self.layers: dict[str, list[Layer]] = {layer.input: [] for layer in layers}
        for layer in layers:
            self.layers[layer.input].append(layer)
        self.stats = {layer.name: LayerInputStats(layer.name in hessian_layers)
                      for layer in layers}
        self.max_rows, self.mean_rows = max_rows, mean_rows
        self.rng = np.random.default_rng(seed)

    @property
    def tensors(self) -> set[str]:
        return set(self.layers)

    def update(self, batch: dict[str, np.ndarray]) -> None:
        for tensor, layers in self.layers.items():
            if tensor not in batch:
                continue
            for layer in layers:
                self.stats[layer.name].update(self._patches(layer, batch[tensor]))

    def _patches(self, layer: Layer, x: np.ndarray) -> np.ndarray:
        rows = self.max_rows if self.stats[layer.name].with_hessian else self.mean_rows
        if layer.kind == LayerKind.DENSE:
            return dense_rows(x, self.features[layer.name], rows, self.rng)
        return conv_patches(layer, x.astype(np.float32, copy=False), rows, self.rng)
