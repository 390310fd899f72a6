"""Device profiles: one TOML file per device, validated into a frozen dataclass.

    >>> from edgeopt.devices.profile import load_profile
    >>> load_profile("pixel-npu").precision
    'int8'

A profile separates what the device's delegate accepts (kind, delegate, precision,
IO dtype, formats) from the numbers behind estimates, which the devices issue adds in
their own tables, each with its source.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import get_origin, get_type_hints

from edgeopt.errors import DeviceError

SCHEMA_VERSION = 1
KINDS = ("cpu", "gpu", "npu", "tpu")
RUNTIMES = ("litert", "onnxruntime")
PRECISIONS = ("int8", "fp16", "float32")
IO_DTYPES = ("int8", "uint8", "float32")
FORMATS = ("tflite", "onnx")


@dataclass(frozen=True)
class DeviceProfile:
    schema_version: int
    name: str
    kind: str
    description: str
    delegate: str
    runtime: str
    precision: str
    io_dtype: str
    formats: tuple[str, ...]
    source: str

    def summary(self) -> dict:
        """The fields `edgeopt devices --json` lists."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "schema_version"}


_CHOICES = {
    "kind": KINDS,
    "runtime": RUNTIMES,
    "precision": PRECISIONS,
    "io_dtype": IO_DTYPES,
}


def _profile_files() -> dict[str, Path]:
    folder = resources.files("edgeopt.devices.profiles")
    return {Path(p.name).stem: Path(str(p)) for p in folder.iterdir() if p.name.endswith(".toml")}


def profile_names() -> list[str]:
    """Names of the profiles shipped with edgeopt, sorted."""
    return sorted(_profile_files())


def _fail(path: Path, field: str, why: str) -> DeviceError:
    return DeviceError(f"device profile {path}: field '{field}' {why}")


def _check_field(path: Path, raw: dict, name: str, kind: type):
    if name not in raw:
        raise _fail(path, name, "is missing")
    value = raw[name]
    if kind is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _fail(path, name, f"must be a list of strings, got {value!r}")
        bad = [v for v in value if v not in FORMATS]
        if bad or not value:
            raise _fail(path, name, f"must list formats from {', '.join(FORMATS)}, got {value!r}")
        return tuple(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _fail(path, name, f"must be {kind.__name__}, got {value!r}")
    choices = _CHOICES.get(name)
    if choices and value not in choices:
        raise _fail(path, name, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


def parse_profile(path: Path) -> DeviceProfile:
    """Read and validate one profile file; a bad file names the file and the field."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise DeviceError(f"cannot read device profile {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise DeviceError(f"device profile {path} is not valid TOML: {exc}") from exc
    version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        raise _fail(path, "schema_version", f"must be {SCHEMA_VERSION}, got {version!r}")
    types = {name: get_origin(hint) or hint for name, hint in get_type_hints(DeviceProfile).items()}
    values = {name: _check_field(path, raw, name, kind) for name, kind in types.items()}
    return DeviceProfile(**values)


def load_profile(name_or_path: str) -> DeviceProfile:
    """A shipped profile by name, or a user's profile file by path."""
    files = _profile_files()
    if name_or_path in files:
        return parse_profile(files[name_or_path])
    if name_or_path.endswith(".toml"):
        path = Path(name_or_path)
        if not path.is_file():
            raise DeviceError(f"device profile file not found: {name_or_path}")
        return parse_profile(path)
    raise DeviceError(
        f"unknown device '{name_or_path}'; known devices: {', '.join(sorted(files))} "
        "(or a path to a profile .toml)"
    )


def all_profiles() -> list[DeviceProfile]:
    return [load_profile(name) for name in profile_names()]
