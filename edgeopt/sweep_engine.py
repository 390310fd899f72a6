"""Where a sweep's candidates run: this process, a local process pool, or a Ray cluster.

Every engine runs the same `run_candidate(task, *payloads)`: the inputs arrive as bytes
(through Ray's object store on a cluster), are written to a private temporary folder, and
the candidate is built there by `edgeopt.pipeline.build`, the function `edgeopt build`
calls. It returns the point and the bundle's files; only the caller (the sweep, on the
machine that started it) stores them, so a task that runs twice (a retried Ray task)
is still recorded once.

    >>> LocalEngine(workers=2).run(jobs, on_outcome)                     # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Protocol

from edgeopt import __version__, stage_memo
from edgeopt.bundle_owner import MARKER
from edgeopt.config import BuildConfig
from edgeopt.errors import ConfigError, EdgeoptError, first_line
from edgeopt.pipeline import build
from edgeopt.quiet import library_output_to_log
from edgeopt.sweep_cache import Payload

MAX_ATTEMPTS = 3  # a candidate whose worker dies is run again, at most this many times
TEXT_FILES = (".json", ".html", ".toml", ".md", ".txt")
RAY_CONNECT_TIMEOUT_S = 5.0
CHEAP_SCHEMES = ("float", "fp16", "dynamic")  # no calibration pass


@dataclass(frozen=True)
class Task:
    """One candidate to build: its key, its build config (the user's paths), its inputs."""

    key: str
    label: str
    config: dict  # BuildConfig fields; paths as the user gave them
    inputs: tuple[str, ...]  # the paths in `config` that arrive as payloads, in order
    bundle_dir: str  # where the sweep will store the bundle (for its edgeopt.toml)
    # the worker keeps the float conversion and the compressed model for the next candidate
    # that shares them (edgeopt.stage_memo); `sweep --no-reuse` computes each one afresh
    reuse: bool = True


@dataclass
class Outcome:
    key: str
    point: dict
    files: dict[str, bytes] | None = field(default=None, repr=False)


Job = tuple[Task, Sequence[Payload]]
OnOutcome = Callable[[Outcome], None]


class Engine(Protocol):
    def run(self, jobs: list[Job], on_outcome: OnOutcome) -> None:
        """Run every job; call `on_outcome` in this process once per job, as each ends."""

    def close(self) -> None:
        """Let go of what the engine holds (a cluster connection); run no more jobs."""


def longest_first(jobs: list[Job]) -> list[Job]:
    """The jobs in the order a pool should start them: distillation (training) first, then
    pruning, then quantization (calibration), float last; the space's order within each.
    Starting the long ones first keeps the last minutes from running on one worker."""
    def rank(job: Job) -> tuple[bool, bool, bool]:
        config = job[0].config
        return (bool(config.get("distill")), bool(config.get("prune")),
                config.get("scheme") not in CHEAP_SCHEMES)
    return sorted(jobs, key=rank, reverse=True)  # sorted() is stable


def build_config(fields: dict, **changes) -> BuildConfig:
    """A BuildConfig from its JSON record (lists back to tuples)."""
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in {**fields, **changes}.items()}
    return BuildConfig(**values)


def figures(manifest: dict) -> dict:
    """What the sweep compares, as the bundle's manifest gives it."""
    accuracy, validation = manifest["accuracy"], manifest["validation"]
    estimate, placement = manifest.get("estimate") or {}, manifest.get("placement") or {}
    delegated, cpu = placement.get("delegated_ops"), placement.get("cpu_ops")
    share = delegated / (delegated + cpu) if delegated is not None and cpu is not None \
        and delegated + cpu else None
    return {"metric": accuracy["metric"], "quality": accuracy["value"],
            "reference": accuracy["reference"], "delta": accuracy["delta"],
            "sqnr_db": validation.get("sqnr_db"),
            "outputs": [{"name": o["name"], "sqnr_db": o.get("sqnr_db")}
                        for o in validation.get("outputs", [])],
            "latency_ms": estimate.get("latency_ms"), "interval_ms": estimate.get("interval_ms"),
            "basis": estimate.get("basis") or manifest.get("estimate_note"),
            "energy_mj": estimate.get("energy_mj"), "size_bytes": manifest["model"]["size_bytes"],
            "delegated_ops": delegated, "cpu_ops": cpu, "delegated_share": share,
            "scheme": manifest["recipe"]["scheme"], "samples": validation.get("samples"),
            "format": manifest["model"]["format"],
            "execution_provider": placement.get("execution_provider")}


