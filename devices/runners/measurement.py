"""One measurement of one model on one device: the `bench --json` record, and the JSON-lines
file that `edgeopt devices calibrate` fits profiles to.

    >>> append_record(default_records_path(), measurement)
    >>> [r["latency_ms"]["median"] for r in read_records(default_records_path())]

A record holds DESIGN.md's bench fields (`device`, `runs`, `latency_ms`, `init_ms`,
`power_mw`, `energy_mj`, `power_note`) plus what a fitter needs to tell measurements apart:
the model's sha256, size and format, the device's transport, serial and delegate, the tool.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from edgeopt.atomic import append_text
from edgeopt.devices.runners.stats import Latency
from edgeopt.errors import ConfigError
from edgeopt.inputs import CAPS, bounded_recursion, read_text

SCHEMA_VERSION = 1
RECORD_KIND = "edgeopt.bench"
_append_lock = threading.Lock()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class ModelInfo:
    path: str
    format: str
    sha256: str
    size_bytes: int

    @classmethod
    def of(cls, path: Path, fmt: str) -> ModelInfo:
        return cls(str(Path(path).resolve()), fmt, sha256_file(path), Path(path).stat().st_size)

    def to_json(self) -> dict:
        return {"path": self.path, "file": Path(self.path).name, "format": self.format,
                "sha256": self.sha256, "size_bytes": self.size_bytes}


@dataclass(frozen=True)
class DeviceInfo:
    """Where it ran: a profile name (or the phone's serial), its delegate and transport."""

    name: str
    kind: str | None
    delegate: str | None
    transport: str                   # host | adb | ssh
    serial: str | None = None
    product: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "delegate": self.delegate,
                "transport": self.transport, "serial": self.serial, "product": self.product}


@dataclass(frozen=True)
class Power:
    """Average power above idle while the model ran, and energy per inference."""

    power_mw: float | None = None
    energy_mj: float | None = None
    note: str | None = None
    detail: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Measurement:
    model: ModelInfo
    device: DeviceInfo
    tool: str
    runs: int
    warmup: int
    threads: int | None
    latency: Latency
    init_ms: float | None
    first_ms: float | None
    memory_mb: dict = field(default_factory=dict)
    power: Power = Power(note="power was not measured")
    numerics: dict | None = None
    notes: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def to_json(self) -> dict:
        """DESIGN.md's bench fields first, then the rest."""
        record = {"device": self.device.to_json(), "runs": self.runs,
                  "latency_ms": self.latency.to_json(), "init_ms": _round(self.init_ms),
                  "power_mw": _round(self.power.power_mw),
                  "energy_mj": _round(self.power.energy_mj, 6)}
        if self.power.note:
            record["power_note"] = self.power.note
        record.update({
            "model": self.model.to_json(), "tool": self.tool, "warmup": self.warmup,
            "threads": self.threads, "first_ms": _round(self.first_ms),
            "memory_mb": {k: _round(v) for k, v in self.memory_mb.items()},
            "power": self.power.detail or None, "numerics": self.numerics,
            "notes": list(self.notes), **self.extra, "created": self.created})
        return record


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def default_records_path() -> Path:
    """Where `--record` with no file appends, and where calibrate looks by default."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "edgeopt" / "measurements.jsonl"


def append_record(path: Path, measurement: Measurement) -> None:
    """Append one line as soon as a measurement is made: later failures cannot lose it."""
    line = json.dumps({"schema_version": SCHEMA_VERSION, "kind": RECORD_KIND,
                       **measurement.to_json()}, default=str) + "\n"
    with _append_lock:
        append_text(path, line, make_parents=True)


def read_records(path: Path) -> list[dict]:
    """Every bench record in a JSON-lines file; a bad line names the file and line."""
    records = []
    lines = read_text(path, "measurements file", ConfigError, CAPS["records"]).splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            with bounded_recursion():
                record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        except RecursionError:
            raise ConfigError(f"{path}:{number}: JSON nested too deeply to be a record") from None
        if not isinstance(record, dict) or record.get("kind") != RECORD_KIND \
                or record.get("schema_version") != SCHEMA_VERSION:
            raise ConfigError(f"{path}:{number}: not an edgeopt bench record of schema "
                              f"version {SCHEMA_VERSION}")
        records.append(record)
    return records
