"""Benchmark `edgeopt sweep` on the bundled digits sample: 12 candidates, 2 workers, Ray.

The space (written to a temporary folder): samples/digits_cnn.keras on pixel-npu and
host-cpu; schemes default, w8a8, float, fp16; prune 0 and 0.5, with and without
distillation (3 epochs). pixel-npu takes w8a8 only, so that is 12 candidates. All steps
run in one invocation, one after the other, each with the machine's load recorded beside
it (os.getloadavg before and after; the CPU share other processes took, from /proc/stat
less this process tree's own use):

1. single builds: `edgeopt sweep --workers 1 --no-reuse` (one process, the candidates one
   after another, each converting and compressing its model itself, as separate `edgeopt
   build`s do); each point's own build time, summed, is "the sum of the single builds" (no
   start-up or TensorFlow import counted in it);
2. parallel efficiency: the same space, a new results folder, `--workers 2`:
   sum of single builds / (2 x its wall time); target >= 80 %. Beside it: the pool's own
   build times (how much slower a build is next to another) and the workers' idle time,
   and the same pool with `--no-reuse` (each candidate computes every stage: what the
   parallelism alone gives; the default run also reuses a worker's float conversions and
   compressed models across candidates, edgeopt.stage_memo);
3. a second identical run into step 2's folder: its wall time / the first; target <= 5 %;
4. Ray overhead per candidate, on a Ray head started here on loopback (2 CPUs): one
   candidate (host-cpu float, the cheapest) built in this process and as a Ray task
   (RayEngine: model and data put in the object store, the task submitted, its result
   fetched), alternately, after one warm-up of each; overhead = median Ray wall time -
   median in-process wall time; target <= 2 s. Also: Ray wall time - the task's own build
   time (submit to start plus the result's return), and the cold first task (worker
   start-up and imports). Skipped with --no-ray or without the ray package.

    python benchmarks/sweep.py                 # all steps; writes benchmarks/results/sweep.json
    python benchmarks/sweep.py --no-ray
    python benchmarks/sweep.py --ray-sweep     # also the 12 candidates through Ray
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
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

sys.path.insert(0, str(REPO / "tests"))
from ray_head import start_ray_head, stop_ray_head  # noqa: E402  (tests/ray_head.py)

NAME = "sweep"
SAMPLES = REPO / "samples"
MIN_EFFICIENCY, MAX_RAY_OVERHEAD_S, MAX_RERUN_SHARE = 0.80, 2.0, 0.05
RAY_TEMP = Path("/tmp") / f"edgeopt-ray-bench-{os.getpid()}"  # short: Ray's socket paths
RAY_REPEATS = 3
STEP_TIMEOUT_S = 1800  # one sweep subprocess; unattended runs never hang

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


def _stat_busy_share() -> tuple[float, float]:
    """(busy jiffies, all jiffies) of every CPU since boot, from /proc/stat."""
    fields = [float(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


class Load:
    """The machine's load over one step: load averages, and how much of all cores other
    processes (not this one, its waited children, or the Ray processes started here) used."""

    def __init__(self) -> None:
        self.extra_own_cpu_s = 0.0  # CPU of processes started here but not waited for

    def __enter__(self) -> Load:
        self.loadavg_before = os.getloadavg()
        self.stat_before = _stat_busy_share()
        self.foreign = ForeignLoad().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.foreign.__exit__(*exc)
        self.loadavg_after = os.getloadavg()
        self.stat_after = _stat_busy_share()

    def result(self) -> dict:
        foreign = self.foreign.result()
        busy = self.stat_after[0] - self.stat_before[0]
        total = self.stat_after[1] - self.stat_before[1]
        wall, cores = foreign["wall_seconds"], os.cpu_count() or 1
        other = max(foreign["other_cpu_seconds"] - self.extra_own_cpu_s, 0.0)
        return {"loadavg_before": [round(v, 2) for v in self.loadavg_before],
                "loadavg_after": [round(v, 2) for v in self.loadavg_after],
                "busy_share_of_all_cores": round(busy / total, 3) if total else None,
                "own_cpu_s": round(foreign["own_cpu_seconds"] + self.extra_own_cpu_s, 2),
                "other_cpu_s": round(other, 2),
                "other_share_of_all_cores": round(other / (wall * cores), 3) if wall else None}


def sweep(space: Path, out: Path, *flags: str) -> tuple[float, dict]:
    """One `edgeopt sweep ... --json`: its wall time and its record."""
    start = time.perf_counter()
    proc = subprocess.run([*edgeopt_command(), "sweep", str(space), "-o", str(out), *flags,
                           "--json"], capture_output=True, text=True, env=subprocess_env(),
                          timeout=STEP_TIMEOUT_S)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"edgeopt sweep failed: {proc.stderr.strip().splitlines()[-1:]}")
    return wall, json.loads(proc.stdout)


def build_seconds(record: dict) -> float:
    return sum(p["seconds"] for p in record["points"])


def step_totals(record: dict) -> dict[str, float]:
    """Seconds per build step (converting, quantizing, distilling...) over every point."""
    totals: dict[str, float] = {}
    for point in record["points"]:
        for step, seconds in (point.get("step_seconds") or {}).items():
            totals[step] = round(totals.get(step, 0.0) + seconds, 2)
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def _step(name: str, action) -> tuple[object, dict]:
    print(f"[{time.strftime('%H:%M:%S')}] {name}", flush=True)
    with Load() as load:
        value = action(load)
    return value, load.result()


def _ray_cpu_seconds(head: subprocess.Popen) -> float:
    """CPU the Ray head and everything under it used (not waited for: psutil reads it)."""
    import psutil

    total = 0.0
    try:
        procs = [psutil.Process(head.pid), *psutil.Process(head.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def _cheapest_job(space: Path):
    from edgeopt.sweep import SweepConfig, plan

    jobs = plan(SweepConfig(str(space))).jobs
    return next(job for job in jobs if job[0].config["device"] == "host-cpu"
                and job[0].config["scheme"] == "float" and not job[0].config.get("prune"))


def _timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def ray_overhead(space: Path, address: str) -> dict:
    """One candidate in this process and as a Ray task, alternately (see the docstring)."""
    from edgeopt.quiet import library_output_to_log
    from edgeopt.sweep_engine import RayEngine, run_candidate

    task, payloads = _cheapest_job(space)
    task = dataclasses.replace(task, reuse=False)  # the same build each time, memo off
    engine = RayEngine(address)
    inproc, ray_wall, ray_task = [], [], []
    outcomes: list = []
    try:
        with library_output_to_log():
            warm_inproc = _timed(lambda: run_candidate(task, *payloads))
            cold_ray = _timed(lambda: engine.run([(task, payloads)], outcomes.append))
            for _ in range(RAY_REPEATS):
                inproc.append(_timed(lambda: run_candidate(task, *payloads)))
                ray_wall.append(_timed(lambda: engine.run([(task, payloads)], outcomes.append)))
                ray_task.append(outcomes[-1].point["seconds"])
    finally:
        engine.close()
    if any(o.point["status"] != "ok" for o in outcomes):
        sys.exit(f"the Ray candidate failed: {outcomes[-1].point['error']}")
    median_inproc, median_ray = statistics.median(inproc), statistics.median(ray_wall)
    return {"candidate": task.label, "repeats": RAY_REPEATS,
            "in_process_s": [round(v, 3) for v in inproc],
            "ray_s": [round(v, 3) for v in ray_wall],
            "ray_task_build_s": [round(v, 3) for v in ray_task],
            "overhead_per_candidate_s": round(median_ray - median_inproc, 3),
            "submit_to_start_plus_return_s": round(statistics.median(
                [w - t for w, t in zip(ray_wall, ray_task)]), 3),
            "first_in_process_s": round(warm_inproc, 3),
            "cold_first_ray_task_s": round(cold_ray, 3),
            "payload_bytes": sum(len(c) for p in payloads for _, c in p.files)}


def ray_steps(space: Path, folder: Path, n: int, single: float, ray_sweep: bool) -> dict | None:
    try:
        from importlib.metadata import version

        import ray  # noqa: F401  (installed?)
    except ImportError:
        return None
    address, head = start_ray_head(RAY_TEMP)
    result: dict = {"ray_version": version("ray")}

    def counted(action):  # the Ray processes' CPU is this benchmark's, not other load
        def step(load):
            before = _ray_cpu_seconds(head)
            value = action()
            load.extra_own_cpu_s = max(_ray_cpu_seconds(head) - before, 0.0)
            return value
        return step
    try:
        overhead, result["overhead_load"] = _step("Ray overhead", counted(
            lambda: ray_overhead(space, address)))
        result.update(overhead)
        if ray_sweep:
            (wall, record), result["sweep_load"] = _step("12 candidates through Ray", counted(
                lambda: sweep(space, folder / "ray", "--ray", address)))
            result["sweep"] = {"wall_s": round(wall, 2), "build_s": round(build_seconds(record), 2),
                               "efficiency": round(single / (2 * wall), 3),
                               "ok": sum(p["status"] == "ok" for p in record["points"])}
    finally:
        stop_ray_head(head, RAY_TEMP)
    return result


def run(no_ray: bool, ray_sweep: bool, other_space: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="edgeopt-bench-sweep-") as tmp:
        folder = Path(tmp)
        space = other_space.resolve() if other_space else folder / "sweep.toml"
        if other_space is None:
            space.write_text(SPACE)
        (serial_wall, serial), serial_load = _step(
            "single builds (--workers 1 --no-reuse)",
            lambda load: sweep(space, folder / "serial", "--no-reuse"))
        n, single = len(serial["points"]), build_seconds(serial)
        (plain_wall, plain), plain_load = _step(
            "2 workers, --no-reuse", lambda load: sweep(space, folder / "plain", "--workers",
                                                        "2", "--no-reuse"))
        (pool_wall, pool), pool_load = _step(
            "2 workers", lambda load: sweep(space, folder / "pool", "--workers", "2"))
        (rerun_wall, rerun), rerun_load = _step(
            "identical re-run", lambda load: sweep(space, folder / "pool", "--workers", "2"))
        ray = None if no_ray else ray_steps(space, folder, n, single, ray_sweep)
    pool_builds = build_seconds(pool)
    return {"candidates": n, "failed": serial["failed"] + pool["failed"],
            "single_builds": {"wall_s": round(serial_wall, 2), "sum_s": round(single, 2),
                              "per_candidate_s": {p["label"]: p["seconds"]
                                                  for p in serial["points"]},
                              "per_step_s": step_totals(serial),
                              "load": serial_load},
            "pool": {"workers": 2, "wall_s": round(pool_wall, 2),
                     "efficiency": round(single / (2 * pool_wall), 3),
                     "builds_in_pool_s": round(pool_builds, 2),
                     "build_slowdown_in_pool": round(pool_builds / single - 1, 3),
                     "idle_worker_s": round(2 * pool_wall - pool_builds, 2),
                     "per_step_s": step_totals(pool),
                     "load": pool_load},
            "pool_without_reuse": {"workers": 2, "wall_s": round(plain_wall, 2),
                                   "efficiency": round(single / (2 * plain_wall), 3),
                                   "builds_in_pool_s": round(build_seconds(plain), 2),
                                   "per_step_s": step_totals(plain), "load": plain_load},
            "rerun": {"wall_s": round(rerun_wall, 2), "built": rerun["built"],
                      "share_of_first": round(rerun_wall / pool_wall, 4), "load": rerun_load,
                      "bytecode": "cached (benchmarks' subprocess_env drops "
                                  "PYTHONDONTWRITEBYTECODE, as an installed edgeopt runs)"},
            "ray": ray}


def _rows(result: dict) -> list[tuple]:
    pool, rerun, ray = result["pool"], result["rerun"], result["ray"]
    rows = [("parallel efficiency, 2 workers", f"{pool['efficiency']:.0%}",
             f">= {MIN_EFFICIENCY:.0%}", verdict(pool["efficiency"] >= MIN_EFFICIENCY)),
            ("  the same, --no-reuse (no stage shared)",
             f"{result['pool_without_reuse']['efficiency']:.0%}", "(beside it)", ""),
            ("second identical run / first", f"{rerun['share_of_first']:.1%}",
             f"<= {MAX_RERUN_SHARE:.0%}", verdict(rerun["share_of_first"] <= MAX_RERUN_SHARE))]
    if ray:
        rows.append(("Ray overhead per candidate", f"{ray['overhead_per_candidate_s']} s",
                     f"<= {MAX_RAY_OVERHEAD_S:g} s",
                     verdict(ray["overhead_per_candidate_s"] <= MAX_RAY_OVERHEAD_S)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray steps")
    parser.add_argument("--space", type=Path, default=None, help="another sweep file (a quick "
                        "check of this script; it needs a host-cpu float candidate)")
    parser.add_argument("--ray-sweep", action="store_true",
                        help="also run the 12 candidates through Ray (its efficiency)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = run(args.no_ray, args.ray_sweep, args.space)
    result["total_wall_s"] = round(time.perf_counter() - started, 1)
    result["space"] = str(args.space) if args.space else "the 12-candidate space above"
    print_table(("figure", "value", "target", ""), _rows(result))
    pool = result["pool"]
    print(f"single builds {result['single_builds']['sum_s']} s; pool {pool['wall_s']} s "
          f"(builds {pool['builds_in_pool_s']} s, idle {pool['idle_worker_s']} s); other "
          f"processes took {pool['load']['other_share_of_all_cores']:.0%} of the cores "
          f"during the pool step, load {pool['load']['loadavg_after']}")
    print(f"wrote {write_results(NAME, result)} in {result['total_wall_s']} s")
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
