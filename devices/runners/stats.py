"""Latency distributions: from every run's time (host), or from benchmark_model's summary.

    >>> summarize_ms([2.0, 2.1, 2.4]).median
    2.1
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

FIELDS = ("mean", "median", "p90", "p99", "min", "max", "std")


@dataclass(frozen=True)
class Latency:
    """Milliseconds. A field a tool does not report is None (benchmark_model has no p90)."""

    mean: float
    median: float | None = None
    p90: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None
    std: float | None = None

    def to_json(self) -> dict:
        return {k: None if v is None else round(float(v), 4) for k, v in asdict(self).items()}


def summarize_ms(times_ms: Sequence[float]) -> Latency:
    """The distribution of steady runs; std is the population standard deviation."""
    if not len(times_ms):
        raise ValueError("no runs to summarize")
    t = np.asarray(times_ms, dtype=np.float64)
    p50, p90, p99 = np.percentile(t, [50, 90, 99])
    return Latency(mean=float(t.mean()), median=float(p50), p90=float(p90), p99=float(p99),
                   min=float(t.min()), max=float(t.max()), std=float(t.std()))


def relative_spread(a: float, b: float) -> float:
    """|a - b| relative to their mean: how far two measurements of one thing disagree."""
    mean = (a + b) / 2
    return abs(a - b) / mean if mean else 0.0
