"""Benchmark the start-up of the `edgeopt` command: `--help` and `devices`.

- Times `edgeopt --help` and `edgeopt devices` as subprocesses (one untimed warm-up run
  each, then --runs timed runs; median and max). Target: `edgeopt --help` <= 0.5 s,
  checked on both the median and the max. `edgeopt devices` has no target of its own.
- Runs `python -X importtime -c "from edgeopt.cli import cli"` and checks that TensorFlow
  (any `tensorflow` or `tensorflow.*` module) is not imported; also reports the
  cumulative import time of edgeopt.cli, whether other heavy frameworks were imported,
  and the slowest top-level imports. The same check is made for the module run as
  `python -X importtime -m edgeopt.cli devices`.

    python benchmarks/cli_help.py
    python benchmarks/cli_help.py --runs 20
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import (
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

NAME = "cli_help"
MAX_HELP_S = 0.5
HEAVY = ("tensorflow", "keras", "tf_keras", "onnx", "onnxruntime", "onnx2tf",
         "ai_edge_litert", "ai_edge_quantizer", "torch", "numpy")
IMPORT_CHECKS = {
    "from edgeopt.cli import cli": ["-c", "from edgeopt.cli import cli"],
    "python -m edgeopt.cli devices": ["-m", "edgeopt.cli", "devices"],
}


@dataclass(frozen=True)
class ImportRecord:
    module: str
    self_us: int
    cumulative_us: int
    depth: int  # 0 for a top-level import


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per command")
    parser.add_argument("--top", type=int, default=5, help="slowest imports to list")
    parser.add_argument("--results-dir", default=RESULTS_DIR, type=Path,
                        help=f"where {NAME}.json goes (default benchmarks/results)")
    return parser.parse_args(argv)


def time_command(args: list[str], runs: int) -> dict[str, Any]:
    """One untimed warm-up, then `runs` timed runs; each must exit 0."""
    command = [*edgeopt_command(), *args]
    walls = []
    for i in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, env=subprocess_env())
        if i:
            walls.append(time.perf_counter() - start)
    return {"command": "edgeopt " + " ".join(args), **summarize(walls), "runs_s": walls}


def parse_importtime(stderr: str) -> list[ImportRecord]:
    """Rows of `-X importtime` output: 'import time: self | cumulative | name'."""
    records = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        fields = line[len("import time:"):].split("|")
        if len(fields) != 3:
            continue
        name = fields[2].rstrip()
        depth = (len(name) - len(name.lstrip())) // 2 - 1
        records.append(ImportRecord(name.strip(), int(fields[0]), int(fields[1]),
                                    max(depth, 0)))
    return records


def check_imports(args: list[str], top: int) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-X", "importtime", *args], capture_output=True,
                          text=True, env=subprocess_env())
    if proc.returncode != 0:
        raise RuntimeError(f"python {' '.join(args)} exited {proc.returncode}: "
                           f"{proc.stderr[-1000:]}")
    records = parse_importtime(proc.stderr)
    names = {r.module for r in records}
    tf_modules = sorted(n for n in names if n == "tensorflow" or n.startswith("tensorflow."))
    heavy = sorted(h for h in HEAVY if h in names)
    top_level = sorted((r for r in records if r.depth == 0), key=lambda r: -r.cumulative_us)
    cli = next((r for r in records if r.module == "edgeopt.cli"), None)
    return {"python_args": args, "modules_imported": len(names),
            "tensorflow_modules": tf_modules, "tensorflow_imported": bool(tf_modules),
            "heavy_frameworks_imported": heavy,
            "edgeopt_cli_cumulative_ms": cli.cumulative_us / 1000 if cli else None,
            "total_top_level_ms": sum(r.cumulative_us for r in top_level) / 1000,
            "slowest_top_level": [{"module": r.module, "cumulative_ms": r.cumulative_us / 1000}
                                  for r in top_level[:top]]}


def print_report(timings: list[dict], imports: dict[str, dict]) -> None:
    rows = []
    for t in timings:
        is_help = t["command"] == "edgeopt --help"
        target = f"<= {MAX_HELP_S} s" if is_help else "—"
        rows.append((t["command"], target, f"{t['median']:.3f} s", f"{t['max']:.3f} s",
                     f"{verdict(t['median'] <= MAX_HELP_S)} / {verdict(t['max'] <= MAX_HELP_S)}"
                     if is_help else ""))
    print_table(("command", "target", "median", "max", "median/max"), rows)
    print()
    rows = [(label, "not imported", ", ".join(r["tensorflow_modules"][:3]) or "not imported",
             verdict(not r["tensorflow_imported"]), ", ".join(r["heavy_frameworks_imported"])
             or "none", f"{r['total_top_level_ms']:.0f} ms")
            for label, r in imports.items()]
    print_table(("import check", "tensorflow target", "tensorflow measured", "verdict",
                 "heavy frameworks", "import time"), rows)
    for label, r in imports.items():
        slow = ", ".join(f"{s['module']} {s['cumulative_ms']:.0f} ms"
                         for s in r["slowest_top_level"])
        print(f"  slowest imports ({label}): {slow}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_start = load_average()
    try:
        with ForeignLoad() as others:
            timings = [time_command(["--help"], args.runs),
                       time_command(["devices"], args.runs)]
        imports = {label: check_imports(python_args, args.top)
                   for label, python_args in IMPORT_CHECKS.items()}
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    print_report(timings, imports)
    share = others.result()["other_share_of_all_cores"]
    print(f"\nother processes used {share:.0%} of all cores during the timings")
    help_timing = timings[0]
    targets = {
        "help_median": {"target": f"<= {MAX_HELP_S} s", "measured": help_timing["median"],
                        "verdict": verdict(help_timing["median"] <= MAX_HELP_S)},
        "help_max": {"target": f"<= {MAX_HELP_S} s", "measured": help_timing["max"],
                     "verdict": verdict(help_timing["max"] <= MAX_HELP_S)},
        "no_tensorflow_on_cli_import": {
            "target": "tensorflow not imported",
            "measured": imports["from edgeopt.cli import cli"]["tensorflow_modules"],
            "verdict": verdict(not imports["from edgeopt.cli import cli"]
                               ["tensorflow_imported"])},
    }
    path = write_results(NAME, {"load_average_at_start": load_start,
                                "other_processes": others.result(), "runs": args.runs,
                                "timings": timings, "imports": imports,
                                "targets": targets}, args.results_dir)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
