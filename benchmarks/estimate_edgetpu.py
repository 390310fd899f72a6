"""The simulated Edge TPU against coral.ai's published latencies.

    python benchmarks/estimate_edgetpu.py [--skip-large]

Fits the TPU's efficiency for 1x1 convolutions (also used for the other convolutions: the
same matrix unit) and for depthwise convolutions to the MobileNet v1 and v2 224 rows
(USB Accelerator and Dev Board together), then checks the rows it was not fitted to. Models
are Keras applications with random weights, full int8 with uint8 IO (estimate_zoo.py).
Everything else in the profiles (peak, 8 MiB cache, link bandwidth, overheads) is physics
from published figures, not fitted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, verdict, write_results  # noqa: E402
from estimate_zoo import zoo_model  # noqa: E402

# coral.ai/docs/edgetpu/benchmarks, Table 1 (ms): (USB Accelerator, Dev Board).
FIT_ROWS = {("mobilenet_v1", 224): (2.4, 2.4), ("mobilenet_v2", 224): (2.6, 2.6)}
CHECK_ROWS = {("resnet50", 299): (49, 56), ("resnet50_v2", 299): (50, 59),
              ("densenet121", 224): (20, 25), ("inception_resnet_v2", 299): (57, 69),
              ("resnet152_v2", 299): (128, 151), ("vgg16", 224): (296, 343),
              ("vgg19", 224): (308, 357)}
LARGE = {"resnet152_v2", "vgg16", "vgg19", "inception_resnet_v2"}
DEVICES = ("coral-usb", "coral-devboard")
TOLERANCE = 0.25


def _graph(name: str, resolution: int):
    from edgeopt.tflite_reader import read_tflite

    blob = zoo_model(name, 1.0, resolution, "int8", "uint8")
    return read_tflite(blob), blob


def fit_tpu():
    """Fit pointwise and depthwise efficiency on both Coral devices' MobileNet rows."""
    from edgeopt.devices.fit import FitConfig, Sample, fit_profile
    from edgeopt.devices.profile import load_profile

    values = {}
    for index, device in enumerate(DEVICES):
        samples = []
        for (name, resolution), published in FIT_ROWS.items():
            graph, blob = _graph(name, resolution)
            samples.append(Sample(name, graph, published[index] / 1e3, model=blob))
        config = FitConfig(units=("tpu",), kinds=("pointwise", "depthwise"),
                           fit_overhead=False, fit_invoke=False, fit_bandwidth=False,
                           prior_weight=1e-6)
        result = fit_profile(samples, load_profile(device), config)
        values[device] = {k[3]: 1 / v for k, v in result.values.items()}
    return values


def check(skip_large: bool) -> list[dict]:
    from edgeopt.devices.estimator import estimate
    from edgeopt.devices.profile import load_profile

    rows = []
    for (name, resolution), published in {**FIT_ROWS, **CHECK_ROWS}.items():
        if skip_large and name in LARGE:
            continue
        graph, blob = _graph(name, resolution)
        for index, device in enumerate(DEVICES):
            est = estimate(graph, load_profile(device), model=blob)
            rows.append({"model": f"{name} {resolution}", "device": device,
                         "fitted": (name, resolution) in FIT_ROWS,
                         "published_ms": published[index], "estimated_ms": est.latency_ms,
                         "error": est.latency_ms / published[index] - 1,
                         "on_chip_mib": est.params["on_chip_param_bytes"] / 2 ** 20,
                         "off_chip_mib": est.params["off_chip_param_bytes"] / 2 ** 20,
                         "cpu_ops": est.compiler["ops_on_cpu"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-large", action="store_true",
                        help="skip VGG, ResNet-152 and Inception-ResNet (slow to convert)")
    args = parser.parse_args()
    fitted = fit_tpu()
    print("fitted efficiencies (share of 4 TOPS):", {d: {k: round(v, 4) for k, v in e.items()}
                                                      for d, e in fitted.items()})
    rows = check(args.skip_large)
    print_table(("model", "device", "fit?", "published ms", "estimated ms", "error",
                 "on-chip MiB", "streamed MiB", f"±{TOLERANCE:.0%}"),
                [(r["model"], r["device"], "fit" if r["fitted"] else "check",
                  r["published_ms"], f"{r['estimated_ms']:.2f}", f"{r['error']:+.1%}",
                  f"{r['on_chip_mib']:.2f}", f"{r['off_chip_mib']:.2f}",
                  verdict(abs(r["error"]) <= TOLERANCE)) for r in rows])
    checks = [r for r in rows if not r["fitted"]]
    within = sum(abs(r["error"]) <= TOLERANCE for r in checks)
    print(f"check rows: {within}/{len(checks)} within ±{TOLERANCE:.0%}")
    path = write_results("estimate_edgetpu", {
        "command": "python benchmarks/estimate_edgetpu.py " + " ".join(sys.argv[1:]),
        "fitted_efficiency": fitted, "rows": rows, "tolerance": TOLERANCE,
        "check_within": within, "check_rows": len(checks)})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
