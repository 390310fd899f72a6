"""`edgeopt bench`: measure models for real on this host, on phones over adb, on Linux
boards over ssh.

    >>> outcome = run_bench(BenchConfig(models=(Path("dist/digits_cnn.tflite"),), runs=100))
    >>> outcome.measurements[0].latency.median

One config, one library call (`run_bench`); the click command only builds the config and
prints. Each measurement is appended to the `--record` file as soon as it exists, so a
device that fails later never costs the ones already made. With `--adb all` (or several
`--ssh`) the devices run in parallel, each its own models in turn. The runners live in
edgeopt.devices.runners.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from edgeopt.atomic import check_output_path
from edgeopt.devices.profile import load_profile
from edgeopt.devices.runners import adb
from edgeopt.devices.runners.android import run_adb
from edgeopt.devices.runners.delegates import host_delegate
from edgeopt.devices.runners.host import HostBenchmark, run_host
from edgeopt.devices.runners.measurement import append_record
from edgeopt.devices.runners.numerics import host_numerics, numerics_inputs
from edgeopt.devices.runners.processes import stop_all
from edgeopt.devices.runners.remote import RemoteBenchmark
from edgeopt.devices.runners.ssh import run_ssh
from edgeopt.errors import ConfigError, DeviceError, EdgeoptError, ModelLoadError
from edgeopt.model import load_model

HOST_WARMUP, ADB_WARMUP = 5, 1
HOST_NUMERICS_SAMPLES, ADB_NUMERICS_SAMPLES = 32, 4
Progress = Callable[[str], None]


@dataclass(frozen=True)
class BenchConfig:
    models: tuple[Path, ...]
    device: str | None = None                 # profile name or .toml; host: host-cpu
    runs: int = 50
    min_secs: float = 1.0                     # steady runs last at least this long
    warmup: int | None = None                 # None: 5 on the host, 1 on a phone
    threads: int | None = None
    clock: str = "wall"                       # host only: wall | cpu (one thread)
    delegate: str | None = None               # None: the profile's delegate
    delegate_options: tuple[tuple[str, str], ...] = ()
    adb: str | None = None                    # None: host; '': the only device; 'all'; serial
    ssh: tuple[str, ...] = ()                 # Linux boards: [user@]host[:port]
    ssh_options: tuple[str, ...] = ()         # `ssh -o` options
    runner: str = "auto"                      # auto | benchmark_model | python
    benchmark_binary: str | None = None
    check_numerics: bool = False
    numerics_samples: int | None = None
    inputs: str | None = None
    timeout_s: float = 600.0
    idle_s: float = 1.0
    power_secs: float = 2.0
    power: bool = True
    record: Path | None = None
    benchmark_args: tuple[str, ...] = ()

    @property
    def single(self) -> bool:
        """One measurement asked for: --json prints DESIGN.md's bench record itself."""
        return len(self.models) == 1 and self.adb != "all" and len(self.ssh) <= 1


@dataclass
class BenchOutcome:
    config: BenchConfig
    measurements: list = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        if self.config.single and self.measurements and not self.errors:
            return self.measurements[0].to_json()
        return {"results": [m.to_json() for m in self.measurements], "errors": self.errors}


def _run_counter(progress: Progress, label: str, total: int) -> Callable[[int], None]:
    """A step for the timed runs; `on_run(done)` moves its bar (StepProgress's `(k/n)`)."""
    progress(f"{label}: timing {total} runs")
    return lambda done: progress(f"{label} ({min(done, total)}/{total})")


def _profile(config: BenchConfig, default: str | None):
    name = config.device or default
    return load_profile(name) if name else None


def _record(config: BenchConfig, measurement) -> None:
    if config.record is not None:
        append_record(config.record, measurement)


# --- host ---------------------------------------------------------------------------------

def _host_one(config: BenchConfig, model: Path, progress: Progress):
    profile = _profile(config, "host-cpu")
    if profile.name != "host-cpu" and profile.delegate == "xnnpack" and not config.delegate:
        raise ConfigError(f"--device {config.device} is another machine's CPU: measure it "
                          "there with --adb or --ssh HOST, or leave out --device for this one")
    delegate = config.delegate or (profile.delegate if profile.delegate != "xnnpack" else None)
    warmup = HOST_WARMUP if config.warmup is None else config.warmup
    job = HostBenchmark(model=model, runs=config.runs, min_secs=config.min_secs, warmup=warmup,
                        threads=config.threads, delegate=delegate,
                        delegate_options=config.delegate_options, device=profile.name,
                        device_kind=profile.kind, clock=config.clock)
    # --inputs is read and checked against the model before the runs: bad data fails first
    arrays = _numerics_arrays(config, model, config.numerics_samples or HOST_NUMERICS_SAMPLES)
    measurement = run_host(job, _run_counter(progress, model.name, config.runs))
    if arrays is not None:
        checked = host_numerics(load_model(model), config.threads,
                                host_delegate(delegate, config.delegate_options), arrays)
        measurement = replace(measurement, numerics=checked)
    return measurement


