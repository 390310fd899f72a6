"""Activation range estimators: min-max, percentile, MSE-optimal clipping and entropy (KL).

Each estimator maps an observer's `Histogram` to a range `(lo, hi)`; they know nothing
of TFLite or ONNX. `choose_range` runs the requested one, or for `auto` all of them,
and scores every candidate by its measured quantization error on the histogram
(`quantgrid.range_errors`), keeping the smallest.

    >>> hist = observer.histogram()                      # doctest: +SKIP
    >>> choose_range(hist, "auto").method                # doctest: +SKIP
    'mse'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from edgeopt.calibration.observers import Histogram
from edgeopt.calibration.quantgrid import range_errors

Range = tuple[float, float]


@dataclass(frozen=True)
class EstimatorSettings:
    """Knobs of the estimators; defaults follow common practice (TensorRT, onnxruntime)."""

    bits: int = 8
    percentile: float = 99.99
    mse_candidates: int = 128
    kl_candidates: int = 48


@dataclass(frozen=True)
class RangeChoice:
    lo: float
    hi: float
    method: str
    error: float
    errors: dict[str, float] = field(default_factory=dict)
    candidates: dict[str, Range] = field(default_factory=dict)


def minmax(hist: Histogram, settings: EstimatorSettings) -> Range:
    return hist.min, hist.max


def percentile(hist: Histogram, settings: EstimatorSettings) -> Range:
    """The central `percentile`% of values; one-sided for non-negative tensors."""
    cdf = np.cumsum(hist.counts) / max(hist.total, 1.0)
    tail = (100.0 - settings.percentile) / 100.0
    hi = float(np.interp(1.0 - tail, cdf, hist.edges[1:]))
    lo = hist.min if hist.min >= 0 else float(np.interp(tail, cdf, hist.edges[1:]))
    return max(lo, hist.min), min(max(hi, lo), hist.max)


def mse(hist: Histogram, settings: EstimatorSettings) -> Range:
    """The clipping range with the smallest expected squared error on the histogram."""
    alphas = _alphas(settings.mse_candidates)
    lows, highs = hist.min * alphas, hist.max * alphas
    errors = range_errors(hist, lows, highs, settings.bits)
    best = int(np.argmin(errors))
    lo, hi = float(lows[best]), float(highs[best])
    if hist.min < 0 < hist.max:  # refine each side with the other one fixed
        errors = range_errors(hist, np.full_like(alphas, lo), hist.max * alphas, settings.bits)
        hi = float(hist.max * alphas[int(np.argmin(errors))])
        errors = range_errors(hist, hist.min * alphas, np.full_like(alphas, hi), settings.bits)
        lo = float(hist.min * alphas[int(np.argmin(errors))])
    return lo, hi


def entropy(hist: Histogram, settings: EstimatorSettings) -> Range:
    """TensorRT-style KL calibration: the range whose quantized histogram keeps the most
    information about the full one (clipped mass counts against a candidate)."""
    levels = (1 << settings.bits) - 1
    counts = _without_exact_zeros(hist)
    occupied = np.flatnonzero(counts)
    if occupied.size == 0:
        return hist.min, hist.max
    first, last = int(occupied[0]), int(occupied[-1]) + 1
    zero = int(np.clip(np.searchsorted(hist.edges, 0.0, side="right") - 1, first, last))
    best, best_kl = (first, last), np.inf
    for alpha in np.linspace(1.0, 0.02, settings.kl_candidates):
        a = zero - int(round(alpha * (zero - first)))
        b = zero + int(round(alpha * (last - zero)))
        if b - a < levels:
            break
        kl = _kl_divergence(counts, a, b, levels)
        if kl < best_kl:
            best, best_kl = (a, b), kl
    lo = max(float(hist.edges[best[0]]), hist.min)
    return lo, min(float(hist.edges[best[1]]), hist.max)


def _without_exact_zeros(hist: Histogram) -> np.ndarray:
    """Exact zeros (ReLU's spike) are representable: they must not steer the KL search."""
    counts = hist.counts.copy()
    zero_bin = int(np.searchsorted(hist.edges, 0.0, side="right") - 1)
    if hist.zeros and 0 <= zero_bin < counts.size:
        counts[zero_bin] = max(counts[zero_bin] - hist.zeros, 0.0)
    return counts


def _alphas(count: int) -> np.ndarray:
    fine = np.linspace(0.05, 1.0, count - count // 4)
    coarse = np.geomspace(1e-3, 0.05, count // 4, endpoint=False)
    return np.concatenate([coarse, fine])


def _kl_divergence(counts: np.ndarray, a: int, b: int, levels: int) -> float:
    inside = counts[a:b].astype(np.float64)
    reference = inside.copy()
    reference[0] += counts[:a].sum()
    reference[-1] += counts[b:].sum()
    starts = np.linspace(0, b - a, levels + 1).astype(np.int64)[:-1]
    starts = np.unique(starts)
    group_mass = np.add.reduceat(inside, starts)
    group_nonzero = np.add.reduceat((inside > 0).astype(np.float64), starts)
    per_bin = np.divide(group_mass, group_nonzero, out=np.zeros_like(group_mass),
                        where=group_nonzero > 0)
    sizes = np.diff(np.append(starts, b - a))
    candidate = np.repeat(per_bin, sizes) * (inside > 0)
    p = reference / reference.sum()
    q = candidate / max(candidate.sum(), 1e-12)
    mask = p > 0
    q = np.where(q[mask] > 0, q[mask], 1e-12)
    return float(np.sum(p[mask] * np.log(p[mask] / q)))


ESTIMATORS: dict[str, Callable[[Histogram, EstimatorSettings], Range]] = {
    "minmax": minmax,
    "percentile": percentile,
    "mse": mse,
    "entropy": entropy,
}
METHODS = (*ESTIMATORS, "auto")


def choose_range(hist: Histogram, method: str,
                 settings: EstimatorSettings | None = None) -> RangeChoice:
    """Range of one tensor by `method`, or by the candidate with the least error (`auto`)."""
    settings = settings or EstimatorSettings()
    names = list(ESTIMATORS) if method == "auto" else [method]
    ranges = {name: ESTIMATORS[name](hist, settings) for name in names}
    lows = np.array([r[0] for r in ranges.values()])
    highs = np.array([r[1] for r in ranges.values()])
    errors = dict(zip(names, range_errors(hist, lows, highs, settings.bits).tolist()))
    best = min(names, key=lambda n: (errors[n], names.index(n)))
    return RangeChoice(*ranges[best], best, errors[best], errors, ranges)
