"""The affine integer grid both writers use for activations, and its error on a histogram.

TFLite (ai-edge-quantizer) and onnxruntime derive an activation's scale and zero point
from a range the same way: the range is widened to include 0, `scale = (hi - lo) /
(qmax - qmin)` and `zero_point = round(qmin - lo / scale)`. The estimators score
candidate ranges on exactly that grid.

    >>> grid = ActivationGrid.from_range(0.0, 2.55)
    >>> round(grid.scale, 4), grid.zero_point
    (0.01, -128)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeopt.calibration.observers import Histogram

MIN_SCALE = 1e-9


@dataclass(frozen=True)
class ActivationGrid:
    scale: float
    zero_point: int
    qmin: int = -128
    qmax: int = 127

    @classmethod
    def from_range(cls, lo: float, hi: float, bits: int = 8) -> ActivationGrid:
        qmin, qmax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        scale = max((hi - lo) / (qmax - qmin), MIN_SCALE)
        zero_point = int(np.clip(np.rint(qmin - lo / scale), qmin, qmax))
        return cls(scale, zero_point, qmin, qmax)

    @property
    def low(self) -> float:
        return self.scale * (self.qmin - self.zero_point)

    @property
    def high(self) -> float:
        return self.scale * (self.qmax - self.zero_point)

    def fake_quant(self, x: np.ndarray) -> np.ndarray:
        q = np.clip(np.rint(x / self.scale) + self.zero_point, self.qmin, self.qmax)
        return (q - self.zero_point) * self.scale


def range_error(hist: Histogram, lo: float, hi: float, bits: int = 8) -> float:
    """Expected squared error per value of quantizing the histogram's values on [lo, hi].

    Values inside the grid carry rounding noise scale^2 / 12, values outside carry their
    clipping distance squared; exact zeros are representable and cost nothing.
    """
    return float(range_errors(hist, np.array([lo]), np.array([hi]), bits)[0])


def range_errors(hist: Histogram, lows: np.ndarray, highs: np.ndarray,
                 bits: int = 8) -> np.ndarray:
    """`range_error` for many candidate ranges at once (vectorised over candidates)."""
    levels = (1 << bits) - 1
    lows, highs = np.minimum(lows, 0.0), np.maximum(highs, 0.0)
    scales = np.maximum((highs - lows) / levels, MIN_SCALE)
    zero_points = np.rint(-(1 << (bits - 1)) - lows / scales)
    grid_lo = scales * (-(1 << (bits - 1)) - zero_points)
    grid_hi = scales * ((1 << (bits - 1)) - 1 - zero_points)
    counts, centers = _counts_without_zeros(hist)
    c = centers[None, :]
    clipped = np.clip(c, grid_lo[:, None], grid_hi[:, None])
    clip_err = (c - clipped) ** 2
    inside = clip_err == 0
    per_bin = np.where(inside, (scales[:, None] ** 2) / 12.0, clip_err + hist.width ** 2 / 12)
    total = max(hist.total, 1.0)
    return per_bin @ counts / total


def _counts_without_zeros(hist: Histogram) -> tuple[np.ndarray, np.ndarray]:
    counts = hist.counts.copy()
    if hist.zeros:
        zero_bin = int(np.searchsorted(hist.edges, 0.0, side="right") - 1)
        if 0 <= zero_bin < counts.size:
            counts[zero_bin] = max(counts[zero_bin] - hist.zeros, 0.0)
    occupied = counts > 0
    return counts[occupied], hist.centers[occupied]