def _numerics_arrays(config: BenchConfig, model: Path, samples: int) -> dict | None:
    """The --check-numerics inputs, fitted to the model (a DataError when they do not fit)."""
    if not config.check_numerics:
        return None
    return numerics_inputs(load_model(model), config.inputs, samples)


def _run_host(config: BenchConfig, progress: Progress, outcome: BenchOutcome) -> None:
    for model in config.models:
        try:
            measurement = _host_one(config, model, progress)
        except EdgeoptError as exc:
            if config.single:
                raise
            outcome.errors.append(f"{model}: {exc}")
            continue
        _record(config, measurement)
        outcome.measurements.append(measurement)


# --- remote devices: adb and ssh ---------------------------------------------------------

def _remote_job(config: BenchConfig, model: Path, target: str):
    profile = _profile(config, None)
    samples = (config.numerics_samples or ADB_NUMERICS_SAMPLES) if config.check_numerics else 0
    if config.inputs:  # checked against the model here, before anything is pushed or run
        _numerics_arrays(config, model, 1)
    return RemoteBenchmark(
        model=model, target=target, runs=config.runs, min_secs=config.min_secs,
        warmup=ADB_WARMUP if config.warmup is None else config.warmup, threads=config.threads,
        delegate=config.delegate or (profile.delegate if profile else None),
        delegate_options=config.delegate_options, device=profile.name if profile else None,
        device_kind=profile.kind if profile else None, runner=config.runner,
        benchmark_binary=config.benchmark_binary, timeout_s=config.timeout_s,
        idle_s=config.idle_s, measure_power=config.power, power_secs=config.power_secs,
        numerics_samples=samples, numerics_inputs=config.inputs,
        extra_args=config.benchmark_args,
        remote_root="/tmp" if config.ssh else "/data/local/tmp")


def _remote_device(config: BenchConfig, target: str, measure: Callable,
                   outcome: BenchOutcome, lock: threading.Lock) -> None:
    """One device's models in turn; a device that vanished is not tried again."""
    for model in config.models:
        try:
            measurement = measure(_remote_job(config, model, target))
        except EdgeoptError as exc:
            with lock:
                outcome.errors.append(str(exc) if config.single
                                      else f"{target}: {model.name}: {exc}")
            if "lost the connection" in str(exc):
                return
            continue
        _record(config, measurement)
        with lock:
            outcome.measurements.append(measurement)


def _targets(config: BenchConfig, progress: Progress) -> tuple[list[str], Callable]:
    if config.ssh:
        options = tuple(arg for opt in config.ssh_options for arg in ("-o", opt))
        return list(config.ssh), lambda job: run_ssh(job, options=options,
                                                     progress=progress)
    serials = adb.resolve_serials(config.adb, adb.AdbClient(binary=adb.adb_binary()))
    return serials, lambda job: run_adb(job, progress=progress)


def _run_remote(config: BenchConfig, progress: Progress, outcome: BenchOutcome) -> None:
    """Every device in parallel (one thread each: the work happens on the devices)."""
    targets, measure = _targets(config, progress)
    lock = threading.Lock()
    try:
        with ThreadPoolExecutor(max_workers=len(targets)) as pool:
            futures = [pool.submit(_remote_device, config, t, measure, outcome, lock)
                       for t in targets]
            for future in futures:
                future.result()
    except KeyboardInterrupt:
        stop_all()
        raise


def _silent(_message: str) -> None:
    pass


def run_bench(config: BenchConfig, progress: Progress | None = None) -> BenchOutcome:
    """Measure every model on the host or on the adb devices; errors of single runs raise,
    several runs keep going and list what failed."""
    _check(config)
    progress = progress or _silent
    outcome = BenchOutcome(config)
    if config.adb is None and not config.ssh:
        _run_host(config, progress, outcome)
    else:
        _run_remote(config, progress, outcome)
    if config.single and outcome.errors:
        raise DeviceError(outcome.errors[0])
    return outcome


def _check(config: BenchConfig) -> None:
    if not config.models:
        raise ConfigError("give at least one model to benchmark")
    for model in config.models:
        if not Path(model).exists():
            raise ModelLoadError(f"model not found: {model}")
    if config.inputs and not config.check_numerics:
        raise ConfigError("--inputs feeds --check-numerics; add --check-numerics")
    if config.adb is None and not config.ssh and config.benchmark_binary:
        raise ConfigError("--benchmark-binary runs on a device: add --adb or --ssh")
    if config.adb is not None and config.ssh:
        raise ConfigError("choose --adb or --ssh, not both")
    if config.clock == "cpu" and (config.threads != 1 or config.adb is not None or config.ssh):
        raise ConfigError("--clock cpu times the calling thread: it needs --threads 1, on "
                          "the host")
    if config.record is not None:  # a FIFO or folder as --record fails before the runs
        check_output_path(config.record, make_parents=True)
