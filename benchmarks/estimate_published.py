"""Estimates against published on-device latencies (issue 15), held-out families only.

    python benchmarks/estimate_published.py [--profile NAME ...] [--build]
                                            [--write-profiles devices/profiles]

Per device profile that the corpus covers (devices/corpus_map.py), on the rows whose model
has a built stand-in (python -m edgeopt.devices.standins --build --fitted):

* BEFORE: the shipped prior figures (never fitted to any row);
* AFTER, per fitting method (op-class NNLS, one time scale, affine on the prior's
  estimate, and the kernel-level model of devices/kernel_model.py): leave-one-model-family-
  out cross validation, every row estimated by a fit that never saw its family; with the
  number of values each method fits and values per row;
* interval coverage, nested (`intervals.nested_intervals`): held-out family F's interval
  is the family-level conformal p10/p90 (`intervals.family_bounds`: each family one unit)
  of the other families' residuals, each from a fit that saw
  neither F nor that row's family, so F's rows shape neither F's estimate nor its
  interval (for the kept method: one fit per pair of families); per method also the
  one-level check (the other families' ordinary CV residuals, whose fits saw F) and the
  plain p10-p90 of those; whether the residuals' spread depends on precision or size;
* energy: the Coral rows' modelled energy against Coral's published 2 TOPS per watt.

Prints a markdown table and writes benchmarks/results/estimate_published.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402

from edgeopt.devices import intervals  # noqa: E402
from edgeopt.devices.corpus import load_corpus  # noqa: E402
from edgeopt.devices.corpus_fit import (  # noqa: E402
    ProfileFit,
    fit_one,
    fit_predictor,
    free_values,
    log_residuals,
    write_fit,
)
from edgeopt.devices.corpus_map import PROFILE_ROWS  # noqa: E402
from edgeopt.devices.costing import estimate_assigned  # noqa: E402
from edgeopt.devices.estimator import resolve_assignment  # noqa: E402
from edgeopt.devices.intervals import one_level_intervals  # noqa: E402
from edgeopt.devices.opcost import op_cost  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "estimate_published.json"
TARGETS = {"snapdragon-npu": 0.20, "snapdragon-8gen2-npu": 0.20,
           "snapdragon-8elite-npu": 0.20, "coral-usb": 0.12, "coral-devboard": 0.12}
# coral.ai/docs/edgetpu/benchmarks: "4 TOPS, using 0.5 watts for each TOPS (2 TOPS per watt)"
CORAL_J_PER_OP = 0.5e-12
OTHER_TARGET = 0.25


def accuracy(measured: np.ndarray, predicted: np.ndarray) -> dict:
    """Median |error| and the shares within ±10/25/30/50 %."""
    error = np.abs(predicted / measured - 1.0)
    return {"median_abs_error": round(float(np.median(error)), 4),
            **{f"within_{p}": round(float(np.mean(error <= p / 100)), 4)
               for p in (10, 25, 30, 50)}}


def coverage(measured: np.ndarray, predicted: np.ndarray, families: np.ndarray,
             conformal: bool = True) -> float:
    """Share of rows inside the interval made from the other families' CV residuals (one
    level, not nested: those residuals' fits saw the held-out family): their conformal
    bounds, or their plain p10-p90."""
    residuals = log_residuals(measured, predicted)
    bounds = one_level_intervals(residuals, families) if conformal else {
        str(f): tuple(np.quantile(residuals[families != f], [0.1, 0.9]))
        for f in np.unique(families) if (families != f).sum() >= 2}
    return round(intervals.coverage(measured, predicted, families, bounds), 4)


def nested_coverage(result: ProfileFit, method: str) -> dict:
    """The kept method's interval checked nested: held-out family F's bounds from the
    conformal quantiles of residuals computed without F (`intervals.nested_intervals`),
    F's rows estimated by the fit without F; per family and in all."""
    samples = list(result.samples)
    measured = np.array(result.measured_s)
    families = np.array(result.families)
    predicted = np.array(_chosen_cv(result))
    fit_predict = (fit_predictor(samples, result.prior, method) if method != "prior"
                   else lambda train, rows: np.array(result.prior_predicted_s)[rows])
    pairs = intervals.pair_predictions(families, fit_predict)
    bounds = intervals.nested_intervals(measured, families, fit_predict, pairs=pairs)
    # the row-level ranks on the same pair fits (the rule before the family-level one)
    by_row = intervals.nested_intervals(measured, families, fit_predict, pairs=pairs,
                                        rule=lambda r, _: intervals.conformal_bounds(r))
    per_family = {f: {"rows": int((families == f).sum()),
                      "log_bounds": [round(b, 4) for b in bounds[f]],
                      "coverage": round(intervals.coverage(
                          measured[families == f], predicted[families == f],
                          families[families == f], bounds), 4)}
                  for f in bounds}
    return {"coverage": round(intervals.coverage(measured, predicted, families, bounds), 4),
            "mean_width_factor": _mean_width(bounds, families),
            "row_level_coverage": round(intervals.coverage(measured, predicted, families,
                                                           by_row), 4),
            "row_level_mean_width_factor": _mean_width(by_row, families),
            "families": per_family}


