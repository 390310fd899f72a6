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

import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import click

from edgeopt.atomic import check_output_path
from edgeopt.errors import ConfigError, DeviceError, EdgeoptError, ModelLoadError

HOST_WARMUP, ADB_WARMUP = 5, 1
HOST_NUMERICS_SAMPLES, ADB_NUMERICS_SAMPLES = 32, 4
EXAMPLE = "edgeopt bench dist/digits_cnn.tflite --runs 100 --json"


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


class BenchProgress:
    """Progress for a terminal (stage lines, a run bar); the base class prints nothing."""

    def message(self, text: str) -> None:
        pass

    @contextlib.contextmanager
    def runs(self, label: str, total: int) -> Iterator[Callable[[int], None]]:
        yield lambda _done: None


class TerminalProgress(BenchProgress):
    """Stage lines and a click progress bar, on stderr."""

    def __init__(self):
        self._lock = threading.Lock()

    def message(self, text: str) -> None:
        with self._lock:
            click.echo(f"• {text}", err=True)

    @contextlib.contextmanager
    def runs(self, label: str, total: int) -> Iterator[Callable[[int], None]]:
        import sys

        if not sys.stderr.isatty():  # a log file gets one line, not a bar's redraws
            self.message(f"{label}: {total} runs")
            yield lambda _done: None
            return
        with click.progressbar(length=total, label=label, file=sys.stderr) as bar:
            yield lambda _done: bar.update(1)


def _profile(config: BenchConfig, default: str | None):
    from edgeopt.devices.profile import load_profile

    name = config.device or default
    return load_profile(name) if name else None


def _record(config: BenchConfig, measurement) -> None:
    if config.record is not None:
        from edgeopt.devices.runners.measurement import append_record

        append_record(config.record, measurement)


# --- host ---------------------------------------------------------------------------------

def _host_one(config: BenchConfig, model: Path, progress: BenchProgress):
    from edgeopt.devices.runners.delegates import host_delegate
    from edgeopt.devices.runners.host import HostBenchmark, run_host
    from edgeopt.devices.runners.numerics import host_numerics, numerics_inputs
    from edgeopt.model import load_model

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
    with progress.runs(f"{model.name}", config.runs) as on_run:
        measurement = run_host(job, on_run)
    if config.check_numerics:
        handle = load_model(model)
        samples = config.numerics_samples or HOST_NUMERICS_SAMPLES
        arrays = numerics_inputs(handle, config.inputs, samples)
        checked = host_numerics(handle, config.threads,
                                host_delegate(delegate, config.delegate_options), arrays)
        measurement = replace(measurement, numerics=checked)
    return measurement


def _run_host(config: BenchConfig, progress: BenchProgress, outcome: BenchOutcome) -> None:
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
    from edgeopt.devices.runners.remote import RemoteBenchmark

    profile = _profile(config, None)
    samples = (config.numerics_samples or ADB_NUMERICS_SAMPLES) if config.check_numerics else 0
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


def _targets(config: BenchConfig, progress: BenchProgress) -> tuple[list[str], Callable]:
    if config.ssh:
        from edgeopt.devices.runners.ssh import run_ssh

        options = tuple(arg for opt in config.ssh_options for arg in ("-o", opt))
        return list(config.ssh), lambda job: run_ssh(job, options=options,
                                                     progress=progress.message)
    from edgeopt.devices.runners import adb
    from edgeopt.devices.runners.android import run_adb

    serials = adb.resolve_serials(config.adb, adb.AdbClient(binary=adb.adb_binary()))
    return serials, lambda job: run_adb(job, progress=progress.message)


def _run_remote(config: BenchConfig, progress: BenchProgress, outcome: BenchOutcome) -> None:
    """Every device in parallel (one thread each: the work happens on the devices)."""
    from edgeopt.devices.runners.processes import stop_all

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


def run_bench(config: BenchConfig, progress: BenchProgress | None = None) -> BenchOutcome:
    """Measure every model on the host or on the adb devices; errors of single runs raise,
    several runs keep going and list what failed."""
    _check(config)
    progress = progress or BenchProgress()
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


# --- the command ----------------------------------------------------------------------------

def _options(pairs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    parsed = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}",
                                     param_hint="--delegate-option")
        parsed.append((key, value))
    return tuple(parsed)


def _record_path(value: str | None) -> Path | None:
    if value is None:
        return None
    if value == "":
        from edgeopt.devices.runners.measurement import default_records_path

        return default_records_path()
    return Path(value)


def _models_and_adb(models: tuple[str, ...], adb: str | None) -> tuple[tuple[str, ...], str | None]:
    """`--adb MODEL` with no other model: the user meant `--adb` alone, then the model."""
    if not models and adb and Path(adb).is_file():
        return (adb,), ""
    return models, adb


@click.command("bench", epilog=f"\b\nExample:\n  {EXAMPLE}\n"
               "  edgeopt bench model.tflite --device pixel-gpu --adb --check-numerics\n"
               "  edgeopt bench a.tflite b.tflite --adb all --record")
