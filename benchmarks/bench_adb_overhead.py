"""Harness overhead of `edgeopt bench --adb`: everything beyond benchmark_model's own run.

- Starts a private adb server and the loopback device of the tests (tests/adb_device.py:
  the adb transport protocol on 127.0.0.1, a sandbox filesystem, a benchmark_model that runs
  LiteRT), and connects the real adb client with `adb connect`.
- Runs `edgeopt bench MODEL --adb SERIAL --json` as a subprocess, --repeats times with power
  sampling (default: 1 s idle baseline, steady runs >= 2 s) and as many with --no-power.
- Overhead = the subprocess's wall time minus the time benchmark_model ran on the device
  (from its pid announcement to its exit, `timing_s.benchmark` in the record). It includes
  starting edgeopt, loading the model, the probe, push, idle baseline, parse and cleanup.
  Target: <= 3 s (median and max).

    python benchmarks/bench_adb_overhead.py
    python benchmarks/bench_adb_overhead.py --repeats 10 --runs 100
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    REPO,
    RESULTS_DIR,
    print_table,
    subprocess_env,
    summarize,
    verdict,
    write_results,
)
from bench_host_repeat import bench_command, make_models

sys.path.insert(0, str(REPO / "tests"))
from adb_device import LoopbackDevice  # noqa: E402

NAME = "bench_adb_overhead"
MAX_OVERHEAD_S = 3.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="benches per mode")
    parser.add_argument("--runs", type=int, default=50, help="benchmark_model --num_runs")
    parser.add_argument("--results-dir", default=RESULTS_DIR, type=Path)
    return parser.parse_args(argv)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _adb(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["adb", *args], env=env, capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)


def time_bench(command: list[str], model: Path, serial: str, runs: int, extra: list[str],
               env: dict) -> dict:
    start = time.perf_counter()
    out = subprocess.run([*command, str(model), "--adb", serial, "--runs", str(runs),
                          "--json", *extra], capture_output=True, text=True, env=env,
                         check=True)
    wall = time.perf_counter() - start
    record = json.loads(out.stdout)
    device_s = record["timing_s"]["benchmark"]
    return {"wall_s": wall, "benchmark_s": device_s, "overhead_s": wall - device_s,
            "in_process_overhead_s": record["timing_s"]["harness_overhead"],
            "power_mw": record["power_mw"]}


def measure(args, folder: Path) -> dict:
    model = make_models(folder)["digits_float.tflite"]
    port = _free_port()
    env = {**subprocess_env(), "ANDROID_ADB_SERVER_PORT": str(port), "HOME": str(folder)}
    device = LoopbackDevice(folder / "device").start()
    _adb(env, "start-server")
    try:
        _adb(env, "connect", device.serial)
        _adb(env, "-s", device.serial, "wait-for-device")
        command = bench_command()
        modes = {"power": [], "no-power": ["--no-power"]}
        return {mode: [time_bench(command, model, device.serial, args.runs, extra, env)
                       for _ in range(args.repeats)] for mode, extra in modes.items()}
    finally:
        _adb(env, "kill-server")
        device.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("adb") is None:
        print("adb is not installed (apt-get install adb)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="edgeopt-adb-bench-") as tmp:
        results = measure(args, Path(tmp))
    rows, summary = [], {}
    for mode, samples in results.items():
        overhead = summarize([s["overhead_s"] for s in samples])
        wall = summarize([s["wall_s"] for s in samples])
        bench_s = summarize([s["benchmark_s"] for s in samples])
        ok = overhead["max"] <= MAX_OVERHEAD_S
        summary[mode] = {"overhead_s": overhead, "wall_s": wall, "benchmark_s": bench_s,
                         "ok": ok, "samples": samples}
        rows.append((mode, f"{wall['median']:.2f}", f"{bench_s['median']:.2f}",
                     f"{overhead['median']:.2f}", f"{overhead['max']:.2f}", verdict(ok)))
    print_table(("mode", "wall (s)", "benchmark_model (s)", "overhead median (s)",
                 "overhead max (s)", f"<= {MAX_OVERHEAD_S:g} s"), rows)
    path = write_results(NAME, {"repeats": args.repeats, "runs": args.runs,
                                "cpu_count": os.cpu_count(), "target_s": MAX_OVERHEAD_S,
                                "modes": summary}, args.results_dir)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