def _mean_width(bounds: dict, families: np.ndarray) -> float | None:
    """exp of the mean log width (high - low) over the rows that have bounds: the
    interval's typical high/low ratio."""
    widths = [bounds[f][1] - bounds[f][0] for f in families if f in bounds]
    return round(float(np.exp(np.mean(widths))), 3) if widths else None


def summarise(result: ProfileFit) -> dict:
    measured = np.array(result.measured_s)
    families = np.array(result.families)
    methods = {}
    for name, method in result.methods.items():
        cv = np.array(method.cv_predicted_s)
        methods[name] = {**accuracy(measured, cv), "interval_coverage":
                         coverage(measured, cv, families),
                         "raw_p10_p90_coverage": coverage(measured, cv, families, False),
                         "values": (n := free_values(name, method.values, len(measured))),
                         "values_per_row": round(n / len(measured), 3),
                         "fitted_rows_median_abs_error": accuracy(
                             measured, np.array(method.fitted_predicted_s))["median_abs_error"]}
    before = accuracy(measured, np.array(result.prior_predicted_s))
    target = TARGETS.get(result.name, OTHER_TARGET)
    chosen = methods.get(result.chosen.method, before)
    return {"profile": result.name, "rows": len(result.samples),
            "rows_without_standin": result.skipped,
            "families": sorted(set(result.families)),
            "devices": list(result.chosen.devices),
            "before": before, "basis": result.chosen.basis,
            "after": methods, "chosen_method": result.chosen.method,
            "interval": interval_summary(result),
            "target_median_abs_error": target,
            "meets_target": chosen["median_abs_error"] <= target,
            "rows_detail": [{"model": s.row.model, "family": s.row.model_family,
                             "precision": s.row.precision, "runtime": s.row.runtime_detail,
                             "measured_ms": s.row.latency_ms,
                             "prior_ms": round(p * 1e3, 4),
                             "cv_ms": round(c * 1e3, 4)}
                            for s, p, c in zip(result.samples, result.prior_predicted_s,
                                               _chosen_cv(result))]}


def interval_summary(result: ProfileFit) -> dict:
    """The stored interval, its nested check, and whether the held-out log-residuals'
    spread depends on precision or model size (it would need scaling if it did)."""
    measured = np.array(result.measured_s)
    residuals = log_residuals(measured, np.array(_chosen_cv(result)))
    precision = np.array([s.row.precision for s in result.samples])
    spread = {p: {"rows": int((precision == p).sum()), "p10_p50_p90": [
        round(float(q), 4) for q in np.quantile(residuals[precision == p], [0.1, 0.5, 0.9])]}
        for p in np.unique(precision)}
    size = _rank_correlation(np.abs(residuals - np.median(residuals)), np.log(measured))
    return {"stored_log_bounds": [result.chosen.cv_log_residual_p10,
                                  result.chosen.cv_log_residual_p90],
            "nested": nested_coverage(result, result.chosen.method),
            "residuals_by_precision": spread,
            "abs_residual_vs_log_latency_spearman": round(size, 3)}


def _rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 3:
        return float("nan")
    return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])


