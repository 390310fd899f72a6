"""`edgeopt sweep`: build every candidate of a search space, keep the results, pick per device.

    >>> result = run_sweep(SweepConfig(space="sweep.toml", output="sweep-out", workers=2))
    >>> sorted(result.best)                                               # doctest: +SKIP
    ['host-cpu', 'pixel-npu']

Each candidate is a real `edgeopt build` (edgeopt.pipeline.build) run by an engine
(edgeopt.sweep_engine); its point and bundle are stored under its content key
(edgeopt.sweep_cache) as soon as it ends, so an interrupted sweep resumes where it stopped
and an identical run builds nothing. With `bench="host"` or `adb=SERIAL` each built
candidate is then measured (edgeopt.sweep_bench), one at a time once the builds are over.
The results folder also gets `sweep.json` (every point, the fronts, which latency each
front compares, the picks) and `report.html` (edgeopt.sweep_report).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgeopt import stage_memo
from edgeopt.bundle import check_destination, write_bundle
from edgeopt.bundle_owner import MARKER
from edgeopt.config import NAME_OR_PATH_FIELDS, PATH_FIELDS
from edgeopt.errors import ConfigError, OutputError
from edgeopt.sweep_bench import BenchTarget, bench_points, bench_targets, check_targets
from edgeopt.sweep_cache import Payload, Store, candidate_key, read_payload
from edgeopt.sweep_engine import (
    Engine,
    Job,
    LocalEngine,
    Outcome,
    RayEngine,
    SerialEngine,
    Task,
    build_config,
    longest_first,
)
from edgeopt.sweep_report import front_bases, pareto_fronts, pick, render_page
from edgeopt.sweep_search import search
from edgeopt.sweep_space import Space, load_space

Progress = Callable[[str], None]
RESULTS, PAGE = "sweep.json", "report.html"
SEARCHES = ("grid", "optuna")
DEFAULT_TRIALS = 20


@dataclass(frozen=True)
class SweepConfig:
    space: str
    output: str = "sweep"
    workers: int = 1
    ray: str | None = None  # 'auto' or HOST:PORT of a Ray head; None: this machine
    write_best: str | None = None  # a folder: one bundle per device, the device's pick
    retry_failed: bool = False
    tolerance: float | None = None  # quality a pick may give up for speed (see sweep_report)
    search: str = "grid"  # grid: every candidate; optuna: `trials` chosen per device
    trials: int | None = None
    bench: str | None = None  # 'host': measure the host-cpu candidates on this machine
    adb: str | None = None  # a phone's serial: measure the other devices' candidates on it
    reuse: bool = True  # candidates share their float conversion and compression

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ConfigError("--workers must be at least 1")
        if self.search not in SEARCHES:
            raise ConfigError(f"--search must be one of {', '.join(SEARCHES)}")
        if self.trials is not None and (self.search != "optuna" or self.trials < 1):
            raise ConfigError("--trials N (N >= 1) goes with --search optuna")
        bench_targets(self.bench, self.adb)  # a bad --bench or --adb fails before any build

    @property
    def targets(self) -> tuple[BenchTarget, ...]:
        return bench_targets(self.bench, self.adb)


@dataclass(frozen=True)
class Plan:
    space: Space
    jobs: tuple[Job, ...]  # every candidate, in the space's order

    def tasks(self) -> list[Task]:
        return [task for task, _ in self.jobs]


@dataclass
class SweepResult:
    output: Path
    points: list[dict]
    fronts: dict[str, list[dict]]
    best: dict[str, dict | None]
    bases: dict[str, str] = field(default_factory=dict)  # front -> the latency it compares
    built: int = 0
    benched: int = 0
    cached: int = 0
    failed: int = 0
    excluded: list = field(default_factory=list)
    best_bundles: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"output": str(self.output), "built": self.built, "cached": self.cached,
                "failed": self.failed, "benched": self.benched, "points": self.points,
                "excluded": [{"candidate": c, "reason": r} for c, r in self.excluded],
                "fronts": {d: [p["key"] for p in f] for d, f in self.fronts.items()},
                "front_latency": self.bases,
                "best": {d: p["key"] if p else None for d, p in self.best.items()},
                "best_bundles": self.best_bundles}


def _quiet(_: str) -> None:
    pass


def _inputs(config: dict) -> list[str]:
    """The config's values that are files or folders: shipped as payloads, hashed."""
    found = []
    for key in PATH_FIELDS + NAME_OR_PATH_FIELDS:
        value = config.get(key)
        if key != "output" and isinstance(value, str) and Path(value).exists():
            found.append(value)
    return found


def plan(config: SweepConfig) -> Plan:
    """The candidates of the space, each with its key and its payloads (read once)."""
    space = load_space(config.space)
    bundles = Path(config.output) / "bundles"
    payloads: dict[str, Payload] = {}
    jobs, keys = [], set()
    for candidate in space.candidates:
        fields = space.config(candidate, "unused").to_json()
        inputs = _inputs(fields)
        for path in inputs:
            if path not in payloads:
                payloads[path] = read_payload(path)
        hashes = {k: payloads[v].sha256 for k, v in fields.items() if v in payloads}
        settings = {k: v for k, v in fields.items() if k not in hashes and k != "output"}
        key = candidate_key(settings, hashes)
        if key in keys:  # the same bytes under two names: one candidate
            continue
        keys.add(key)
        del fields["output"]
        task = Task(key, candidate.label, fields, tuple(inputs), str(bundles / key),
                    config.reuse)
        jobs.append((task, tuple(payloads[p] for p in inputs)))
    return Plan(space, tuple(jobs))


