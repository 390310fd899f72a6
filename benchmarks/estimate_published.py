"""Estimates against published on-device latencies (issue 15), held-out families only.

    python benchmarks/estimate_published.py [--profile NAME ...] [--build]
                                            [--write-profiles devices/profiles]

Per device profile that the corpus covers (devices/corpus_map.py), on the rows whose model
has a built stand-in (python -m edgeopt.devices.standins --build --fitted):

* BEFORE: the shipped prior figures (never fitted to any row);
* AFTER, per fitting method (op-class NNLS, one time scale): leave-one-model-family-out
  cross validation, every row estimated by a fit that never saw its family;
* interval coverage: each held-out family's p10-p90 interval comes from the CV residuals of
  the *other* families only, so the rows it is checked on did not shape it.

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

from edgeopt.devices.corpus import load_corpus  # noqa: E402
from edgeopt.devices.corpus_fit import (  # noqa: E402
    ProfileFit,
    fit_one,
    log_residuals,
    write_fit,
)
from edgeopt.devices.corpus_map import PROFILE_ROWS  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "estimate_published.json"
TARGETS = {"snapdragon-npu": 0.20, "coral-usb": 0.12, "coral-devboard": 0.12}
OTHER_TARGET = 0.25


def accuracy(measured: np.ndarray, predicted: np.ndarray) -> dict:
    """Median |error| and the shares within ±10/25/30/50 %."""
    error = np.abs(predicted / measured - 1.0)
    return {"median_abs_error": round(float(np.median(error)), 4),
            **{f"within_{p}": round(float(np.mean(error <= p / 100)), 4)
               for p in (10, 25, 30, 50)}}


def coverage(measured: np.ndarray, predicted: np.ndarray, families: np.ndarray) -> float:
    """Share of rows inside the p10-p90 interval made from the other families' residuals."""
    residuals = log_residuals(measured, predicted)
    inside = []
    for family in np.unique(families):
        others = residuals[families != family]
        if len(others) < 2:
            continue
        low, high = np.quantile(others, [0.1, 0.9])
        held = residuals[families == family]
        inside.extend((held >= low) & (held <= high))
    return round(float(np.mean(inside)), 4) if inside else float("nan")


def summarise(result: ProfileFit) -> dict:
    measured = np.array(result.measured_s)
    families = np.array(result.families)
    methods = {}
    for name, method in result.methods.items():
        cv = np.array(method.cv_predicted_s)
        methods[name] = {**accuracy(measured, cv), "interval_coverage":
                         coverage(measured, cv, families),
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
            "target_median_abs_error": target,
            "meets_target": chosen["median_abs_error"] <= target,
            "rows_detail": [{"model": s.row.model, "family": s.row.model_family,
                             "precision": s.row.precision, "runtime": s.row.runtime_detail,
                             "measured_ms": s.row.latency_ms,
                             "prior_ms": round(p * 1e3, 4),
                             "cv_ms": round(c * 1e3, 4)}
                            for s, p, c in zip(result.samples, result.prior_predicted_s,
                                               _chosen_cv(result))]}


def _chosen_cv(result: ProfileFit) -> tuple[float, ...]:
    method = result.methods.get(result.chosen.method)
    return method.cv_predicted_s if method else result.prior_predicted_s


def table(summaries: list[dict]) -> str:
    lines = ["| profile | rows | families | before: median \\|err\\| | after (CV) method | "
             "median \\|err\\| | ±10% | ±25% | ±50% | interval coverage | target |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        if s["chosen_method"] == "prior":
            lines.append(f"| {s['profile']} | {s['rows']} | {len(s['families'])} | "
                         f"{s['before']['median_abs_error']:.0%} | prior (kept: no fit did "
                         f"better) | {s['before']['median_abs_error']:.0%} | "
                         f"{s['before']['within_10']:.0%} | {s['before']['within_25']:.0%} | "
                         f"{s['before']['within_50']:.0%} | - | "
                         f"≤ {s['target_median_abs_error']:.0%} "
                         f"{'met' if s['meets_target'] else ''} |")
        for name, m in s["after"].items():
            mark = " (kept)" if name == s["chosen_method"] else ""
            lines.append(
                f"| {s['profile']} | {s['rows']} | {len(s['families'])} | "
                f"{s['before']['median_abs_error']:.0%} | {name}{mark} | "
                f"{m['median_abs_error']:.0%} | {m['within_10']:.0%} | {m['within_25']:.0%} | "
                f"{m['within_50']:.0%} | {m['interval_coverage']:.0%} | "
                f"≤ {s['target_median_abs_error']:.0%} "
                f"{'met' if name == s['chosen_method'] and s['meets_target'] else ''} |")
    return "\n".join(lines)


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
