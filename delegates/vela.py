"""Arm Ethos-U through Arm's own compiler, Vela (pip package ``ethos-u-vela``).

Vela reads the int8 ``.tflite``, moves every op it can onto the NPU (replacing each NPU
region with one ``ethos-u`` custom op) and leaves the rest as ordinary TFLite CPU ops in
the ``*_vela.tflite`` it writes; that file is what an Ethos-U driver (TFLM + ethos-u
driver) runs. Placement, reasons, SRAM/flash use, cycles and inference time all come from
Vela's own output:

* per op: CPU if one of its output tensors is produced by a CPU op of the compiled model,
  else NPU; the reason is Vela's ``--show-cpu-operations`` warning for that op;
* figures: Vela's summary CSV (``--output-dir``), one row per network.

Run offline in a temporary directory, with the system configs of Vela's ``Arm/vela.ini``;
`edgeopt.delegates.ethosu` turns a run into a Placement.

    >>> run = run_vela(tflite, "ethos-u55-256", *system_for("ethos-u55-256"))  # doctest: +SKIP
    >>> run.summary["inference_time"], len(run.compiled) > 0                   # doctest: +SKIP
    ('0.00193', True)
"""

from __future__ import annotations

import csv
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgeopt.errors import DeviceError

CONFIG_FILE = "Arm/vela.ini"
# Accelerator -> (system config, memory mode) in Vela's Arm/vela.ini (REFERENCE.md).
SYSTEMS = {
    "ethos-u55": ("Ethos_U55_High_End_Embedded", "Shared_Sram"),
    "ethos-u65": ("Ethos_U65_High_End", "Dedicated_Sram"),
    "ethos-u85": ("Ethos_U85_SYS_DRAM_Mid", "Dedicated_Sram"),
}
_WARNING = re.compile(r"^Warning \(supported operators\) operator: (\w+), ofm: '(.*)'$")
NO_REASON = "Vela placed this op on the CPU"
FAILED = "Vela could not compile the model"


@dataclass(frozen=True)
class VelaRun:
    """What one Vela run produced: the compiled model, its summary row, CPU-op reasons."""

    compiled: bytes
    summary: dict[str, str]
    reasons: dict[str, str]
    stdout: str


def vela_command() -> list[str]:
    """How to start Vela: this interpreter's ``ethosu.vela`` module, else ``vela`` on PATH."""
    if importlib.util.find_spec("ethosu") and importlib.util.find_spec("ethosu.vela"):
        return [sys.executable, "-m", "ethosu.vela"]
    found = shutil.which("vela")
    if not found:
        raise DeviceError("Arm Vela is not installed: pip install ethos-u-vela")
    return [found]


def system_for(accelerator: str) -> tuple[str, str]:
    """Default (system config, memory mode) for an accelerator config name."""
    family = accelerator.rsplit("-", 1)[0]
    if family not in SYSTEMS:
        raise DeviceError(f"unknown Ethos-U accelerator '{accelerator}' "
                          f"(expected ethos-u55-*, ethos-u65-* or ethos-u85-*)")
    return SYSTEMS[family]


def run_vela(tflite: bytes, accelerator: str, system_config: str, memory_mode: str,
             timeout: float = 300) -> VelaRun:
    """Compile ``tflite`` with Vela in a temporary directory; DeviceError if it fails."""
    with tempfile.TemporaryDirectory(prefix="edgeopt-vela-") as tmp:
        model = Path(tmp) / "model.tflite"
        model.write_bytes(tflite)
        out = Path(tmp) / "out"
        args = [*vela_command(), "--accelerator-config", accelerator, "--config", CONFIG_FILE,
                "--system-config", system_config, "--memory-mode", memory_mode,
                "--output-dir", str(out), "--show-cpu-operations", str(model)]
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise DeviceError(f"{FAILED}: timed out after {timeout:.0f} s") from exc
        compiled = out / "model_vela.tflite"
        if proc.returncode != 0 or not compiled.exists():
            detail = _error_line(proc.stderr or proc.stdout)
            raise DeviceError(f"{FAILED}: {detail}")
        return VelaRun(compiled.read_bytes(), _summary(out), _reasons(proc.stdout), proc.stdout)


def _error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return (errors or lines or ["no output"])[-1][:300]


def _summary(folder: Path) -> dict[str, str]:
    files = sorted(folder.glob("*_summary_*.csv"))
    if not files:
        return {}
    with files[0].open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return rows[0] if rows else {}


def _reasons(stdout: str) -> dict[str, str]:
    """ofm tensor name -> Vela's reason (the lines after each supported-operators warning)."""
    reasons: dict[str, str] = {}
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        match = _WARNING.match(line.strip())
        if not match:
            continue
        body = []
        for nxt in lines[i + 1:]:
            if not nxt.strip() or _WARNING.match(nxt.strip()):
                break
            body.append(nxt.strip().removeprefix("Reason: "))
        reasons[match.group(2)] = " - ".join(body) or NO_REASON
    return reasons
