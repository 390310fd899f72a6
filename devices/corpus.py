"""The measured-latency corpus: published on-device latencies, one CSV row each.

    >>> from edgeopt.devices.corpus import load_corpus
    >>> rows = load_corpus()
    >>> sorted({row.runtime for row in rows})[:2]
    ['onnx', 'qnn']

Every CSV file in ``devices/measurements/`` holds rows with the columns of
`Measurement`; its README.md says what each column means and where each file came from.
A bad row fails with the file name, the row number and the column.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

from edgeopt.errors import DeviceError

PRECISIONS = ("int8", "fp16", "fp32", "w8a16", "w16a16", "w4a16", "w8a16_mixed_int16",
              "w8a16_mixed_fp16", "w8a8_mixed_int16", "unknown")
RUNTIMES = ("tflite", "qnn", "onnx", "snpe", "enn", "synap")
COMPUTE_UNITS = ("npu", "gpu", "cpu", "edgetpu", "unknown")
DELEGATES = ("qnn-htp", "qnn-gpu", "qnn-cpu", "gpu", "metal", "cpu", "nnapi", "edgetpu",
             "enn-npu", "ethos-u", "timvx", "synap-npu")
OPTIONAL_INT = ("threads", "layers_npu", "layers_gpu", "layers_cpu")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class Measurement:
    """One published latency: a model run on a device by a runtime, with its source."""

    model: str
    model_family: str
    input_shape: str
    precision: str
    precision_label: str
    device: str
    soc: str
    runtime: str
    runtime_detail: str
    delegate: str
    compute_unit: str
    threads: int | None
    latency_ms: float
    layers_npu: int | None
    layers_gpu: int | None
    layers_cpu: int | None
    source: str
    date: str
    note: str


COLUMNS = tuple(f.name for f in fields(Measurement))
_REQUIRED = ("model", "model_family", "precision", "device", "soc", "runtime", "delegate",
             "compute_unit", "latency_ms", "source")
_CHOICES = {"precision": PRECISIONS, "runtime": RUNTIMES, "compute_unit": COMPUTE_UNITS,
            "delegate": DELEGATES}


def measurements_dir() -> Path:
    """The corpus folder shipped with edgeopt."""
    return Path(str(resources.files("edgeopt.devices"))) / "measurements"


def load_corpus(folder: Path | None = None) -> tuple[Measurement, ...]:
    """All rows of every ``*.csv`` in ``folder`` (default: the shipped corpus), in file order.

    Raises DeviceError naming the file, row and column of the first bad row.
    """
    folder = Path(folder) if folder is not None else measurements_dir()
    files = sorted(folder.glob("*.csv"))
    if not files:
        raise DeviceError(f"no measurement files (*.csv) in {folder}")
    return tuple(row for path in files for row in load_file(path))


def load_file(path: Path) -> list[Measurement]:
    """Rows of one corpus CSV; raises DeviceError on a wrong header or a bad row."""
    with Path(path).open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise DeviceError(f"{path}: header must be {','.join(COLUMNS)}")
        # Row 1 is the header, so data rows count from 2 as an editor shows them.
        return [_parse_row(path, number, raw) for number, raw in enumerate(reader, start=2)]


def _parse_row(path: Path, number: int, raw: dict) -> Measurement:
    where = f"{path.name} row {number}"
    if None in raw or any(value is None for value in raw.values()):
        raise DeviceError(f"{where}: expected {len(COLUMNS)} columns")
    values = {name: raw[name].strip() for name in COLUMNS}
    for name in _REQUIRED:
        if not values[name]:
            raise DeviceError(f"{where}: column {name} is empty")
    for name, choices in _CHOICES.items():
        if values[name] not in choices:
            raise DeviceError(f"{where}: {name} {values[name]!r} is not one of "
                              f"{', '.join(choices)}")
    if values["date"] and not _DATE.match(values["date"]):
        raise DeviceError(f"{where}: date {values['date']!r} is not YYYY-MM-DD")
    parsed: dict = dict(values, latency_ms=_latency(where, values["latency_ms"]))
    for name in OPTIONAL_INT:
        parsed[name] = _optional_int(where, name, values[name])
    return Measurement(**parsed)


def _latency(where: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DeviceError(f"{where}: latency_ms {text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise DeviceError(f"{where}: latency_ms {text!r} must be a positive number")
    return value


def _optional_int(where: str, name: str, text: str) -> int | None:
    if not text:
        return None
    if not text.isdigit():
        raise DeviceError(f"{where}: {name} {text!r} is not a whole number")
    return int(text)
