"""Float (fp16) rows of the NPU profiles: held-out error with fp16 tensors at half the bytes
or at float32 size.

    python benchmarks/fp16_npu.py [--profile snapdragon-npu]

The phones run a float model in fp16 on the NPU (AI Hub's `float` rows). edgeopt costs such
an op at the unit's fp16 rate (`edgeopt.devices.costing.in_unit_precision`); whether its
tensors count half the float32 bytes is `costing.HALVE_FP16_BYTES`. This script runs the
issue-15 fit (`devices.corpus_fit.fit_one`, leave-one-family-out CV) both ways and prints
the held-out median |error| per precision and method; then, with the shipped profile, the
fp16 rows estimated through the delegate rules (float placed on the CPU as before, or on
the HTP in fp16). Writes benchmarks/results/fp16_npu.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402

from edgeopt.delegates import place_for_device  # noqa: E402
from edgeopt.devices import costing  # noqa: E402
from edgeopt.devices.corpus import load_corpus  # noqa: E402
from edgeopt.devices.corpus_fit import fit_one  # noqa: E402
from edgeopt.devices.estimator import estimate  # noqa: E402
from edgeopt.devices.profile import load_profile  # noqa: E402


def per_precision(result) -> dict:
    """Median |error| and share within ±30% per (method, precision), held-out rows."""
    measured = np.array(result.measured_s)
    precisions = np.array([s.row.precision for s in result.samples])
    methods = {"prior": result.prior_predicted_s,
               **{name: m.cv_predicted_s for name, m in result.methods.items()}}
    out = {}
    for name, predicted in methods.items():
        error = np.abs(np.array(predicted) / measured - 1.0)
        out[name] = {p: {"rows": int(np.sum(precisions == p)),
                         "median_abs_error": round(float(np.median(error[precisions == p])), 4),
                         "within_30": round(float(np.mean(error[precisions == p] <= 0.3)), 4)}
                     for p in sorted(set(precisions))}
    return out


def run(profile: str, halve_bytes: bool) -> tuple[dict, object]:
    shipped = costing.HALVE_FP16_BYTES
    costing.HALVE_FP16_BYTES = halve_bytes
    try:
        result = fit_one(profile, load_corpus(), False)
    finally:
        costing.HALVE_FP16_BYTES = shipped
    return {"chosen_method": result.chosen.method, "by_method": per_precision(result)}, result


def placement_effect(result, profile_name: str) -> dict:
    """fp16 rows with the shipped profile, placed by the qnn-htp rules: float on the CPU
    (precision int8, edgeopt before) or on the HTP in fp16 (precision auto, now)."""
    profile = load_profile(profile_name)
    rows = [s for s in result.samples if s.row.precision == "fp16"]
    out = {}
    for precision in ("int8", "auto"):
        errors, on_npu = [], []
        for s in rows:
            placement = place_for_device(s.sample.model, profile, precision=precision)
            est = estimate(s.sample.graph, profile, placement, s.sample.model)
            errors.append(abs(est.latency_s / s.sample.measured_s - 1.0))
            on_npu.append(placement.delegated_ops / max(len(placement.ops), 1))
        out[precision] = {"rows": len(rows),
                          "median_abs_error": round(float(np.median(errors)), 4),
                          "median_ratio": round(float(np.median(
                              [1 + e for e in errors])), 2),
                          "median_share_on_npu": round(float(np.median(on_npu)), 4)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="snapdragon-npu")
    args = parser.parse_args()
    (f32, result), (f16, _) = run(args.profile, False), run(args.profile, True)
    runs = {"float32_bytes": f32, "fp16_bytes": f16}
    effect = placement_effect(result, args.profile)
    print(f"| {args.profile} costing | chosen | method | precision | rows | held-out median "
          "\\|err\\| | within ±30% |\n|---|---|---|---|---|---|---|")
    for label, data in runs.items():
        for method, rows in data["by_method"].items():
            for precision, m in rows.items():
                print(f"| {label} | {data['chosen_method']} | {method} | {precision} | "
                      f"{m['rows']} | {m['median_abs_error']:.0%} | {m['within_30']:.0%} |")
    print("\n| qnn-htp precision | fp16 rows | median share on the NPU | median \\|err\\| |\n"
          "|---|---|---|---|")
    for precision, m in effect.items():
        print(f"| {precision} | {m['rows']} | {m['median_share_on_npu']:.0%} | "
              f"{m['median_abs_error']:.0%} |")
    path = write_results("fp16_npu", {"profile": args.profile, "runs": runs,
                                      "placement_effect": effect,
                                      "commands": ["python benchmarks/fp16_npu.py --profile "
                                                   + args.profile]})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
