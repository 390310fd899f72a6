"""The interval an estimate carries (devices/intervals.py): split-conformal ranks, nested
leave-one-family-out residuals, and the coverage property on a synthetic corpus whose
error is known: nested-LOFO conformal intervals cover about their nominal 80% of a new
family's rows, intervals made of in-sample residuals (or of LOFO residuals without the
conformal rank) cover fewer."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from test_corpus_fit import _device_rows, _scaled, models  # noqa: F401  (a fixture)

from edgeopt.devices import intervals
from edgeopt.devices.corpus_fit import fit_samples, log_residuals, prior_profile
from edgeopt.devices.intervals import (
    conformal_bounds,
    family_bounds,
    lofo_predictions,
    nested_intervals,
)


def test_conformal_bounds_take_the_finite_sample_ranks():
    values = np.arange(1.0, 20.0)          # n = 19: ranks floor(2) = 2 and ceil(18) = 18
    rng = np.random.default_rng(0)
    assert conformal_bounds(rng.permutation(values)) == (2.0, 18.0)
    # the plain p10-p90 is narrower: the rank is what makes it cover a new row
    assert np.quantile(values, 0.9) < 18.0
    # too few rows for the ranks: the residuals' range
    assert conformal_bounds([0.3, -0.2, 0.1]) == (-0.2, 0.3)
    with pytest.raises(ValueError):
        conformal_bounds([])


def test_family_bounds_with_one_row_per_family_are_the_row_level_ranks():
    rng = np.random.default_rng(3)
    values = rng.normal(size=19)
    assert family_bounds(values, [str(i) for i in range(19)]) == \
        pytest.approx(conformal_bounds(values))


@pytest.mark.slow  # 6 s of exact draws
def test_family_bounds_are_the_expected_ranks_of_one_row_drawn_per_family():
    rng = np.random.default_rng(1)
    r = rng.normal(size=40)
    fam = rng.choice(list("abcdefghijk"), 40)           # K = 11: ranks 1 and 11
    names = np.unique(fam)
    k = len(names)
    lo_rank, hi_rank = math.floor((k + 1) * 0.1), math.ceil((k + 1) * 0.9)
    draws = np.sort([[r[rng.choice(np.flatnonzero(fam == f))] for f in names]
                     for _ in range(20000)], axis=1)
    expected = (draws[:, lo_rank - 1].mean(), draws[:, hi_rank - 1].mean())
    assert family_bounds(r, fam) == pytest.approx(expected, abs=0.02)
    # 40 families of one row: the interior ranks 4 and 37, not the extremes
    many = rng.normal(size=40)
    assert family_bounds(many, [str(i) for i in range(40)]) == \
        pytest.approx((np.sort(many)[3], np.sort(many)[36]))


def test_below_nine_families_the_bounds_are_the_residuals_range():
    # four families of two rows: the expected highest of four draws (0.45) would sit
    # inside the p90 the data cannot support; the range is the bound
    r = [0.0, 0.4, 0.1, 0.5, -0.2, 0.2, -0.3, 0.3]
    fam = ["a", "a", "b", "b", "c", "c", "d", "d"]
    assert family_bounds(r, fam) == pytest.approx((-0.3, 0.5))


def test_a_family_with_many_rows_does_not_outvote_the_others():
    # family "big" errs by +0.5 in 30 rows; six families of one or two rows err -0.1..0.3
    small = {"a": [-0.1], "b": [0.0, 0.05], "c": [0.1], "d": [0.15, 0.2], "e": [0.25],
             "f": [0.3]}
    r = [v for vs in small.values() for v in vs]
    fam = [f for f, vs in small.items() for _ in vs]
    with_big = family_bounds(r + [0.5] * 30, fam + ["big"] * 30)
    # one row of the same family weighs the same as thirty
    assert with_big == pytest.approx(family_bounds(r + [0.5], fam + ["big"]))
    # seven families, too few for a rank: the residuals' range
    assert with_big == pytest.approx((-0.1, 0.5))
    # row-level ranks let the thirty rows pull the lower bound up, past families a and b
    assert conformal_bounds(r + [0.5] * 30)[0] == pytest.approx(0.05)
    with pytest.raises(ValueError):
        family_bounds([], [])


def test_a_familys_nested_bounds_come_from_fits_that_never_saw_it():
    families = np.array(["a", "a", "b", "b", "c", "c", "d"])
    seen: list[tuple[set, set]] = []

    def fit_predict(train, rows):
        seen.append((set(families[train]), set(families[rows])))
        return np.ones(len(rows))

    bounds = nested_intervals(np.ones(len(families)), families, fit_predict)
    assert set(bounds) == {"a", "b", "c", "d"}
    # one fit per pair of families, trained on neither
    assert len(seen) == 6
    assert all(not (train & rows) and len(rows) == 2 for train, rows in seen)
    # the pair fits made once serve any rule, with no fit more
    pairs = intervals.pair_predictions(families, fit_predict)
    seen.clear()
    rows = nested_intervals(np.ones(len(families)), families, fit_predict, pairs=pairs,
                            rule=lambda r, _: conformal_bounds(r))
    assert not seen and set(rows) == set(bounds)


def _synthetic_corpus(rng, families=10, rows=4, features=6):
    """Rows whose log latency is linear in architecture features shared within a family,
    plus a family effect the features do not explain and row noise (both log-normal)."""
    beta = rng.normal(0, 1, features)
    family_x = rng.normal(0, 1, (families, features))
    fam = np.repeat(np.arange(families), rows).astype(str)
    x = np.repeat(family_x, rows, axis=0) + rng.normal(0, 0.3, (families * rows, features))
    effect = np.repeat(rng.normal(0, 0.3, families), rows)
    log_y = x @ beta + effect + rng.normal(0, 0.1, families * rows)
    return np.column_stack([np.ones(len(x)), x]), np.exp(log_y), fam


def _least_squares(x, y):
    def fit_predict(train, rows):
        coef = np.linalg.lstsq(x[train], np.log(y[train]), rcond=None)[0]
        return np.exp(x[rows] @ coef)
    return fit_predict


def test_nested_lofo_conformal_intervals_cover_new_families_in_sample_ones_do_not():
    rng = np.random.default_rng(42)
    nested, in_sample, plain = [], [], []
    for _ in range(100):
        x, y, fam = _synthetic_corpus(rng)
        fit_predict = _least_squares(x, y)
        held_out = lofo_predictions(fam, fit_predict)     # each family by a fit without it
        nested.append(intervals.coverage(y, held_out, fam,
                                         nested_intervals(y, fam, fit_predict)))
        # the same rows' residuals from the fit on every row: narrower than a new family's
        everything = np.arange(len(y))
        low, high = conformal_bounds(np.log(y / fit_predict(everything, everything)))
        in_sample.append(intervals.coverage(y, held_out, fam,
                                            {f: (low, high) for f in set(fam)}))
        # LOFO residuals of the other families, plain p10-p90 (no rank)
        r = log_residuals(y, held_out)
        plain.append(intervals.coverage(y, held_out, fam, {
            f: tuple(np.quantile(r[fam != f], [0.1, 0.9])) for f in set(fam)}))
    assert 0.74 <= np.mean(nested) <= 0.9
    assert np.mean(in_sample) < 0.65
    assert np.mean(plain) < np.mean(nested)


def test_a_fitted_profile_stores_the_conformal_bounds_of_its_held_out_residuals(models):  # noqa: F811
    prior = prior_profile("rpi5-cpu")
    rows = _device_rows(models, _scaled(prior, 1.6))
    # a known log-normal error per family on the synthetic device's times
    shift = {"alpha": math.log(0.7), "beta": math.log(1.2), "gamma": math.log(1.5)}
    rows = [dataclasses.replace(r, sample=dataclasses.replace(
        r.sample, measured_s=r.sample.measured_s * math.exp(shift[r.row.model_family])))
        for r in rows]
    result = fit_samples("rpi5-cpu", prior, rows, methods=("scale",))
    chosen = result.methods.get(result.chosen.method)
    cv = chosen.cv_predicted_s if chosen else result.prior_predicted_s
    residuals = log_residuals(result.measured_s, cv)
    expected = family_bounds(residuals, result.families)
    assert (result.chosen.cv_log_residual_p10, result.chosen.cv_log_residual_p90) == \
        pytest.approx(expected)
    # three families: fewer than a rank needs, so the residuals' whole range
    assert expected == pytest.approx((residuals.min(), residuals.max()))
