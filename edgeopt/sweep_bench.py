"""`edgeopt sweep --bench host` / `--adb SERIAL`: each built candidate measured for real.

    >>> targets = bench_targets("host", None)
    >>> [t.name for t in targets]
    ['host']

After the builds, each candidate's artifact (the bundle's model file, .tflite or .onnx) is
run by `edgeopt bench`'s machinery (edgeopt.bench.run_bench): on this machine for the
candidates of the host's own profile (`host-cpu`), over adb on the phone SERIAL for every
other device, with that device's delegate. The measurement is kept in the candidate's
point (`bench[TARGET]`, and `measured`: the one the front uses), so a sweep run again
measures only what is not measured yet. Benching runs one candidate at a time, in the
process that started the sweep, after every build has ended: a measurement never shares
the machine with a build of the same sweep.

A candidate that cannot be measured (no delegate on the phone, a lost device) keeps its
build and gets the error in place of the figures; `--retry-failed` measures it again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from edgeopt.bench import BenchConfig, run_bench
from edgeopt.devices.runners import adb
from edgeopt.errors import ConfigError, EdgeoptError, first_line
from edgeopt.sweep_cache import Store

HOST_DEVICE = "host-cpu"  # the profile of this machine: what `--bench host` measures
BENCH_CHOICES = ("host",)
Progress = Callable[[str], None]


@dataclass(frozen=True)
class BenchTarget:
    """Where candidates are measured: this machine, or one phone over adb."""

    serial: str | None = None  # None: this machine

    @property
    def name(self) -> str:
        return "host" if self.serial is None else f"adb:{self.serial}"

    def takes(self, device: str) -> bool:
        """This machine measures its own profile; a phone measures every other device."""
        return (device == HOST_DEVICE) == (self.serial is None)

    def config(self, model: Path, device: str) -> BenchConfig:
        if self.serial is None:
            return BenchConfig(models=(model,))
        return BenchConfig(models=(model,), device=device, adb=self.serial)


def bench_targets(bench: str | None, adb: str | None) -> tuple[BenchTarget, ...]:
    """The targets of `--bench host` and `--adb SERIAL` (none: nothing is measured)."""
    if bench is not None and bench not in BENCH_CHOICES:
        raise ConfigError(f"--bench must be one of {', '.join(BENCH_CHOICES)} (a phone: "
                          "--adb SERIAL)")
    if adb is not None and not adb.strip():
        raise ConfigError("--adb needs the phone's serial (`adb devices` lists them)")
    targets = [BenchTarget()] if bench else []
    return tuple(targets + ([BenchTarget(adb)] if adb is not None else []))


def check_targets(targets: tuple[BenchTarget, ...]) -> None:
    """A phone that is not connected is one error before any build, not one per candidate."""
    for target in targets:
        if target.serial is None:
            continue
        rows = adb.list_devices(adb.AdbClient(binary=adb.adb_binary()))
        ready = [serial for serial, state, _ in rows if state == "device"]
        if target.serial not in ready:
            listed = ", ".join(ready) or "none"
            raise adb.AdbError(f"--adb {target.serial}: no such device is connected (ready: "
                               f"{listed}; for a device over TCP: adb connect HOST:PORT)")


def _summary(target: BenchTarget, record: dict) -> dict:
    """The figures a sweep shows of one measurement (the whole record is kept beside)."""
    latency = record["latency_ms"]
    central = latency["median"] if latency.get("median") is not None else latency["mean"]
    high = latency["p90"] if latency.get("p90") is not None else latency["max"]
    spread = [latency["min"], high] if latency.get("min") is not None and high is not None \
        else None
    return {"target": target.name, "latency_ms": central, "spread_ms": spread,
            "statistic": "median" if latency.get("median") is not None else "mean",
            "runs": record["runs"], "tool": record["tool"],
            "energy_mj": record.get("energy_mj"), "error": None, "record": record}


def measure(target: BenchTarget, bundle: Path, device: str) -> dict:
    """One candidate's bundle measured on `target`; an error is a record with its message."""
    try:
        manifest = json.loads((bundle / "manifest.json").read_text())
        model = bundle / manifest["model"]["file"]
        outcome = run_bench(target.config(model, device))
        return _summary(target, outcome.measurements[0].to_json())
    except (EdgeoptError, OSError, ValueError, KeyError) as exc:
        return {"target": target.name, "latency_ms": None, "error": first_line(exc)}


def _due(point: dict | None, target: BenchTarget, retry_failed: bool) -> bool:
    if point is None or point["status"] != "ok" or not target.takes(point["config"]["device"]):
        return False
    done = (point.get("bench") or {}).get(target.name)
    return done is None or (retry_failed and done.get("error") is not None)


def bench_points(keys: Iterable[str], store: Store, targets: tuple[BenchTarget, ...],
                 progress: Progress, retry_failed: bool = False) -> int:
    """Measure every built point a target takes and has not measured; returns how many."""
    measured = 0
    for key in keys:
        for target in targets:
            point = store.point(key)
            if not _due(point, target, retry_failed):
                continue
            progress(f"bench {point['label']} on {target.name}")
            result = measure(target, store.bundle(key), point["config"]["device"])
            point["bench"] = {**(point.get("bench") or {}), target.name: result}
            if result["error"] is None:  # the figures the front uses, without the record
                point["measured"] = {k: v for k, v in result.items() if k != "record"}
            store.save(key, point, None)
            measured += 1
    return measured