def _point(task: Task, status: str, started: float, **extra) -> dict:
    return {"key": task.key, "label": task.label, "status": status, "config": task.config,
            "seconds": round(time.monotonic() - started, 3), "edgeopt": __version__,
            "worker": {"host": platform.node(), "pid": os.getpid()}, "error": None,
            "figures": None, **extra}


def failed_point(task: Task, error: str, started: float | None = None) -> dict:
    return _point(task, "failed", time.monotonic() if started is None else started,
                  error=error)


def _bundle_files(folder: Path, renames: dict[str, str]) -> dict[str, bytes]:
    """The built bundle's files, the temporary input paths put back to the user's."""
    files = {}
    for path in sorted(folder.iterdir()):
        if path.name == MARKER or not path.is_file():
            continue
        content = path.read_bytes()
        if path.suffix in TEXT_FILES:
            text = content.decode("utf-8", errors="surrogateescape")
            for temporary, original in renames.items():
                text = text.replace(temporary, original)
            content = text.encode("utf-8", errors="surrogateescape")
        files[path.name] = content
    return files


class StepTimes:
    """The build's progress messages as a clock: seconds per step (named by the message's
    first word: converting, quantizing, validating...), so a sweep shows where its time
    goes."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, float]] = []

    def __call__(self, message: str) -> None:
        words = message.split()
        self.marks.append((words[0] if words else "", time.monotonic()))

    def seconds(self) -> dict[str, float]:
        ends = [t for _, t in self.marks[1:]] + [time.monotonic()]
        totals: dict[str, float] = {}
        for (step, start), end in zip(self.marks, ends):
            totals[step] = round(totals.get(step, 0.0) + end - start, 3)
        return totals


def _build_in(task: Task, payloads: Sequence[Payload], tmp: Path, started: float) -> Outcome:
    local = {original: str(p.materialize(tmp / f"input{i}"))
             for i, (original, p) in enumerate(zip(task.inputs, payloads))}
    values = {k: local.get(v, v) if isinstance(v, str) else v for k, v in task.config.items()}
    config = build_config(values, output=str(tmp / "bundle"))
    steps = StepTimes()
    with library_output_to_log():
        result = build(config, steps)
    files = _bundle_files(result.output, {v: k for k, v in local.items()})
    files["edgeopt.toml"] = build_config(task.config, output=task.bundle_dir).to_toml(
        Path(task.bundle_dir)).encode()
    point = _point(task, "ok", started, figures=figures(result.manifest),
                   step_seconds=steps.seconds())
    return Outcome(task.key, point, files)


def run_candidate(task: Task, *payloads: Payload) -> Outcome:
    """Build one candidate; a build that fails is a failed point with its error."""
    started = time.monotonic()
    try:
        with (stage_memo.enabled() if task.reuse else contextlib.nullcontext(),
              tempfile.TemporaryDirectory(prefix="edgeopt-sweep-") as tmp):
            return _build_in(task, payloads, Path(tmp), started)
    except EdgeoptError as exc:
        return Outcome(task.key, failed_point(task, first_line(exc), started))
    except Exception as exc:  # a bug in a stage: recorded, and the sweep goes on
        return Outcome(task.key, failed_point(
            task, f"internal error: {type(exc).__name__}: {first_line(exc)}", started))


# --- engines ------------------------------------------------------------------------------

class SerialEngine:
    """Candidates one after another in this process (`--workers 1`)."""

    def close(self) -> None:
        pass

    def run(self, jobs: list[Job], on_outcome: OnOutcome) -> None:
        for task, payloads in jobs:
            on_outcome(run_candidate(task, *payloads))


# The thread-pool sizes TensorFlow and OpenMP read when they start (a spawned worker has
# imported neither yet).
THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")


def share_cores(workers: int) -> None:
    """Give each of `workers` processes its share of the cores: a build alone spreads
    TensorFlow's kernels over every core, so workers that each do so oversubscribe them.
    Variables the user set are kept."""
    share = str(max(1, (os.cpu_count() or 1) // workers))
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, share)


class LocalEngine:
    """A pool of worker processes on this machine (spawned: TensorFlow does not fork)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def close(self) -> None:
        pass  # each run() has its own pool

    def run(self, jobs: list[Job], on_outcome: OnOutcome) -> None:
        attempts = {task.key: 0 for task, _ in jobs}
        todo = list(jobs)
        while todo:
            todo = self._round(todo, attempts, on_outcome)

    def _round(self, jobs: list[Job], attempts: dict, on_outcome: OnOutcome) -> list[Job]:
        """Run `jobs` in one pool; those in flight when a worker dies come back to retry."""
        pool = ProcessPoolExecutor(self.workers, mp_context=get_context("spawn"),
                                   initializer=share_cores, initargs=(self.workers,))
        futures: dict[Future, Job] = {}
        try:
            for job in jobs:
                attempts[job[0].key] += 1
                futures[pool.submit(run_candidate, job[0], *job[1])] = job
            return self._collect(futures, attempts, on_outcome)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _collect(self, futures: dict, attempts: dict, on_outcome: OnOutcome) -> list[Job]:
        retry: list[Job] = []
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                task, payloads = futures[future]
                try:
                    on_outcome(future.result())
                except BrokenProcessPool:
                    if attempts[task.key] >= MAX_ATTEMPTS:
                        on_outcome(Outcome(task.key, failed_point(
                            task, f"the worker process died {MAX_ATTEMPTS} times")))
                    else:
                        retry.append((task, payloads))
        return retry


