"""`edgeopt devices calibrate`: measure, fit the efficiency factors, write the profile.

On this host: micro-benchmarks (microbench.py) run with the real LiteRT interpreter. For a
phone or board: the bench records (`edgeopt bench ... --record`, JSON lines) of models
measured there. Either way the measurements become `fit.Sample`s, and the fitted profile
goes to the user's profile folder, where `load_profile` finds it first.

    >>> result = calibrate(CalibrationConfig("host-cpu", threads=1))   # doctest: +SKIP
    >>> result.path, round(result.fit.rms_error, 3)                    # doctest: +SKIP
    (PosixPath('/root/.cache/edgeopt/profiles/host-cpu.toml'), 0.061)
"""

from __future__ import annotations

import json
import tempfile
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from edgeopt.atomic import check_output_path, write_file_atomic
from edgeopt.devices.fit import FitConfig, FitResult, Sample, fit_profile
from edgeopt.devices.hostinfo import HostCpu, host_cpu_info
from edgeopt.devices.microbench import micro_models
from edgeopt.devices.profile import (
    USER_CACHE,
    _profile_files,
    load_profile,
    parse_profile,
    user_profile_dir,
)
from edgeopt.devices.runners.measurement import read_records
from edgeopt.errors import ConfigError
from edgeopt.tflite_reader import read_tflite

HOST_DEVICE = "host-cpu"


@dataclass(frozen=True)
class CalibrationConfig:
    device: str = HOST_DEVICE
    threads: int = 1
    quick: bool = False                   # two shapes per micro-benchmark family
    records: Path | None = None           # bench JSON lines measured on the device
    output: Path | None = None            # default: the user profile folder
    min_runs: int = 10
    min_time_s: float = 0.15


@dataclass(frozen=True)
class Calibration:
    path: Path
    fit: FitResult
    samples: int
    host: HostCpu | None
    device: str = HOST_DEVICE

    @property
    def usage(self) -> str:
        """How later commands pick the fitted profile up (only the user cache is automatic)."""
        cached = user_profile_dir() / f"{self.device}.toml"
        if self.path.resolve() == cached.resolve():
            return f"`--device {self.device}` now uses it"
        return (f"use it with `--device {self.path}` (`--device {self.device}` still uses "
                f"{'the profile in ' + str(cached) if cached.is_file() else 'the shipped one'};"
                f" leave out -o to store it there)")


def measure_ms(tflite: bytes, threads: int = 1, min_runs: int = 10,
               min_time_s: float = 0.15, warmup: int = 3, clock: str = "auto") -> float:
    """Median LiteRT invoke time in ms: at least ``min_runs`` runs and ``min_time_s``.

    ``clock`` "cpu" times the calling thread's CPU time, which on one interpreter thread
    (XNNPACK runs on the caller) equals the latency of an idle machine but ignores time
    the thread spends preempted by other work; "wall" is the plain wall time; "auto" is
    "cpu" for one thread and "wall" otherwise.
    """
    from ai_edge_litert.interpreter import Interpreter

    timer = time.thread_time if (clock == "cpu" or (clock == "auto" and threads == 1)) \
        else time.perf_counter
    interpreter = Interpreter(model_content=tflite, num_threads=threads)
    interpreter.allocate_tensors()
    rng = np.random.default_rng(0)
    for detail in interpreter.get_input_details():
        values = rng.integers(-100, 100, detail["shape"]) if detail["dtype"] != np.float32 \
            else rng.random(detail["shape"])
        interpreter.set_tensor(detail["index"], values.astype(detail["dtype"]))
    for _ in range(warmup):
        interpreter.invoke()
    times: list[float] = []
    deadline = time.perf_counter() + min_time_s
    while len(times) < min_runs or time.perf_counter() < deadline:
        start = timer()
        interpreter.invoke()
        times.append(timer() - start)
    return float(np.median(times) * 1e3)


def micro_samples(threads: int = 1, quick: bool = False, min_runs: int = 10,
                  min_time_s: float = 0.15,
                  progress: Callable[[str], None] | None = None) -> list[Sample]:
    """Build and time every micro-benchmark on this host."""
    samples = []
    for model in micro_models(limit=2 if quick else None):
        ms = measure_ms(model.tflite, threads, min_runs, min_time_s)
        samples.append(Sample(model.label, read_tflite(model.tflite), ms / 1e3,
                              model=model.tflite))
        if progress:
            progress(f"{model.label}: {ms:.3f} ms")
    return samples


def record_samples(path: Path, device: str) -> list[Sample]:
    """Samples from bench records of ``device`` whose .tflite model file still exists."""
    samples = []
    for record in read_records(path):
        name = (record.get("device") or {}).get("name")
        model = Path((record.get("model") or {}).get("path", ""))
        median = (record.get("latency_ms") or {}).get("median")
        if name == device and model.suffix == ".tflite" and model.is_file() and median:
            samples.append(Sample(model.name, read_tflite(model), median / 1e3, model=model))
    if not samples:
        raise ConfigError(f"{path} has no bench records of device '{device}' with a .tflite "
                          "model file that still exists")
    return samples


