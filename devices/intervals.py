"""The interval an estimate carries: split-conformal bounds on held-out log-residuals, with
the model family as the exchangeable unit.

A fitted profile's estimate L comes with ``interval_ms`` = [L x exp(low), L x exp(high)].
``low`` and ``high`` come from the profile's residuals r = log(measured / estimated), one
per corpus row, each from a fit that never saw that row's model family (leave-one-family-
out, LOFO). Rows of one family err together (the same network at two runtimes, at fp16 and
int8), so rows are not exchangeable and a family with 30 rows must not outvote one with 2;
families are. `family_bounds` is split conformal over families by subsampling (Dunn,
Wasserman & Ramdas 2022, "Distribution-free prediction sets for two-layer hierarchical
models"): draw one row per family, take ranks floor((K + 1) x 0.1) and ceil((K + 1) x 0.9)
of the K drawn residuals (Vovk et al.'s finite-sample rank, with K families as the sample
size), and average each bound over every possible draw (computed exactly, not sampled).
What it means: for a new family that relates to the fitted ones as they relate to each
other, its latency falls below the interval with probability at most about 10% and above
it at most about 10% (inside >= 80%). From 9 to 18 families the ranks are the draw's
extremes: each bound is the expected lowest (highest) residual of one row per family, a
conservative interval, wider than 80% needs. Below 9 families no rank exists (the
finite-sample bound is infinite) and the interval is the residuals' whole range, as
conservative as the data allows and still not a guarantee. It is not a
promise for an architecture unlike every family fitted. With one row per family it is the
row-level split-conformal rank of `conformal_bounds`.

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
    >>> family_bounds([-0.2, 0.1, 0.4, 0.3], ["a", "a", "b", "c"])         # doctest: +SKIP
    (-0.05, 0.4)
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


def family_bounds(residuals: Sequence[float], families: Sequence[str], low: float = LOW,
                  high: float = HIGH) -> tuple[float, float]:
    """(lower, upper) split-conformal bounds with families as the unit: the expected
    floor((K+1) low)-th and ceil((K+1) high)-th of K residuals drawn one per family,
    over every draw (a rank outside 1..K: the residuals' extreme)."""
    r, fam = np.asarray(residuals, float), np.asarray(families)
    if not len(r):
        raise ValueError("no residuals to make an interval from")
    groups = [np.sort(r[fam == f]) for f in np.unique(fam)]
    k = len(groups)
    lower, upper = math.floor((k + 1) * low), math.ceil((k + 1) * high)
    # too few families for a rank (fewer than 9 at p10/p90): the conformal bound is
    # infinite; the residuals' range is the widest finite one (the expected extreme of
    # k < 9 draws would sit inside the nominal quantile: k = 2 covers about 2/3 a side)
    return (_expected_order_statistic(groups, lower) if lower >= 1 else float(r.min()),
            _expected_order_statistic(groups, upper) if upper <= k else float(r.max()))


def _expected_order_statistic(groups: Sequence[np.ndarray], rank: int) -> float:
    """E[the rank-th smallest of one uniform draw from each group], exactly: at each value
    v, P(rank-th <= v) = P(at least rank draws <= v), a Poisson-binomial tail."""
    values = np.unique(np.concatenate(groups))
    below = np.array([[np.searchsorted(g, v, side="right") / len(g) for g in groups]
                      for v in values])
    at_most = np.array([_at_least(p, rank) for p in below])
    return float(np.dot(values, np.diff(at_most, prepend=0.0)))


def _at_least(p: np.ndarray, count: int) -> float:
    """P(at least ``count`` of independent events with probabilities ``p``)."""
    dist = np.zeros(len(p) + 1)
    dist[0] = 1.0
    for q in p:
        dist[1:] = dist[1:] * (1 - q) + dist[:-1] * q
        dist[0] *= 1 - q
    return float(dist[count:].sum())


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


Rule = Callable[[np.ndarray, np.ndarray], tuple[float, float]]


def pair_predictions(families: Sequence[str], fit_predict: FitPredict
                     ) -> dict[frozenset, dict[int, float]]:
    """Per pair of families, the predictions of their rows by a fit on neither."""
    fam = np.asarray(families)
    names = list(np.unique(fam))
    pairs: dict[frozenset, dict[int, float]] = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            rows = np.flatnonzero((fam == a) | (fam == b))
            train = np.flatnonzero((fam != a) & (fam != b))
            pairs[frozenset((a, b))] = dict(zip(rows.tolist(), fit_predict(train, rows)))
    return pairs


def nested_intervals(measured: Sequence[float], families: Sequence[str],
                     fit_predict: FitPredict, rule: Rule = family_bounds,
                     pairs: dict[frozenset, dict[int, float]] | None = None
                     ) -> dict[str, tuple[float, float]]:
    """Per family F, the bounds (``rule``: `family_bounds`) of the other families' rows'
    log-residuals, each row predicted by a fit on neither F nor its own family (one fit
    per pair of families; ``pairs`` reuses `pair_predictions` made before)."""
    fam = np.asarray(families)
    pairs = pair_predictions(fam, fit_predict) if pairs is None else pairs
    y = np.asarray(measured, float)
    bounds = {}
    for f in np.unique(fam):
        others = np.flatnonzero(fam != f)
        if len(others) < 2:
            continue
        inner = np.array([pairs[frozenset((f, fam[i]))][i] for i in others])
        bounds[str(f)] = rule(np.log(y[others] / inner), fam[others])
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
    """Per family F, the family-level conformal bounds of the other families' given
    residuals (cheaper than `nested_intervals`, not nested: a fit that made those
    residuals saw F)."""
    r, fam = np.asarray(residuals, float), np.asarray(families)
    return {str(f): family_bounds(r[fam != f], fam[fam != f]) for f in np.unique(fam)
            if (fam != f).sum() >= 2}