def _check_reachable(address: str) -> None:
    """A GCS address that does not answer is one clear error, not a minute of retries."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--ray {address!r}: give 'auto' or HOST:PORT of the Ray head")
    try:
        socket.create_connection((host, int(port)), timeout=RAY_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ConfigError(f"cannot reach the Ray cluster at {address}: "
                          f"{exc.strerror or exc}") from None


def connect_ray(address: str):
    """The `ray` module connected to the cluster at `address` ('auto': the one this machine
    belongs to), and whether this call made the connection."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs the ray package: pip install 'edgeopt[ray]'") from None
    if address != "auto":
        _check_reachable(address)
    if ray.is_initialized():  # a caller's own connection is used as it is
        return ray, False
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except ConnectionError as exc:
        raise ConfigError(f"cannot connect to the Ray cluster ({address}): "
                          f"{first_line(exc)}") from None
    return ray, True


class RayEngine:
    """Candidates as Ray tasks; each input is put in the object store once."""

    def __init__(self, address: str) -> None:
        self.ray, self.own = connect_ray(address)

    def run(self, jobs: list[Job], on_outcome: OnOutcome) -> None:
        # Ray prints a dead worker's notice on stdout, which is --json's alone
        with contextlib.redirect_stdout(sys.stderr):
            self._run(self.ray, jobs, on_outcome)

    def close(self) -> None:
        if self.own:  # the connection this engine made, not a caller's
            self.ray.shutdown()

    def _run(self, ray, jobs: list[Job], on_outcome: OnOutcome) -> None:
        # Ray runs a task again when its worker dies (max_retries); application errors
        # are already failed points, so they are not retried.
        remote = ray.remote(num_cpus=1, max_retries=MAX_ATTEMPTS - 1)(run_candidate)
        stored: dict[str, object] = {}
        pending = {}
        for task, payloads in jobs:
            for payload in payloads:
                if payload.sha256 not in stored:
                    stored[payload.sha256] = ray.put(payload)
            refs = [stored[p.sha256] for p in payloads]
            pending[remote.remote(task, *refs)] = task
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                task = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    outcome = Outcome(task.key, failed_point(task, f"ray: {first_line(exc)}"))
                on_outcome(outcome)
