"""Host measurement repeatability: two `edgeopt bench` runs of one model agree on the median.

- Models: the digits sample as ONNX (onnxruntime) and as a float .tflite (`edgeopt convert`
  of samples/digits_cnn.keras), and an untrained MobileNetV2 (alpha 0.35, 96x96) .tflite.
- For each, `edgeopt bench MODEL --runs N --threads T --json` runs twice as a subprocess,
  back to back, the way a user runs it (--pairs times). Target: the two medians of a pair
  differ by <= 5% of their mean, for every pair. The load average is recorded: other work
  on the machine moves timings, and the target is for an idle machine.

    python benchmarks/bench_host_repeat.py
    python benchmarks/bench_host_repeat.py --pairs 3 --runs 500 --threads 2 --keep /tmp/m
    python benchmarks/bench_host_repeat.py --clock cpu --name bench_host_repeat_cpu
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import (
    REPO,
    RESULTS_DIR,
    edgeopt_command,
    load_average,
    print_table,
    subprocess_env,
    verdict,
    write_results,
)

NAME = "bench_host_repeat"
MAX_SPREAD = 0.05
def bench_command() -> list[str]:
    """`edgeopt bench`."""
    return [*edgeopt_command(), "bench"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="steady runs per bench")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--pairs", type=int, default=1, help="pairs of benches per model")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="edgeopt bench --clock (cpu needs --threads 1)")
    parser.add_argument("--name", default=NAME, help=f"results file name (default {NAME})")
    parser.add_argument("--keep", type=Path, default=None, help="keep the models here")
    parser.add_argument("--results-dir", default=RESULTS_DIR, type=Path)
    return parser.parse_args(argv)


def make_models(folder: Path) -> dict[str, Path]:
    """The digits sample (.onnx, float .tflite) and an untrained MobileNetV2 .tflite."""
    digits = folder / "digits_float.tflite"
    subprocess.run([*edgeopt_command(), "convert", str(REPO / "samples/digits_cnn.keras"),
                    "-o", str(digits)], check=True, capture_output=True, env=subprocess_env())
    mobilenet = folder / "mobilenetv2_035_96.tflite"
    subprocess.run([sys.executable, "-c", (
        "import keras, tensorflow as tf, sys\n"
        "keras.utils.set_random_seed(0)\n"
        "m = keras.applications.MobileNetV2((96, 96, 3), alpha=0.35, weights=None)\n"
        "open(sys.argv[1], 'wb').write(tf.lite.TFLiteConverter.from_keras_model(m).convert())\n"
    ), str(mobilenet)], check=True, capture_output=True, env=subprocess_env())
    return {"digits_cnn.onnx": REPO / "samples/digits_cnn.onnx",
            "digits_float.tflite": digits, "mobilenetv2_035_96.tflite": mobilenet}


def bench_once(command: list[str], model: Path, args) -> dict:
    out = subprocess.run([*command, str(model), "--runs", str(args.runs), "--threads",
                          str(args.threads), "--clock", args.clock, "--json"], check=True,
                         capture_output=True, text=True, env=subprocess_env())
    return json.loads(out.stdout)


def bench_pairs(command: list[str], path: Path, args) -> dict:
    pairs = []
    for _ in range(args.pairs):
        first, second = (bench_once(command, path, args) for _ in range(2))
        a, b = first["latency_ms"]["median"], second["latency_ms"]["median"]
        pairs.append({"median_ms": [a, b], "spread": abs(a - b) / ((a + b) / 2),
                      "runs": [first["runs"], second["runs"]], "tool": first["tool"],
                      "load_average": load_average()})
    worst = max(p["spread"] for p in pairs)
    return {"pairs": pairs, "worst_spread": worst, "ok": worst <= MAX_SPREAD}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = bench_command()
    with tempfile.TemporaryDirectory(prefix="edgeopt-bench-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        records = {name: bench_pairs(command, path, args)
                   for name, path in make_models(folder).items()}
    rows = [(name, r["pairs"][0]["tool"].split(",")[0],
             " / ".join(f"{p['median_ms'][0]:.4f}, {p['median_ms'][1]:.4f}" for p in r["pairs"]),
             f"{r['worst_spread']:.1%}", f"{r['pairs'][-1]['load_average'][0]:.1f}",
             verdict(r["ok"])) for name, r in records.items()]
    print_table(("model", "runtime", "medians (ms)", "worst spread", "load 1 min",
                 f"<= {MAX_SPREAD:.0%}"), rows)
    path = write_results(args.name, {"runs": args.runs, "threads": args.threads,
                                     "clock": args.clock, "pairs": args.pairs,
                                     "target_spread": MAX_SPREAD, "models": records},
                         args.results_dir)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
