"""How close is `edgeopt estimate --device host-cpu` to the real LiteRT interpreter here?

    python benchmarks/estimate_accuracy.py [--threads 1] [--rounds 3] [--quick]

1. builds the zoo (estimate_zoo.py: Keras applications with random weights at several
   widths and resolutions, plus small custom nets; float32 and full int8), cached;
2. measures every model with the LiteRT interpreter on one thread: ``--rounds``
   interleaved rounds of ``--runs`` invokes timed with the thread's CPU time (the latency of
   an idle machine; this machine is shared, and preemption would otherwise add to it); a
   model's latency is the lowest of its round medians;
3. runs `edgeopt devices calibrate host-cpu` (micro-benchmarks) with the FIT models'
   measurements added (each weighing as much as ten micro-benchmarks), which writes the
   fitted profile to the user cache;
4. estimates every model with that profile and reports the error, for the fit models and
   for the held-out models separately (target: >= 80% of models within +-15%).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, verdict, write_results  # noqa: E402
from estimate_zoo import zoo_model  # noqa: E402

# (name, width multiplier, resolution); FIT models join the micro-benchmarks in the fit.
FIT = [("mobilenet_v2", 0.35, 128), ("small_cnn", 1.0, 64), ("residual", 1.0, 64),
       ("mobilenet_v3_small", 1.0, 224)]
HOLDOUT = [("mobilenet_v1", 0.5, 160), ("mobilenet_v1", 1.0, 224), ("mobilenet_v2", 1.0, 224),
           ("mobilenet_v2", 1.4, 192), ("mobilenet_v3_large", 0.75, 224),
           ("efficientnet_b0", 1.0, 224), ("resnet50", 1.0, 160), ("resnet50_v2", 1.0, 128),
           ("densenet121", 1.0, 128), ("nasnet_mobile", 1.0, 224), ("small_cnn", 2.0, 128),
           ("separable", 1.0, 96), ("mlp", 1.0, 784)]
QUICK = {"mobilenet_v2", "small_cnn", "residual", "mobilenet_v1", "separable", "mlp"}
PRECISIONS = ("float32", "int8")
TOLERANCE = 0.15
# A whole model counts as this many micro-benchmarks in the fit: they are what we estimate.
MODEL_WEIGHT = 10.0


def _models(quick: bool) -> list[dict]:
    models = []
    for group, entries in (("fit", FIT), ("holdout", HOLDOUT)):
        for name, alpha, resolution in entries:
            if quick and name not in QUICK:
                continue
            for precision in PRECISIONS:
                label = f"{name} {alpha}x{resolution} {precision}"
                models.append({"label": label, "group": group, "name": name, "alpha": alpha,
                               "resolution": resolution, "precision": precision})
    return models


def _measure(models: list[dict], blobs: dict, threads: int, rounds: int, runs: int) -> None:
    from edgeopt.devices.calibrate import measure_ms

    for model in models:
        model["round_ms"] = []
    for _ in range(rounds):
        for model in models:
            ms = measure_ms(blobs[model["label"]], threads, min_runs=runs, min_time_s=0.2)
            model["round_ms"].append(ms)
    for model in models:
        model["measured_ms"] = min(model["round_ms"])


def _calibrate(models: list[dict], blobs: dict, threads: int):
    from edgeopt.devices.calibrate import CalibrationConfig, calibrate
    from edgeopt.devices.fit import Sample
    from edgeopt.tflite_reader import read_tflite

    extra = [Sample(m["label"], read_tflite(blobs[m["label"]]), m["measured_ms"] / 1e3,
                    model=blobs[m["label"]], weight=MODEL_WEIGHT)
             for m in models if m["group"] == "fit"]
    return calibrate(CalibrationConfig("host-cpu", threads=threads), extra_samples=extra)


def _estimate(models: list[dict], blobs: dict) -> None:
    from edgeopt.devices.estimator import estimate
    from edgeopt.devices.profile import load_profile
    from edgeopt.tflite_reader import read_tflite

    profile = load_profile("host-cpu")
    for model in models:
        graph = read_tflite(blobs[model["label"]])
        est = estimate(graph, profile, model=blobs[model["label"]])
        model.update(estimated_ms=est.latency_ms, macs=graph.total_macs(),
                     params=graph.param_count(), ops=len(graph.ops))
        model["error"] = est.latency_ms / model["measured_ms"] - 1


def _summary(models: list[dict]) -> dict:
    summary = {}
    for group in ("fit", "holdout", "all"):
        chosen = [m for m in models if group in ("all", m["group"])]
        if not chosen:
            continue
        within = [abs(m["error"]) <= TOLERANCE for m in chosen]
        within10 = [abs(m["error"]) <= 0.10 for m in chosen]
        summary[group] = {"models": len(chosen), "within_15": sum(within),
                          "share_within_15": sum(within) / len(chosen),
                          "share_within_10": sum(within10) / len(chosen),
                          "median_abs_error": sorted(abs(m["error"]) for m in chosen)[
                              len(chosen) // 2]}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="six architectures only")
    args = parser.parse_args()
    started = time.time()
    models = _models(args.quick)
    blobs = {m["label"]: zoo_model(m["name"], m["alpha"], m["resolution"], m["precision"])
             for m in models}
    _measure(models, blobs, args.threads, args.rounds, args.runs)
    calibration = _calibrate(models, blobs, args.threads)
    _estimate(models, blobs)
    rows = [(m["group"], m["label"], f"{m['macs'] / 1e6:.0f}", f"{m['measured_ms']:.3f}",
             f"{m['estimated_ms']:.3f}", f"{m['error']:+.1%}",
             verdict(abs(m["error"]) <= TOLERANCE)) for m in models]
    print_table(("set", "model", "MMACs", "measured ms", "estimated ms", "error", "±15%"), rows)
    summary = _summary(models)
    for group, s in summary.items():
        print(f"{group}: {s['within_15']}/{s['models']} within ±15% "
              f"({s['share_within_15']:.0%}), {s['share_within_10']:.0%} within ±10%, "
              f"median |error| {s['median_abs_error']:.1%}")
    path = write_results("estimate_accuracy", {
        "command": "python benchmarks/estimate_accuracy.py " + " ".join(sys.argv[1:]),
        "threads": args.threads, "rounds": args.rounds, "runs": args.runs,
        "profile": str(calibration.path), "fit": calibration.fit.to_json()["rms_error"],
        "fit_samples": calibration.samples, "summary": summary,
        "models": [{k: v for k, v in m.items()} for m in models],
        "seconds": round(time.time() - started, 1)})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