def energy_check(result: ProfileFit) -> dict:
    """The fitted profile's modelled energy per row against Coral's published efficiency:
    the Edge TPU's share (its ops, their energy, its static power over its time) as ops per
    joule, and the whole device's average power, next to 2 TOPS/W and 2 W at 4 TOPS."""
    rows = []
    profile = result.methods[result.chosen.method].profile if result.chosen.method in \
        result.methods else result.prior
    for s in result.samples:
        est = estimate_assigned(s.sample.graph, profile, resolve_assignment(
            s.sample.graph, profile, s.sample.placement, s.sample.model))
        tpu = [o for o in est.ops if o.unit == "tpu"]
        tpu_ops = sum(_op_count(s.sample.graph, o.index) for o in tpu)
        tpu_j = sum(o.energy_j for o in tpu)
        rows.append({"model": s.row.model, "tpu_ops": tpu_ops,
                     "modelled_mj": round(est.energy_j * 1e3, 4),
                     "published_efficiency_mj": round(tpu_ops * CORAL_J_PER_OP * 1e3, 4),
                     "tpu_tops_per_w": round(tpu_ops / tpu_j / 1e12, 3) if tpu_j else None,
                     "average_w": round(est.energy_j / est.latency_s, 3)})
    return {"source": "coral.ai/docs/edgetpu/benchmarks: 4 TOPS at 2 TOPS per watt "
                      "(0.5 W per TOPS)", "rows": rows}


def _op_count(graph, index: int) -> float:
    return float(next(op_cost(graph, op).ops for op in graph.ops if op.index == index))


def _chosen_cv(result: ProfileFit) -> tuple[float, ...]:
    method = result.methods.get(result.chosen.method)
    return method.cv_predicted_s if method else result.prior_predicted_s


def table(summaries: list[dict]) -> str:
    lines = ["| profile | rows | families | before: median \\|err\\| | after (CV) method | "
             "values/row | median \\|err\\| | ±10% | ±25% | ±30% | ±50% | coverage: nested "
             "(one-level conformal / raw p10-p90) | target |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        head = (f"| {s['profile']} | {s['rows']} | {len(s['families'])} | "
                f"{s['before']['median_abs_error']:.0%} | ")
        if s["chosen_method"] == "prior":
            b = s["before"]
            lines.append(head + f"prior (kept: no fit did better) | 0 | "
                         f"{b['median_abs_error']:.0%} | "
                         f"{b['within_10']:.0%} | {b['within_25']:.0%} | {b['within_30']:.0%} | "
                         f"{b['within_50']:.0%} | {_nested(s, True)}| {_target(s, True)} |")
        for name, m in s["after"].items():
            kept = name == s["chosen_method"]
            lines.append(head + f"{name}{' (kept)' if kept else ''} | "
                         f"{m['values']}/{s['rows']} | {m['median_abs_error']:.0%} | "
                         f"{m['within_10']:.0%} | "
                         f"{m['within_25']:.0%} | {m['within_30']:.0%} | {m['within_50']:.0%} | "
                         f"{_nested(s, kept)}({m['interval_coverage']:.0%} / "
                         f"{m['raw_p10_p90_coverage']:.0%}) | "
                         f"{_target(s, kept)} |")
    return "\n".join(lines)


def _nested(s: dict, kept: bool) -> str:
    # a profile merged from an older results file (--merge) has no nested check
    value = s.get("interval", {}).get("nested", {}).get("coverage", float("nan"))
    return f"{value:.0%} " if kept and value == value else ("- " if kept else "")


def _target(s: dict, kept: bool) -> str:
    met = " met" if kept and s["meets_target"] else (" missed" if kept else "")
    return f"≤ {s['target_median_abs_error']:.0%}{met}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", nargs="*", default=list(PROFILE_ROWS))
    parser.add_argument("--build", action="store_true", help="build missing stand-ins")
    parser.add_argument("--merge", action="store_true",
                        help="keep the other profiles of the last results file (a run per "
                             "profile, as the stand-ins get built)")
    parser.add_argument("--write-profiles", type=Path, default=None,
                        help="also write the fitted profiles to this folder")
    args = parser.parse_args()
    rows = load_corpus()
    summaries = []
    for name in args.profile:
        result = fit_one(name, rows, args.build, progress=lambda m: print(m, flush=True))
        summaries.append(summarise(result))
        if name.startswith("coral"):
            summaries[-1]["energy_check"] = energy_check(result)
        if args.write_profiles:
            print(f"wrote {write_fit(result, args.write_profiles)}")
    command = "python benchmarks/estimate_published.py " + " ".join(sys.argv[1:])
    if args.merge and RESULTS.is_file():
        last = json.loads(RESULTS.read_text())
        mine = {s["profile"] for s in summaries}
        kept = [s for s in last.get("profiles", []) if s["profile"] not in mine]
        summaries = sorted(kept + summaries, key=lambda s: list(PROFILE_ROWS).index(s["profile"]))
        command = "; ".join([*last.get("commands", [last.get("command", "")]), command])
    path = write_results("estimate_published", {"commands": command.split("; "),
                                                "profiles": summaries})
    print(table(summaries))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
