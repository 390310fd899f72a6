"""Helpers shared by the benchmark scripts: paths, machine facts, tables, JSON results.

Importing this module imports no framework (no TensorFlow), so the scripts that time
`edgeopt` from the outside stay light.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "benchmarks" / "results"


def edgeopt_command() -> list[str]:
    """The installed `edgeopt` console script, or the module as a fallback."""
    found = shutil.which("edgeopt")
    return [found] if found else [sys.executable, "-m", "edgeopt.cli"]


def subprocess_env() -> dict[str, str]:
    """This process's environment with TensorFlow's C++ logging quietened.

    PYTHONDONTWRITEBYTECODE is dropped: an installed edgeopt has its bytecode cached (pip
    compiles it at install; an editable install writes it on first import), and with the
    variable set every start compiles ~300 modules again (~0.6 s of CPU a process, which
    was most of what an identical sweep re-run measured)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def cpu_model() -> str:
    """'model name' from /proc/cpuinfo, with family/model numbers when present."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or "unknown"
    name = fields.get("model name", "unknown")
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages: other work on the machine skews timings."""
    return [round(v, 2) for v in os.getloadavg()]


def git_state() -> dict[str, Any]:
    """The commit measured, and the files outside benchmarks/ that differ from it."""
    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return proc.stdout.rstrip("\n") if proc.returncode == 0 else ""

    changed = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no")
               .splitlines() if not line[3:].startswith("benchmarks/")]
    return {"commit": git("rev-parse", "--short", "HEAD") or None,
            "uncommitted_changes_outside_benchmarks": changed}


def _busy_cpu_seconds() -> float:
    """CPU seconds all processes on the machine have used since boot (idle excluded)."""
    import psutil

    times = psutil.cpu_times()
    return sum(v for k, v in times._asdict().items() if k not in ("idle", "iowait", "guest",
                                                                  "guest_nice"))


def _own_cpu_seconds() -> float:
    """CPU seconds of this process and its waited-for children."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


class ForeignLoad:
    """Measures how much CPU other processes took while a benchmark ran:
    `with ForeignLoad() as load: ...`, then `load.result()`. A share near 0 means the
    machine was ours; 0.5 means other work took half of all cores."""

    def __enter__(self) -> ForeignLoad:
        self._start = (time.perf_counter(), _busy_cpu_seconds(), _own_cpu_seconds())
        return self

    def __exit__(self, *exc: object) -> None:
        self._end = (time.perf_counter(), _busy_cpu_seconds(), _own_cpu_seconds())

    def result(self) -> dict[str, float]:
        wall = self._end[0] - self._start[0]
        busy = self._end[1] - self._start[1]
        own = self._end[2] - self._start[2]
        other = max(busy - own, 0.0)
        return {"wall_seconds": round(wall, 3), "own_cpu_seconds": round(own, 3),
                "other_cpu_seconds": round(other, 3),
                "other_share_of_all_cores": round(other / (wall * (os.cpu_count() or 1)), 3)}


# The distributions whose versions decide a benchmark's figures (PyPI names).
MEASURED_PACKAGES = ("edgeopt", "tensorflow", "ai-edge-litert", "ai-edge-quantizer", "onnx",
                     "onnxruntime", "onnx2tf", "tf2onnx", "keras", "numpy", "ethos-u-vela")
# CPU features that pick int8 kernels: without VNNI, onnxruntime's x86 uint8 x int8 kernels
# saturate (see calibration/onnx_backend.py), so the same model measures differently.
INT8_CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm")


def package_versions() -> dict[str, str | None]:
    """Installed version of each of `MEASURED_PACKAGES` (None: not installed), plus the
    Python version and platform: what made a result, read without importing any of them."""
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str | None] = {}
    for name in MEASURED_PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    versions["python"] = platform.python_version()
    versions["platform"] = platform.platform()
    return versions


def cpu_int8_flags() -> list[str]:
    """Which of `INT8_CPU_FLAGS` /proc/cpuinfo lists (x86 'flags', ARM 'Features')."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    words = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            words.update(value.split())
    return [flag for flag in INT8_CPU_FLAGS if flag in words]


def machine_info() -> dict[str, Any]:
    return {
        "cpu_model": cpu_model(),
        "cpu_int8_flags": cpu_int8_flags(),
        "logical_cores": os.cpu_count(),
        "load_average_at_end": load_average(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def summarize(seconds: Sequence[float]) -> dict[str, float]:
    """Median, min and max of timings, in seconds."""
    return {"median": statistics.median(seconds), "min": min(seconds), "max": max(seconds),
            "n": len(seconds)}


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain left-aligned text table on stdout."""
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for index, row in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if index == 0:
            print("  ".join("-" * w for w in widths))


def write_results(name: str, data: dict[str, Any], directory: Path = RESULTS_DIR) -> Path:
    """Write `data` (plus the machine facts, the commit and the package versions) as
    `<directory>/<name>.json`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    record = {"benchmark": name, "machine": machine_info(), "source": git_state(),
              "package_versions": package_versions(), **data}
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path
