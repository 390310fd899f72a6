"""Streaming activation statistics with bounded state: running min/max and a histogram.

An observer sees a tensor's values batch by batch and keeps a fixed amount of state
whatever the number of samples: the exact running min and max, counts of non-finite
values, and a histogram of at most `bins` bins on a grid of power-of-two width aligned
at zero (so that 0 is always a bin edge). When new values fall outside the grid, the
width doubles and neighbouring bins merge, as in PyTorch's and onnxruntime's histogram
observers. Large tensors feed the histogram a seeded random subsample; min and max
always see every value.

    >>> obs = TensorObserver()
    >>> obs.update(np.array([0.0, 1.0, 2.0, 3.0], np.float32))
    >>> obs.min, obs.max, obs.count
    (0.0, 3.0, 4)
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np

DEFAULT_BINS = 2048
DEFAULT_SAMPLE = 1 << 16


@dataclass(frozen=True)
class Histogram:
    """A frozen view of an observer: bin edges, counts and exact zeros in the subsample."""

    edges: np.ndarray
    counts: np.ndarray
    zeros: float
    min: float
    max: float

    @property
    def centers(self) -> np.ndarray:
        return 0.5 * (self.edges[:-1] + self.edges[1:])

    @property
    def width(self) -> float:
        return float(self.edges[1] - self.edges[0])

    @property
    def total(self) -> float:
        return float(self.counts.sum())


@dataclass
class TensorObserver:
    """Running statistics of one tensor; memory is O(bins), not O(samples)."""

    bins: int = DEFAULT_BINS
    sample_size: int = DEFAULT_SAMPLE
    seed: int = 0
    count: int = 0
    nonfinite: int = 0
    min: float = math.inf
    max: float = -math.inf
    zeros: float = 0.0
    _counts: np.ndarray | None = field(default=None, repr=False)
    _start: int = 0          # absolute index of the first bin
    _exponent: int = 0       # bin width is 2 ** exponent
    _rng: np.random.Generator | None = field(default=None, repr=False)

    def update(self, values: np.ndarray) -> None:
        """Fold a batch of values (any shape) into the statistics."""
        flat = np.asarray(values, dtype=np.float32).ravel()
        if flat.size == 0:
            return
        lo, hi = float(flat.min()), float(flat.max())
        if not (math.isfinite(lo) and math.isfinite(hi)):
            finite = np.isfinite(flat)
            self.nonfinite += int(flat.size - finite.sum())
            flat = flat[finite]
            if flat.size == 0:
                return
            lo, hi = float(flat.min()), float(flat.max())
        self.count += flat.size
        self.min, self.max = min(self.min, lo), max(self.max, hi)
        sample = self._subsample(flat)
        self.zeros += float(np.count_nonzero(sample == 0))
        self._add(sample, lo, hi)

    def histogram(self) -> Histogram:
        """The histogram so far; raises ValueError before the first finite value."""
        if self._counts is None:
            raise ValueError("no finite values observed")
        width = 2.0 ** self._exponent
        edges = (self._start + np.arange(self.bins + 1, dtype=np.float64)) * width
        return Histogram(edges, self._counts.copy(), self.zeros, self.min, self.max)

    @property
    def constant(self) -> bool:
        return self.count > 0 and self.min == self.max

    def _subsample(self, flat: np.ndarray) -> np.ndarray:
        if flat.size <= self.sample_size:
            return flat
        if self._rng is None:
            self._rng = np.random.default_rng(self.seed)
        return flat[self._rng.integers(0, flat.size, self.sample_size)]

    def _add(self, sample: np.ndarray, lo: float, hi: float) -> None:
        if self._counts is None:
            self._init_grid(lo, hi)
        self._fit(lo, hi)
        width = 2.0 ** self._exponent
        index = np.floor(sample.astype(np.float64) / width).astype(np.int64) - self._start
        np.clip(index, 0, self.bins - 1, out=index)
        self._counts += np.bincount(index, minlength=self.bins)[: self.bins]

    def _init_grid(self, lo: float, hi: float) -> None:
        span = hi - lo
        if span > 0:
            self._exponent = math.ceil(math.log2(span / (self.bins - 2)))
        else:
            scale = abs(lo) if lo != 0 else 1.0
            self._exponent = math.floor(math.log2(scale)) - 16
        self._start = math.floor(lo / 2.0 ** self._exponent)
        self._counts = np.zeros(self.bins, dtype=np.float64)

    def _fit(self, lo: float, hi: float) -> None:
        """Coarsen and slide the grid until [lo, hi] and everything seen so far fit."""
        while True:
            width = 2.0 ** self._exponent
            need_lo = min(math.floor(self.min / width), math.floor(lo / width))
            need_hi = max(math.floor(self.max / width), math.floor(hi / width))
            if need_hi - need_lo < self.bins:
                break
            self._coarsen()
        if need_lo >= self._start and need_hi < self._start + self.bins:
            return
        new_start = need_lo if need_lo < self._start else need_hi - self.bins + 1
        shifted = np.zeros_like(self._counts)
        occupied = np.flatnonzero(self._counts)
        if occupied.size:
            shifted[occupied + self._start - new_start] = self._counts[occupied]
        self._counts, self._start = shifted, new_start

    def _coarsen(self) -> None:
        absolute = self._start + np.arange(self.bins)
        merged = np.floor_divide(absolute, 2)
        new_start = int(merged[0])
        self._counts = np.bincount(merged - new_start, weights=self._counts,
                                   minlength=self.bins)[: self.bins]
        self._start, self._exponent = new_start, self._exponent + 1


class ObserverSet:
    """One observer per tensor name, created on first sight."""

    def __init__(self, bins: int = DEFAULT_BINS, sample_size: int = DEFAULT_SAMPLE):
        self.bins, self.sample_size = bins, sample_size
        self.observers: dict[str, TensorObserver] = {}

    def update(self, batch: dict[str, np.ndarray]) -> None:
        for name, values in batch.items():
            observer = self.observers.get(name)
            if observer is None:  # a seed from the name: the same subsample in every run
                seed = zlib.crc32(name.encode())
                observer = TensorObserver(self.bins, self.sample_size, seed)
                self.observers[name] = observer
            observer.update(values)

    def __getitem__(self, name: str) -> TensorObserver:
        return self.observers[name]

    def __contains__(self, name: str) -> bool:
        return name in self.observers

    def items(self):
        return self.observers.items()
