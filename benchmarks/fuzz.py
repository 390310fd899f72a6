"""The long fuzz run: mutated `.tflite`, `.onnx`, `.keras` and `.npz` files through
`inspect`, `estimate`, `build` and `quantize`, plus a sweep of every TFLite builtin.

    python benchmarks/fuzz.py                      # ~25 min on 2 shared cores
    python benchmarks/fuzz.py --scale 0.1          # a tenth of the inputs
    python benchmarks/fuzz.py --keep fuzz-failures # copy every failing input there

Each input ends in success or one `edgeopt: error:` line with status 2, or it is a failure:
an internal error, extra stderr (a traceback), a native crash, a hang past the command's
timeout, or resident memory past --memory-limit-mb. Commands run in one supervised worker
process (tests/fuzz_harness.py); the memory figure is the worker's peak resident set, read
from /proc (VmHWM per command, and polled while it runs). Failures are grouped by signature:
the outcome and the innermost edgeopt frame (and the innermost frame of all, when deeper).
Writes benchmarks/results/fuzz.json. Inputs are deterministic for a given --seed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _common import REPO, ForeignLoad, print_table, subprocess_env, write_results  # noqa: E402
from fuzz_harness import TIMEOUTS, Supervisor, Tried, fuzz  # noqa: E402

# Inputs per (format, command) at --scale 1, sized so that each cell takes a few minutes at
# most: a keras or onnx build costs seconds, a .tflite inspect milliseconds.
PLAN = {
    ("tflite", "inspect"): 3000, ("tflite", "estimate"): 2000, ("tflite", "build"): 200,
    ("tflite", "quantize"): 200,
    ("onnx", "inspect"): 3000, ("onnx", "estimate"): 100, ("onnx", "build"): 150,
    ("onnx", "quantize"): 600,
    ("keras", "inspect"): 400, ("keras", "estimate"): 150, ("keras", "build"): 150,
    ("keras", "quantize"): 150,
    ("npz", "build"): 500, ("npz", "quantize"): 500,
}
FAILURES_KEPT = 5  # examples per signature in the JSON


def _seeds(folder: Path) -> dict[str, Path]:
    """Seed models are made in a child process: this one never imports TensorFlow."""
    import json

    proc = subprocess.run([sys.executable, str(REPO / "tests" / "fuzz_harness.py"), "--seeds",
                           str(folder)], capture_output=True, text=True, env=subprocess_env(),
                          cwd=REPO, check=True)
    return {k: Path(v) for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def _op_sweep(sup: Supervisor, seed: Path, work: Path) -> list[Tried]:
    """Every builtin with 0-2 inputs and no options through `inspect`."""
    from fuzz_mutators import op_sweep

    tried = []
    for index, (label, data) in enumerate(op_sweep(seed.read_bytes())):
        path = work / "sweep.tflite"
        path.write_bytes(data)
        outcome = sup.run(["inspect", str(path), "--json"], TIMEOUTS["inspect"])
        tried.append(Tried("tflite", "op-sweep", index, label, outcome))
    return tried


def _cell(tried: list[Tried], seconds: float) -> dict:
    kinds = Counter(t.outcome.kind for t in tried)
    return {"inputs": len(tried), "outcomes": dict(kinds), "seconds": round(seconds, 1),
            "failures": sum(n for k, n in kinds.items() if k not in ("ok", "user_error")),
            "peak_rss_mb": round(max((t.outcome.peak_rss_mb for t in tried), default=0), 1),
            "mutations": dict(Counter(t.mutation.split("+")[0] for t in tried))}


def _signatures(tried: list[Tried]) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for t in tried:
        if t.outcome.fine:
            continue
        key = f"{t.outcome.kind}: {t.outcome.signature}"
        entry = found.setdefault(key, {"count": 0, "examples": []})
        entry["count"] += 1
        if len(entry["examples"]) < FAILURES_KEPT:
            entry["examples"].append({"format": t.fmt, "command": t.command, "index": t.index,
                                      "mutation": t.mutation, "args": t.outcome.args,
                                      "error": t.outcome.error_line,
                                      "detail": t.outcome.detail[-1500:]})
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="Multiply every cell's count.")
    parser.add_argument("--seed", type=int, default=1, help="Mutation seed (default 1; the "
                        "test suite's short run uses 0).")
    parser.add_argument("--memory-limit-mb", type=float, default=8192, help="Resident memory "
                        "of the worker past which an input counts as a memory failure.")
    parser.add_argument("--run-deadline", type=float, default=20, help="Seconds an "
                        "onnxruntime run may take (EDGEOPT_RUN_DEADLINE_S) before edgeopt stops "
                        "it; the default 300 s would make each endless-Loop input cost 5 min.")
    parser.add_argument("--formats", default="tflite,onnx,keras,npz")
    parser.add_argument("--no-op-sweep", action="store_true")
    parser.add_argument("--keep", type=Path, default=None, help="Copy failing inputs here.")
    parser.add_argument("--name", default="fuzz")
    args = parser.parse_args()

    formats = args.formats.split(",")
    cells, tried_all = {}, []
    with tempfile.TemporaryDirectory(prefix="edgeopt-fuzz-bench-") as tmp, \
            ForeignLoad() as load, Supervisor(
                memory_limit_mb=args.memory_limit_mb,
                env={"EDGEOPT_RUN_DEADLINE_S": str(args.run_deadline)}) as sup:
        seeds = _seeds(Path(tmp) / "seeds")
        if not args.no_op_sweep and "tflite" in formats:
            start = time.monotonic()
            tried = _op_sweep(sup, seeds["tflite"], Path(tmp))
            cells["tflite/op-sweep"] = _cell(tried, time.monotonic() - start)
            tried_all += tried
            print(f"tflite op-sweep: {cells['tflite/op-sweep']['outcomes']}", flush=True)
        for (fmt, command), count in PLAN.items():
            if fmt not in formats:
                continue
            start = time.monotonic()
            tried = fuzz(sup, seeds, fmt, command, max(1, round(count * args.scale)),
                         args.seed, Path(tmp) / "work", args.keep)
            cells[f"{fmt}/{command}"] = _cell(tried, time.monotonic() - start)
            tried_all += tried
            print(f"{fmt} {command}: {cells[f'{fmt}/{command}']['outcomes']}", flush=True)
        restarts, max_rss = sup.restarts, sup.max_rss_mb

    signatures = _signatures(tried_all)
    rows = [(name, c["inputs"], c["outcomes"].get("ok", 0), c["outcomes"].get("user_error", 0),
             c["failures"], c["peak_rss_mb"], c["seconds"]) for name, c in cells.items()]
    rows.append(("total", sum(c["inputs"] for c in cells.values()),
                 sum(c["outcomes"].get("ok", 0) for c in cells.values()),
                 sum(c["outcomes"].get("user_error", 0) for c in cells.values()),
                 sum(c["failures"] for c in cells.values()), round(max_rss, 1),
                 round(sum(c["seconds"] for c in cells.values()), 1)))
    print_table(("format/command", "inputs", "ok", "user error", "failures", "peak RSS MiB",
                 "seconds"), rows)
    print(f"\n{len(signatures)} distinct failure signature(s); worker restarts: {restarts}")
    for key, entry in signatures.items():
        print(f"  {entry['count']:>4}  {key}")
    path = write_results(args.name, {
        "command": " ".join(["python benchmarks/fuzz.py", *sys.argv[1:]]),
        "seed": args.seed, "scale": args.scale, "memory_limit_mb": args.memory_limit_mb,
        "run_deadline_s": args.run_deadline,
        "timeouts_s": TIMEOUTS, "inputs": sum(c["inputs"] for c in cells.values()),
        "failures": sum(c["failures"] for c in cells.values()),
        "distinct_failures": len(signatures), "worker_restarts": restarts,
        "peak_rss_mb": round(max_rss, 1), "cells": cells, "signatures": signatures,
        "load": load.result()})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
