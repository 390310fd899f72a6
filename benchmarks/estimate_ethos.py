"""Fit the Ethos-U profiles to Arm's own performance model (Vela's estimate).

    python benchmarks/estimate_ethos.py

No Ethos-U board here, so Vela's "Batch Inference time" (its cycle-level model of the NPU
and the memory system in vela.ini) stands in for measurements: the zoo's int8 models are
compiled with Vela (through edgeopt.delegates) and the NPU unit's efficiency factors are
fitted to its times, on a FIT set; the other models check the fit.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_results  # noqa: E402
from estimate_zoo import zoo_model  # noqa: E402

FIT = [("mobilenet_v2", 0.35, 128), ("small_cnn", 1.0, 64), ("residual", 1.0, 64),
       ("mobilenet_v1", 0.5, 160)]
CHECK = [("mobilenet_v2", 1.0, 224), ("mobilenet_v1", 1.0, 224), ("separable", 1.0, 96),
         ("small_cnn", 2.0, 128), ("mobilenet_v3_small", 1.0, 224), ("mlp", 1.0, 784)]
DEVICES = ("ethos-u55-256", "ethos-u65-512")


def _samples(device: str, models):
    from edgeopt.delegates.engine import place_for_device
    from edgeopt.devices.fit import Sample
    from edgeopt.tflite_reader import read_tflite

    samples = []
    for name, alpha, resolution in models:
        blob = zoo_model(name, alpha, resolution, "int8", "int8")
        placement = place_for_device(blob, device)
        vela_ms = placement.compiler["inference_ms"]
        samples.append(Sample(f"{name} {alpha}x{resolution}", read_tflite(blob),
                              vela_ms / 1e3, placement=placement, model=blob))
    return samples


def main() -> None:
    from edgeopt.devices.fit import FitConfig, fit_profile
    from edgeopt.devices.profile import load_profile

    rows, fitted = [], {}
    for device in DEVICES:
        profile = load_profile(device)
        fit_samples, check_samples = _samples(device, FIT), _samples(device, CHECK)
        config = FitConfig(units=("npu",), fit_bandwidth=False, fit_invoke=False,
                           fit_overhead=False, prior_weight=0.05)
        result = fit_profile(fit_samples, profile, config)
        fitted[device] = {"/".join(k[2:]): round(1 / v, 4) for k, v in result.values.items()}
        after = result.apply(profile)
        check = fit_profile(check_samples, after, FitConfig(units=(), fit_invoke=False,
                                                            fit_overhead=False,
                                                            fit_bandwidth=False,
                                                            fit_sync=False, iterations=1))
        for group, errors, prior in (("fit", result.errors, result.prior_errors),
                                     ("check", check.errors, None)):
            for label, error in errors.items():
                rows.append({"device": device, "set": group, "model": label,
                             "prior_error": prior[label] if prior else None,
                             "error": error})
    print("fitted efficiencies:", fitted)
    print_table(("device", "set", "model", "error vs Vela"),
                [(r["device"], r["set"], r["model"], f"{r['error']:+.1%}") for r in rows])
    path = write_results("estimate_ethos", {"command": "python benchmarks/estimate_ethos.py",
                                            "fitted": fitted, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