@click.argument("models", nargs=-1)
@click.option("--device", "-d", default=None, help="Device profile name or .toml (default: "
              "host-cpu on the host; over adb it picks the delegate flags).")
@click.option("--runs", type=click.IntRange(min=1), default=50, show_default=True,
              help="Timed steady runs (at least).")
@click.option("--min-secs", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Steady runs go on for at least this long, as benchmark_model's "
                   "--min_secs: a short burst of runs is at the mercy of other work.")
@click.option("--warmup", type=click.IntRange(min=0), default=None,
              help=f"Untimed runs first (default {HOST_WARMUP} on the host, {ADB_WARMUP} "
                   "over adb).")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="CPU threads (default: the runtime's choice).")
@click.option("--clock", type=click.Choice(["wall", "cpu"]), default="wall",
              show_default=True, help="Host runs: wall time, or the thread's CPU time "
              "(with --threads 1: leaves out preemption by other work on a busy machine).")
@click.option("--delegate", default=None, help="Delegate NAME (xnnpack, none, gpu, nnapi, "
              "qnn-htp, edgetpu, ...) or PATH to a delegate library (default: the profile's).")
@click.option("--delegate-option", "delegate_options", multiple=True, metavar="KEY=VALUE",
              help="Option for an external delegate library (repeatable).")
@click.option("--adb", is_flag=False, flag_value="", default=None, metavar="[SERIAL|all]",
              help="Run on an Android device with benchmark_model: the only one (no value), "
                   "SERIAL, or all connected devices in parallel.")
@click.option("--ssh", multiple=True, metavar="[USER@]HOST[:PORT]",
              help="Run on a Linux board over the system ssh client (repeatable: boards in "
                   "parallel).")
@click.option("--ssh-option", "ssh_options", multiple=True, metavar="OPTION",
              help="Extra `ssh -o OPTION` (repeatable), e.g. IdentityFile=~/.ssh/board.")
@click.option("--runner", type=click.Choice(["auto", "benchmark_model", "python"]),
              default="auto", show_default=True,
              help="On the device: TFLite's benchmark_model, or edgeopt's remote_bench.py "
                   "under the device's python3 (auto: benchmark_model when there is one).")
@click.option("--benchmark-binary", default=None, help="benchmark_model to use: a local file "
              "to push, or a path on the device (default: /data/local/tmp/benchmark_model or "
              "PATH).")
@click.option("--benchmark-arg", "benchmark_args", multiple=True,
              help="Extra flag passed to benchmark_model as is (repeatable).")
@click.option("--check-numerics", is_flag=True, help="Also run the same inputs without the "
              "delegate and report SQNR, max-abs difference and top-1 agreement.")
@click.option("--numerics-samples", type=click.IntRange(min=1), default=None,
              help=f"Inputs for --check-numerics (default {HOST_NUMERICS_SAMPLES} on the host, "
                   f"{ADB_NUMERICS_SAMPLES} over adb).")
@click.option("--inputs", default=None, help="Data for --check-numerics (.npz, .npy, images); "
              "default: seeded random inputs.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=600.0,
              show_default=True, help="Seconds before a device run, or any other step on a "
              "device (probe, push, pull), counts as hung.")
@click.option("--idle", "idle_s", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Seconds of idle power sampled before the run (the baseline).")
@click.option("--power-secs", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="With power sampling, the steady runs last at least this long (the gauge "
                   "needs samples; --runs is then a minimum).")
@click.option("--no-power", is_flag=True, help="Do not sample the battery.")
@click.option("--record", is_flag=False, flag_value="", default=None, metavar="[FILE]",
              help="Append each measurement as a JSON line (no value: the user cache file "
                   "that `edgeopt devices calibrate` reads).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object on stdout and nothing else there.")
def bench_command(models: tuple[str, ...], **options) -> None:
    """Measure latency, memory, power and numerics of MODELS, here, on phones over adb, or
    on Linux boards over ssh."""
    from edgeopt.devices.runners.report_text import render_outcome
    from edgeopt.quiet import library_output_to_log

    as_json = options.pop("as_json")
    config = config_from_options(models, options)
    progress = BenchProgress() if as_json else TerminalProgress()
    with library_output_to_log():
        outcome = run_bench(config, progress)
    if as_json:
        import json

        click.echo(json.dumps(outcome.to_json(), indent=2, default=str))
    else:
        click.echo(render_outcome(outcome))
    if outcome.errors:
        raise DeviceError(f"{len(outcome.errors)} of "
                          f"{len(outcome.errors) + len(outcome.measurements)} measurements "
                          f"failed; first: {outcome.errors[0]}")


def config_from_options(models: tuple[str, ...], options: dict) -> BenchConfig:
    """The command's flags as one BenchConfig (flag names are the config's, except these)."""
    models, adb = _models_and_adb(models, options.pop("adb"))
    options["delegate_options"] = _options(options["delegate_options"])
    options["record"] = _record_path(options["record"])
    options["power"] = not options.pop("no_power")
    return BenchConfig(models=tuple(Path(m) for m in models), adb=adb, **options)
