"""Benchmark `edgeopt build` on the bundled digits sample, .keras and .onnx.

For each source format it runs, as a subprocess,

    edgeopt build samples/digits_cnn.<fmt> --device pixel-npu \
        --calib samples/digits_calib.npz --eval samples/digits_eval.npz -o <tmp> --json

reads the manifest JSON it prints, and reports:

- float top-1 vs int8 top-1 on the 400 labelled eval images
  (target: int8 within 1 percentage point of float, i.e. delta >= -0.01);
- int8 artifact size / float .tflite size (target: <= 0.3x);
- wall time of the whole command (median over --repeats runs; no target).

Targets print PASS or MISS; the script exits 0 either way, and non-zero only when a
build fails (there is then nothing to measure).

    python benchmarks/build_sample.py                  # both formats, 3 runs each
    python benchmarks/build_sample.py --formats onnx --repeats 1
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    REPO,
    RESULTS_DIR,
    ForeignLoad,
    edgeopt_command,
    load_average,
    print_table,
    subprocess_env,
    summarize,
    verdict,
    write_results,
)

NAME = "build_sample"
FORMATS = ("keras", "onnx")
MAX_ACCURACY_DROP = 0.01   # one percentage point of top-1
MAX_SIZE_RATIO = 0.30      # int8 artifact bytes / float .tflite bytes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS),
                        help="source formats to build (default: both)")
    parser.add_argument("--device", default="pixel-npu", help="device profile (default "
                        "pixel-npu)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="builds per format; wall time is their median (default 3)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                        help=f"where {NAME}.json goes (default benchmarks/results)")
    return parser.parse_args(argv)


def build_command(fmt: str, device: str, output: Path) -> list[str]:
    return [*edgeopt_command(), "build", f"samples/digits_cnn.{fmt}", "--device", device,
            "--calib", "samples/digits_calib.npz", "--eval", "samples/digits_eval.npz",
            "-o", str(output), "--json"]


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_build(command: list[str]) -> tuple[dict[str, Any], float, float]:
    """Run one build from the repository root; (manifest, wall seconds, CPU seconds)."""
    cpu_before = children_cpu_seconds()
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True,
                          env=subprocess_env())
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout), wall, children_cpu_seconds() - cpu_before


def measure_format(fmt: str, device: str, repeats: int) -> dict[str, Any]:
    """Build `repeats` times into fresh folders; figures from the first manifest."""
    manifests, walls, cpus = [], [], []
    with tempfile.TemporaryDirectory(prefix="edgeopt-bench-") as tmp:
        for i in range(repeats):
            manifest, wall, cpu = run_build(build_command(fmt, device, Path(tmp) / f"run{i}"))
            manifests.append(manifest)
            walls.append(wall)
            cpus.append(cpu)
    first = manifests[0]
    accuracy, sizes = first["accuracy"], first["sizes"]
    ratio = sizes["artifact_bytes"] / sizes["float_tflite_bytes"]
    stable = all(m["accuracy"] == accuracy and m["sizes"] == sizes for m in manifests)
    return {
        "format": fmt,
        "command": " ".join(build_command(fmt, device, Path("<tmp>"))),
        "accuracy": accuracy,
        "sizes": sizes,
        "size_ratio": ratio,
        "validation": first["validation"],
        "notes": first.get("notes", []),
        "recipe": first["recipe"],
        "converter": first["conversion"].get("converter"),
        "wall_seconds": summarize(walls),
        "wall_runs": walls,
        "cpu_seconds": summarize(cpus),
        "identical_across_runs": stable,
        "targets": targets(accuracy, ratio),
    }


def targets(accuracy: dict[str, Any], ratio: float) -> dict[str, dict[str, Any]]:
    drop_ok = (accuracy["metric"] == "top1_accuracy" and accuracy["delta"] is not None
               and accuracy["delta"] >= -MAX_ACCURACY_DROP)
    return {
        "int8_top1_within_1pt": {"target": f"int8 - float >= -{MAX_ACCURACY_DROP:.2f}",
                                 "measured": accuracy["delta"], "verdict": verdict(drop_ok)},
        "size_ratio": {"target": f"<= {MAX_SIZE_RATIO}x", "measured": round(ratio, 4),
                       "verdict": verdict(ratio <= MAX_SIZE_RATIO)},
    }


def print_report(records: list[dict[str, Any]]) -> None:
    rows = []
    for r in records:
        acc, sizes, wall = r["accuracy"], r["sizes"], r["wall_seconds"]
        t = r["targets"]
        rows.append((
            r["format"], f"{acc['reference']:.4f}", f"{acc['value']:.4f}",
            f"{acc['delta']:+.4f} {t['int8_top1_within_1pt']['verdict']}",
            f"{sizes['float_tflite_bytes']:,}", f"{sizes['artifact_bytes']:,}",
            f"{r['size_ratio']:.3f}x {t['size_ratio']['verdict']}",
            f"{wall['median']:.2f} ({wall['min']:.2f}-{wall['max']:.2f}, n={wall['n']})",
            f"{r['cpu_seconds']['median']:.2f}"))
    print_table(("format", "float top1", "int8 top1", "delta (>= -0.01)", "float .tflite B",
                 "int8 B", "ratio (<= 0.3x)", "wall s median (range)", "CPU s median"), rows)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_start = load_average()
    records = []
    with ForeignLoad() as others:
        for fmt in args.formats:
            try:
                records.append(measure_format(fmt, args.device, args.repeats))
            except RuntimeError as exc:
                print(f"build of digits_cnn.{fmt} failed: {exc}", file=sys.stderr)
                return 1
    print_report(records)
    share = others.result()["other_share_of_all_cores"]
    print(f"\nother processes used {share:.0%} of all cores meanwhile")
    path = write_results(NAME, {"load_average_at_start": load_start,
                                "other_processes": others.result(), "device": args.device,
                                "repeats": args.repeats,
                                "results": records}, args.results_dir)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
