"""SIGKILL `edgeopt build` many times into a folder that holds a good bundle; race builds.

- Builds `samples/digits_cnn.keras` once (the good bundle, and the build's duration D).
- Then --kills times: starts the same build into the same folder and SIGKILLs it, either
  at a seeded random time in [0.05 D, 1.1 D] (D: the median of the last five
  uncut builds, as the machine's load changes) or (a --write-share of the kills) a random
  0-20 ms after its staging folder appears, i.e. in the write phase. After each kill the
  folder must hold a whole bundle: manifest valid against the schema, model file of the
  recorded size and sha256, the same file set; a kill that came after the build ended is
  counted as `finished`.
- One more build, uncut: it must remove every staging folder the killed ones left.
- --races times: two builds (w8a8 and float) into one folder at once: both succeed, one
  whole bundle remains, no staging left.
- Peak RSS of every build process comes from wait4's ru_maxrss (the kernel's high-water
  mark, also for killed processes). TMPDIR is private: what killed builds leave there
  (they cannot clean it) is counted.

    python benchmarks/kills.py                  # 60 kills, 2 races (~8 min on 2 cores)
    python benchmarks/kills.py --kills 100 --seed 7
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from _common import REPO, ForeignLoad, print_table, subprocess_env, write_results

STAGING_MARK = ".edgeopt-staging-"
SCHEMA = REPO / "edgeopt" / "manifest.schema.json"


@dataclass
class Run:
    kind: str            # first | random | write-phase | final | race
    planned_s: float | None
    outcome: str         # killed | finished | failed
    exit_code: int | None
    seconds: float
    peak_rss_mb: float
    whole_after: bool
    changed: bool
    staging_left: int
    problem: str = ""


def build_argv(model: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "edgeopt.cli", "build", str(model), "--calib",
            str(REPO / "samples/digits_calib.npz"), "-o", str(out), *extra]


def contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def whole_problem(out: Path, files: set[str] | None) -> str:
    """'' when `out` holds a whole bundle, else what is wrong."""
    import jsonschema

    try:
        found = contents(out)
        if files is not None and set(found) != files:
            return f"file set differs: {sorted(set(found) ^ files)}"
        manifest = json.loads(found["manifest.json"])
        jsonschema.validate(manifest, json.loads(SCHEMA.read_text()))
        model = found[manifest["model"]["file"]]
    except (OSError, KeyError, ValueError, jsonschema.ValidationError) as exc:
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    if hashlib.sha256(model).hexdigest() != manifest["model"]["sha256"]:
        return "model sha256 differs from the manifest"
    if len(model) != manifest["model"]["size_bytes"]:
        return "model size differs from the manifest"
    return ""


def staging_dirs(out: Path) -> list[Path]:
    return [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}{STAGING_MARK}")]


def run_build(argv: list[str], env: dict, out: Path, kill_at: float | None = None,
              write_phase: float | None = None) -> tuple[str, int | None, float, int]:
    """Run a build, SIGKILL it at `kill_at` s or `write_phase` s after staging appears;
    returns (outcome, exit code, seconds, peak RSS bytes from wait4)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    killed = False
    if kill_at is not None or write_phase is not None:
        deadline = start + (kill_at if kill_at is not None else 3600)
        while time.monotonic() < deadline and os.waitid(
                os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            if write_phase is not None and staging_dirs(out):
                time.sleep(write_phase)
                break
            time.sleep(0.002)
        killed = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        if killed:
            os.kill(proc.pid, signal.SIGKILL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - start
    outcome = "killed" if killed else ("finished" if proc.returncode == 0 else "failed")
    return outcome, None if killed else proc.returncode, seconds, usage.ru_maxrss * 1024


def record(kind, planned, result, out, files, before) -> tuple[Run, dict[str, bytes]]:
    outcome, code, seconds, rss = result
    problem = whole_problem(out, files)
    now = contents(out) if not problem else before
    return Run(kind, None if planned is None else round(planned, 3), outcome, code,
               round(seconds, 2), round(rss / 2 ** 20, 1), not problem, now != before,
               len(staging_dirs(out)), problem), now


def kills(args, model: Path, out: Path, env: dict) -> list[Run]:
    runs: list[Run] = []
    first = run_build(build_argv(model, out), env, out)
    files = set(contents(out)) if first[0] == "finished" else None
    run, current = record("first", None, first, out, None, {})
    runs.append(run)
    if files is None:
        raise RuntimeError("the first build failed: nothing to protect")
    durations = [first[2]]  # of builds that ran to the end: the machine's load changes
    rng = random.Random(args.seed)
    for index in range(args.kills):
        if rng.random() < args.write_share:
            kind, planned = "write-phase", rng.uniform(0, 0.02)
            result = run_build(build_argv(model, out), env, out, write_phase=planned)
        else:
            kind = "random"
            planned = rng.uniform(0.05, 1.1) * statistics.median(durations[-5:])
            result = run_build(build_argv(model, out), env, out, kill_at=planned)
        if result[0] == "finished":
            durations.append(result[2])
        run, current = record(kind, planned, result, out, files, current)
        runs.append(run)
        print(f"  kill {index + 1}/{args.kills}: {kind} {planned:.3f} s -> {run.outcome}, "
              f"bundle {'whole' if run.whole_after else 'BROKEN: ' + run.problem}",
              flush=True)
    run, current = record("final", None, run_build(build_argv(model, out), env, out), out,
                          files, current)
    runs.append(run)
    return runs


def races(args, model: Path, root: Path, env: dict) -> list[Run]:
    runs = []
    for index in range(args.races):
        out = root / f"race{index}" / "dist"
        out.parent.mkdir(parents=True)
        start = time.monotonic()
        procs = [subprocess.Popen(build_argv(model, out, "--scheme", scheme), env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for scheme in ("w8a8", "float")]
        codes = []
        peak = 0
        for proc in procs:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            codes.append(proc.returncode)
            peak = max(peak, usage.ru_maxrss * 1024)
        problem = whole_problem(out, None)
        left = [p.name for p in out.parent.iterdir() if p.name != "dist"]
        outcome = "finished" if codes == [0, 0] else "failed"
        runs.append(Run("race", None, outcome, max(codes), round(time.monotonic() - start, 2),
                        round(peak / 2 ** 20, 1), not problem, True, len(left),
                        problem or (f"left: {left}" if left else "")))
    return runs


def folder_bytes(folder: Path) -> tuple[int, int]:
    entries = list(folder.iterdir())
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    return len(entries), size


def summary(runs: list[Run], temp: Path) -> dict:
    killed = [r for r in runs if r.kind in ("random", "write-phase")]
    landed = [r for r in killed if r.outcome == "killed"]
    final = next(r for r in runs if r.kind == "final")
    race = [r for r in runs if r.kind == "race"]
    temp_entries, temp_bytes = folder_bytes(temp)
    return {
        "kills_attempted": len(killed),
        "kills_landed": len(landed),
        "kills_in_write_phase": sum(r.kind == "write-phase" for r in landed),
        "builds_finished_before_kill": sum(r.outcome == "finished" for r in killed),
        "builds_failed_by_themselves": sum(r.outcome == "failed" for r in killed),
        "bundle_whole_after_every_kill": all(r.whole_after for r in killed),
        "kills_survived": sum(r.whole_after for r in landed),
        "bundle_replaced_by_a_killed_build": sum(r.changed for r in landed),
        "staging_left_before_final_build": killed[-1].staging_left if killed else 0,
        "staging_left_after_final_build": final.staging_left,
        "final_build_whole": final.whole_after and final.outcome == "finished",
        "races": len(race),
        "races_whole_and_clean": sum(r.whole_after and r.outcome == "finished"
                                     and r.staging_left == 0 for r in race),
        "peak_rss_mb_max": max(r.peak_rss_mb for r in runs),
        "peak_rss_mb_full_build": max(r.peak_rss_mb for r in runs
                                      if r.kind in ("first", "final")),
        "tmpdir_entries_left": temp_entries,
        "tmpdir_mb_left": round(temp_bytes / 2 ** 20, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--kills", type=int, default=60)
    parser.add_argument("--races", type=int, default=2)
    parser.add_argument("--seed", type=int, default=20251130)
    parser.add_argument("--write-share", type=float, default=0.25,
                        help="share of the kills aimed at the write phase")
    parser.add_argument("--model", type=Path, default=REPO / "samples/digits_cnn.keras")
    parser.add_argument("--name", default="kills")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="edgeopt-kills-"))
    temp = root / "tmp"
    temp.mkdir()
    env = {**subprocess_env(), "TMPDIR": str(temp)}
    out = root / "site" / "dist"
    out.parent.mkdir()
    try:
        with ForeignLoad() as load:
            runs = kills(args, args.model, out, env) + races(args, args.model, root, env)
        figures = summary(runs, temp)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = [(k, v) for k, v in figures.items()]
    print_table(["figure", "value"], rows)
    ok = figures["bundle_whole_after_every_kill"] and figures["final_build_whole"] \
        and figures["staging_left_after_final_build"] == 0 \
        and figures["races_whole_and_clean"] == figures["races"]
    print(f"\n{'PASS' if ok else 'FAIL'}: every kill left a whole bundle, the next build "
          "cleaned up, races ended with one whole bundle")
    path = write_results(args.name, {
        "command": " ".join(["python", "benchmarks/kills.py", *sys.argv[1:]]),
        "model": str(args.model.relative_to(REPO) if args.model.is_relative_to(REPO)
                     else args.model),
        "seed": args.seed, "load": load.result(), "figures": figures,
        "runs": [asdict(r) for r in runs]})
    print(f"results: {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