def make_engine(config: SweepConfig) -> Engine:
    if config.ray:
        return RayEngine(config.ray)
    return SerialEngine() if config.workers == 1 else LocalEngine(config.workers)


def _todo(plan_: Plan, store: Store, retry_failed: bool) -> list[Job]:
    todo = []
    for task, payloads in plan_.jobs:
        point = store.point(task.key)
        if point is None or (retry_failed and point["status"] != "ok"):
            todo.append((task, payloads))
    return todo


def _best_folder(folder: Path, device: str) -> Path:
    return folder / device.replace(" ", "_")


def _check_best_folders(config: SweepConfig, plan_: Plan) -> None:
    """--write-best fails before any build when a device's bundle folder cannot take it."""
    if not config.write_best:
        return
    folder = Path(config.write_best)
    if folder.resolve() == Path(config.output).resolve():
        raise OutputError("--write-best needs a folder other than the sweep's output")
    if not folder.is_dir():  # made when the bundles are written
        return
    for device in dict.fromkeys(t.config["device"] for t in plan_.tasks()):
        check_destination(_best_folder(folder, device))


def write_best(result: SweepResult, store: Store, folder: Path) -> dict[str, str]:
    """Each device's pick as a bundle `folder/DEVICE` (the bundle writer: atomic)."""
    written = {}
    for device, point in result.best.items():
        if point is None:
            continue
        source, target = store.bundle(point["key"]), _best_folder(folder, device)
        files = {p.name: p.read_bytes() for p in sorted(source.iterdir())
                 if p.is_file() and p.name != MARKER}
        files["edgeopt.toml"] = build_config(point["config"], output=str(target)).to_toml(
            target).encode()
        folder.mkdir(parents=True, exist_ok=True)
        write_bundle(target, files)
        written[device] = str(target)
    return written


def summarize(plan_: Plan, store: Store, tolerance: float | None) -> SweepResult:
    points = [p for p in (store.point(t.key) for t in plan_.tasks()) if p is not None]
    fronts, bases = pareto_fronts(points), front_bases(points)
    best = {device: pick(front, tolerance) for device, front in fronts.items()}
    return SweepResult(store.folder, points, fronts, best, bases,
                       failed=sum(p["status"] != "ok" for p in points),
                       excluded=list(plan_.space.excluded))


class _Recorder:
    """Stores each outcome as it comes, and says so."""

    def __init__(self, store: Store, total: int | None, progress: Progress) -> None:
        self.store, self.total, self.progress, self.finished = store, total, progress, 0

    def __call__(self, outcome: Outcome) -> None:
        self.store.save(outcome.key, outcome.point, outcome.files)
        self.finished += 1
        state = "built" if outcome.point["status"] == "ok" else \
            f"failed: {outcome.point['error']}"
        of = f"/{self.total}" if self.total is not None else ""
        self.progress(f"[{self.finished}{of}] {outcome.point['label']}: {state}")


def _run(config: SweepConfig, plan_: Plan, engine: Engine, todo: list[Job],
         recorder: _Recorder) -> None:
    if config.search == "optuna":
        jobs = {task.key: (task, payloads) for task, payloads in plan_.jobs}
        search(plan_.tasks(), config.trials or DEFAULT_TRIALS, config.workers,
               int(plan_.space.shared.get("seed", 0)), recorder.store.point,
               lambda tasks: engine.run([jobs[t.key] for t in tasks], recorder))
    elif todo:
        engine.run(longest_first(todo), recorder)


def run_sweep(config: SweepConfig, progress: Progress = _quiet) -> SweepResult:
    """Build what is not yet in the results folder, then write the results and the page."""
    plan_ = plan(config)
    store = Store(Path(config.output))
    grid = config.search == "grid"
    todo = _todo(plan_, store, config.retry_failed) if grid else []
    _check_best_folders(config, plan_)
    check_targets(config.targets)
    # connect before writing anything: an unreachable cluster leaves no folder behind
    engine = make_engine(config) if todo or not grid else None
    store.prepare()
    total = len(plan_.jobs)
    if grid:
        progress(f"{total - len(todo)} of {total} candidates already built; building "
                 f"{len(todo)}")
    recorder = _Recorder(store, len(todo) if grid else None, progress)
    try:
        if engine is not None:
            _run(config, plan_, engine, todo, recorder)
    finally:
        if engine is not None:
            engine.close()
        stage_memo.clear()  # what a serial sweep kept in this process goes with the sweep
    # after every build: a measurement never shares the machine with this sweep's builds
    benched = bench_points([t.key for t in plan_.tasks()], store, config.targets, progress,
                           config.retry_failed)
    result = summarize(plan_, store, config.tolerance)
    result.built, result.benched = recorder.finished, benched
    result.cached = total - len(todo) if grid else len(result.points) - recorder.finished
    if config.write_best:
        result.best_bundles = write_best(result, store, Path(config.write_best))
    store.write(RESULTS, json.dumps(result.to_json(), indent=2, default=str) + "\n")
    store.write(PAGE, render_page(f"edgeopt sweep: {plan_.space.path.name}", result.points,
                                  result.fronts, result.best, result.bases))
    return result