def calibrate(config: CalibrationConfig, extra_samples: Sequence[Sample] = (),
              progress: Callable[[str], None] | None = None) -> Calibration:
    """Measure (or read records), fit, write the fitted profile; see the module doc."""
    if config.output is not None:  # a bad -o fails before the measurements, not after
        check_output_path(config.output, make_parents=True)
        check_output_path(fit_report_path(config.output), make_parents=True)
    base = load_profile(config.device)
    if base.origin == USER_CACHE:  # calibrating again starts from the shipped numbers
        base = _shipped(config.device)
    host = None
    samples = list(extra_samples)
    if config.records:
        samples += record_samples(config.records, base.name)
    elif config.device == HOST_DEVICE:
        host = host_cpu_info()
        base = parse_profile(_write_toml(_host_tables(base.path, host, config.threads),
                                         _scratch_path()))
        samples += micro_samples(config.threads, config.quick, config.min_runs,
                                 config.min_time_s, progress)
    else:
        raise ConfigError(f"calibrating {config.device} needs measurements taken on it: "
                          "pass --records with `edgeopt bench --record` output")
    fit = fit_profile(samples, base, FitConfig())
    source = _source(config, host, fit)
    raw = _fitted_tables(base.path, fit, source)
    path = _write_toml(raw, config.output or user_profile_dir() / f"{base.name}.toml")
    parse_profile(path)
    _write_report(path, fit, host, config)
    return Calibration(path, fit, len(samples), host, base.name)


def _shipped(name: str):
    return parse_profile(_profile_files()[name])


def _source(config: CalibrationConfig, host: HostCpu | None, fit: FitResult) -> str:
    where = f"micro-benchmarks on {host.model}" if host else f"bench records {config.records}"
    day = datetime.now(UTC).date().isoformat()
    return (f"fitted by edgeopt devices calibrate {config.device} on {day}: {where}, "
            f"{len(fit.errors)} measurements, {config.threads} thread(s), rms error "
            f"{fit.rms_error:.1%}")


def _host_tables(path: str, host: HostCpu, threads: int) -> dict:
    """The shipped host profile with this machine's cores, clock, peaks and cache."""
    raw = tomllib.loads(Path(path).read_text("utf-8"))
    measured = f"measured: /proc/cpuinfo and sysfs of this host ({host.model})"
    for unit in raw["units"].values():
        _host_unit(unit, host, threads, measured)
    if host.cache_bytes:
        raw["memory"]["cache"]["capacity"] = {"value": host.cache_bytes, "source": measured}
    if host.l2_bytes and "l2" in raw["memory"]:
        raw["memory"]["l2"]["capacity"] = {"value": host.l2_bytes, "source": measured}
    return raw


def _host_unit(unit: dict, host: HostCpu, threads: int, measured: str) -> None:
    used = min(threads, host.cores)
    unit["cores"] = {"value": host.cores, "source": measured}
    unit["clock"] = {"value": host.clock_hz, "source": measured}
    unit["threads"] = {"value": threads, "source": "edgeopt devices calibrate --threads"}
    unit["peak_ops"] = {
        "float32": {"value": used * host.clock_hz * host.flops_per_cycle,
                    "source": f"derived: {used} thread(s) x clock x {host.flops_per_cycle} "
                              f"FLOP/cycle from the CPU flags ({measured})"},
        "int8": {"value": used * host.clock_hz * host.int8_ops_per_cycle,
                 "source": f"derived: {used} thread(s) x clock x {host.int8_ops_per_cycle} "
                           f"int8 ops/cycle from the CPU flags ({measured})"}}


def _fitted_tables(path: str, fit: FitResult, source: str) -> dict:
    """The profile's TOML tables with every fitted value as ``{value, source}``."""
    raw = tomllib.loads(Path(path).read_text("utf-8"))
    for key, value in fit.values.items():
        figure = {"value": _round(value), "source": source}
        if key[0] == "sync":
            raw["links"][key[1]]["latency"] = figure
            continue
        if key[0] == "bw":
            raw["memory"][key[1]]["bandwidth"] = {"value": _round(1.0 / value),
                                                  "source": source}
            continue
        unit = raw["units"][key[1]]
        if key[0] == "eff":
            table = unit["efficiency"].setdefault(key[2], {"source": source})
            table[key[3]] = {"value": _round(1.0 / value), "source": source}
        elif key[0] == "ovh":
            unit["overhead"][key[2]] = figure
        else:
            unit["invoke_overhead"] = figure
    if not raw["description"].endswith("[calibrated]"):
        raw["description"] = f"{raw['description']} [calibrated]"
    return raw


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def _scratch_path() -> Path:
    return Path(tempfile.mkdtemp(prefix="edgeopt-calibrate-")) / "host-cpu.toml"


def _write_toml(raw: dict, path: Path) -> Path:
    """Write atomically: a crash never leaves a half-written profile."""
    import tomli_w

    return write_file_atomic(path, tomli_w.dumps(raw), make_parents=True)


def fit_report_path(profile: Path) -> Path:
    """Where the fit report of a written profile goes: `NAME.fit.json` beside it."""
    return Path(profile).with_suffix(".fit.json")


def _write_report(path: Path, fit: FitResult, host: HostCpu | None,
                  config: CalibrationConfig) -> None:
    report = {"profile": str(path), "device": config.device, "threads": config.threads,
              "host": host.describe() if host else None, "fit": fit.to_json()}
    write_file_atomic(fit_report_path(path), json.dumps(report, indent=2) + "\n")
