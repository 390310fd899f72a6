"""Benchmark `edgeopt sweep` on the bundled digits sample: 12 candidates, 2 workers.

The space (written to a temporary folder): samples/digits_cnn.keras on pixel-npu and
host-cpu; schemes default, w8a8, float, fp16; prune 0 and 0.5, with and without
distillation (3 epochs). pixel-npu takes w8a8 only, so that is 12 candidates. Each step is
one `edgeopt sweep` subprocess, timed from the outside:

1. `--workers 1` (serial, one process): each point's own build time; their sum is "the
   sum of the single builds" (stricter than separate `edgeopt build` runs, which would
   each pay the start-up and the TensorFlow import again);
2. `--workers 2` (local process pool): parallel efficiency = sum of single builds /
   (2 x wall time); target >= 80 %;
3. `--ray ADDRESS` on a Ray head started here on loopback with 2 CPUs: overhead per
   candidate = (2 x wall time - the builds' own time in the tasks) / 12, beside the same
   figure for the pool; target <= 2 s (skipped without the ray package);
4. step 2 again into the same results folder: its wall time as a share of the first;
   target <= 5 %.

    python benchmarks/sweep.py                 # all four steps
    python benchmarks/sweep.py --no-ray
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
    ForeignLoad,
    edgeopt_command,
    print_table,
    subprocess_env,
    verdict,
    write_results,
)

NAME = "sweep"
SAMPLES = REPO / "samples"
MIN_EFFICIENCY, MAX_RAY_OVERHEAD_S, MAX_RERUN_SHARE = 0.80, 2.0, 0.05
RAY_TEMP = Path("/tmp") / f"edgeopt-ray-bench-{os.getpid()}"  # short: Ray's socket paths
RAY_CLI = [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; "
           "sys.argv[0] = 'ray'; main()"]

SPACE = f"""models = ["{SAMPLES / 'digits_cnn.keras'}"]
devices = ["pixel-npu", "host-cpu"]
schemes = ["default", "w8a8", "float", "fp16"]
prune = [0, 0.5]
distill = [false, true]

[build]
calib = "{SAMPLES / 'digits_calib.npz'}"
eval = "{SAMPLES / 'digits_eval.npz'}"
distill_epochs = 3
"""


def sweep(space: Path, out: Path, *flags: str) -> tuple[float, dict]:
    """One `edgeopt sweep ... --json`: its wall time and its record."""
    start = time.perf_counter()
    proc = subprocess.run([*edgeopt_command(), "sweep", str(space), "-o", str(out), *flags,
                           "--json"], capture_output=True, text=True, env=subprocess_env())
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"edgeopt sweep failed: {proc.stderr.strip().splitlines()[-1:]}")
    return wall, json.loads(proc.stdout)


def build_seconds(record: dict) -> float:
    return sum(p["seconds"] for p in record["points"])


def start_ray_head() -> tuple[str, subprocess.Popen]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    head = subprocess.Popen([*RAY_CLI, "start", "--head", "--block", f"--port={port}",
                             "--node-ip-address=127.0.0.1", "--num-cpus=2",
                             "--include-dashboard=false", "--disable-usage-stats",
                             f"--temp-dir={RAY_TEMP}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    for _ in range(360):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return f"127.0.0.1:{port}", head
        except OSError:
            time.sleep(0.5)
    head.kill()
    sys.exit("the Ray head did not start")


def stop_ray_head(head: subprocess.Popen) -> None:
    """Stop the head started here and the processes under it, nothing else."""
    import psutil

    started = psutil.Process(head.pid).children(recursive=True)
    head.terminate()
    try:
        head.wait(timeout=60)
    except subprocess.TimeoutExpired:
        head.kill()
    for proc in started:
        if proc.is_running():
            proc.kill()
    shutil.rmtree(RAY_TEMP, ignore_errors=True)


def ray_step(space: Path, folder: Path, n: int) -> dict | None:
    try:
        import ray  # noqa: F401  (installed?)
    except ImportError:
        return None
    address, head = start_ray_head()
    try:
        wall, record = sweep(space, folder / "ray", "--ray", address)
    finally:
        stop_ray_head(head)
    from importlib.metadata import version

    return {"wall_s": round(wall, 2), "build_s": round(build_seconds(record), 2),
            "overhead_per_candidate_s": round((2 * wall - build_seconds(record)) / n, 2),
            "ok": sum(p["status"] == "ok" for p in record["points"]),
            "ray_version": version("ray")}


def run(no_ray: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="edgeopt-bench-sweep-") as tmp:
        folder = Path(tmp)
        space = folder / "sweep.toml"
        space.write_text(SPACE)
        serial_wall, serial = sweep(space, folder / "serial")
        n = len(serial["points"])
        single = build_seconds(serial)
        pool_wall, pool = sweep(space, folder / "pool", "--workers", "2")
        rerun_wall, rerun = sweep(space, folder / "pool", "--workers", "2")
        ray = None if no_ray else ray_step(space, folder, n)
        if ray:
            ray["efficiency"] = round(single / (2 * ray["wall_s"]), 3)
    return {"candidates": n, "failed": serial["failed"] + pool["failed"],
            "serial": {"wall_s": round(serial_wall, 2), "sum_single_builds_s": round(single, 2)},
            "pool": {"wall_s": round(pool_wall, 2), "build_s": round(build_seconds(pool), 2),
                     "efficiency": round(single / (2 * pool_wall), 3),
                     "overhead_per_candidate_s": round(
                         (2 * pool_wall - build_seconds(pool)) / n, 2)},
            "rerun": {"wall_s": round(rerun_wall, 2), "built": rerun["built"],
                      "share_of_first": round(rerun_wall / pool_wall, 4)},
            "ray": ray}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray step")
    args = parser.parse_args(argv)
    with ForeignLoad() as load:
        result = run(args.no_ray)
    result["foreign_load"] = load.result()
    pool, rerun, ray = result["pool"], result["rerun"], result["ray"]
    rows = [("parallel efficiency, 2 workers", f"{pool['efficiency']:.0%}",
             f">= {MIN_EFFICIENCY:.0%}", verdict(pool["efficiency"] >= MIN_EFFICIENCY)),
            ("pool overhead per candidate", f"{pool['overhead_per_candidate_s']} s", "", ""),
            ("second identical run / first", f"{rerun['share_of_first']:.1%}",
             f"<= {MAX_RERUN_SHARE:.0%}", verdict(rerun["share_of_first"] <= MAX_RERUN_SHARE))]
    if ray:
        rows.append(("Ray overhead per candidate", f"{ray['overhead_per_candidate_s']} s",
                     f"<= {MAX_RAY_OVERHEAD_S:g} s",
                     verdict(ray["overhead_per_candidate_s"] <= MAX_RAY_OVERHEAD_S)))
    print_table(("figure", "value", "target", ""), rows)
    print(f"serial {result['serial']['wall_s']} s (builds {result['serial']['sum_single_builds_s']}"
          f" s), pool {pool['wall_s']} s, rerun {rerun['wall_s']} s"
          + (f", ray {ray['wall_s']} s" if ray else "")
          + f"; other processes used {load.result()['other_share_of_all_cores']:.0%} of all cores")
    print(f"wrote {write_results(NAME, result)}")
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
