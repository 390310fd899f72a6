"""The interval an estimate carries: split-conformal bounds on held-out log-residuals.

A fitted profile's estimate L comes with ``interval_ms`` = [L x exp(low), L x exp(high)].
``low`` and ``high`` are finite-sample conformal quantiles of the profile's residuals
r = log(measured / estimated), one per corpus row, each from a fit that never saw that
row's model family (leave-one-family-out, LOFO): of the n sorted residuals, ``low`` is
the floor((n + 1) x 0.1)-th and ``high`` the ceil((n + 1) x 0.9)-th (split conformal's
rank, Vovk et al.; Lei et al. 2018). What it means: for a model whose family relates to
the fitted families as they relate to each other, the published latency falls below the
interval with probability at most 10% and above it at most 10% (so inside >= 80%), as
far as rows are exchangeable: a family's rows err together, and the same guarantee per new
family would need at least 9 families, which no profile has yet. It is not a promise for
an architecture unlike every family fitted, and with fewer than 9 rows the ranks fall
outside the residuals: the interval is then their range, and says less.

Why LOFO residuals: residuals of rows the fit saw (or saw the family of) are narrower
than a new family's, and an interval made of them under-covers. Why log space: a
relative error is the natural unit of latency from 0.1 ms to 100 ms, and on the corpus's
Snapdragon rows the spread of log-residuals does not depend on model size or precision
(BENCHMARKS.md), so one set of bounds scales with the estimate.

`nested_intervals` is how the benchmark checks this honestly: the interval of held-out
family F comes from residuals of the other families, each computed by a fit without F
*and* without that row's family, so F's rows shape neither the fit nor the interval.

    >>> conformal_bounds([-0.3, -0.1, 0.0, 0.1, 0.2, 0.25, 0.3, 0.4, 0.5])  # doctest: +SKIP
    (-0.3, 0.5)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

LOW, HIGH = 0.1, 0.9   # the interval's nominal p10-p90: 80% inside
# (indices of the rows to fit on, indices of the rows to predict) -> their predictions
FitPredict = Callable[[np.ndarray, np.ndarray], np.ndarray]


def conformal_bounds(residuals: Sequence[float], low: float = LOW, high: float = HIGH
                     ) -> tuple[float, float]:
    """(lower, upper) split-conformal bounds of ``residuals``: ranks floor((n+1) low) and
    ceil((n+1) high) of the sorted values, clamped to their range when n is too small."""
    r = np.sort(np.asarray(residuals, float))
    if not len(r):
        raise ValueError("no residuals to make an interval from")
    n = len(r)
    lower = min(max(math.floor((n + 1) * low), 1), n)
    upper = max(min(math.ceil((n + 1) * high), n), 1)
    return float(r[lower - 1]), float(r[upper - 1])


def lofo_predictions(families: Sequence[str], fit_predict: FitPredict,
                     without: str | None = None) -> np.ndarray:
    """Per row, its prediction by a fit on the rows of the other families (and never on
    family ``without``'s rows, whose own entries are nan)."""
    fam = np.asarray(families)
    predicted = np.full(len(fam), np.nan)
    for family in np.unique(fam):
        if family == without:
            continue
        held = np.flatnonzero(fam == family)
        train = np.flatnonzero((fam != family) & (fam != without))
        predicted[held] = fit_predict(train, held)
    return predicted


def nested_intervals(measured: Sequence[float], families: Sequence[str],
                     fit_predict: FitPredict) -> dict[str, tuple[float, float]]:
    """Per family F, the conformal log-residual bounds of the other families' rows, each
    predicted by a fit on neither F nor its own family (one fit per pair of families)."""
    fam = np.asarray(families)
    names = list(np.unique(fam))
    pairs: dict[frozenset, dict[int, float]] = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            rows = np.flatnonzero((fam == a) | (fam == b))
            train = np.flatnonzero((fam != a) & (fam != b))
            pairs[frozenset((a, b))] = dict(zip(rows.tolist(), fit_predict(train, rows)))
    y = np.asarray(measured, float)
    bounds = {}
    for f in names:
        others = np.flatnonzero(fam != f)
        if len(others) < 2:
            continue
        inner = np.array([pairs[frozenset((f, fam[i]))][i] for i in others])
        bounds[str(f)] = conformal_bounds(np.log(y[others] / inner))
    return bounds


def coverage(measured: Sequence[float], predicted: Sequence[float], families: Sequence[str],
             bounds: dict[str, tuple[float, float]]) -> float:
    """Share of rows whose log-residual lies in its family's bounds (families without
    bounds left out; nan when none has them)."""
    r = np.log(np.asarray(measured, float) / np.asarray(predicted, float))
    fam = np.asarray(families)
    inside = [bool(bounds[f][0] <= x <= bounds[f][1]) for x, f in zip(r, fam) if f in bounds]
    return float(np.mean(inside)) if inside else float("nan")


def one_level_intervals(residuals: Sequence[float], families: Sequence[str]
                        ) -> dict[str, tuple[float, float]]:
    """Per family F, the conformal bounds of the other families' given residuals (cheaper
    than `nested_intervals`, not nested: a fit that made those residuals saw F)."""
    r, fam = np.asarray(residuals, float), np.asarray(families)
    return {str(f): conformal_bounds(r[fam != f]) for f in np.unique(fam)
            if (fam != f).sum() >= 2}
