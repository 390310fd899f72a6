"""Device profiles: one TOML file per device, validated into a frozen dataclass.

    >>> from edgeopt.devices.profile import load_profile
    >>> load_profile("pixel-npu").precision
    'int8'

A profile separates what the device's delegate accepts (kind, delegate, precision,
IO dtype, formats) from the numbers behind estimates (`hardware`: compute units, memory,
links, power; see hardware.py), each with its source.

A profile of the same name in the user's profile folder (``$XDG_CACHE_HOME/edgeopt/
profiles``, where `edgeopt devices calibrate` writes) takes precedence over the shipped one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import get_origin, get_type_hints

from edgeopt.devices.figures import TableReader
from edgeopt.devices.fitted import FitBasis, apply_fit, basis_text, parse_fit
from edgeopt.devices.hardware import Hardware, parse_hardware
from edgeopt.errors import DeviceError
from edgeopt.inputs import CAPS, read_toml

# Version 2 added the hardware tables (units, memory, links, power).
SCHEMA_VERSION = 2
KINDS = ("cpu", "gpu", "npu", "tpu")
RUNTIMES = ("litert", "onnxruntime")
PRECISIONS = ("int8", "fp16", "float32")
IO_DTYPES = ("int8", "uint8", "float32")
FORMATS = ("tflite", "onnx")
SHIPPED, USER_CACHE = "shipped", "user cache"


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
    hardware: Hardware | None = field(repr=False, compare=False, default=None)
    path: str = field(repr=False, compare=False, default="")
    # where load_profile found it: "shipped", "user cache" (calibrated here) or "file"
    origin: str = field(repr=False, compare=False, default="file")
    # the [fit] table (fitted.py): what the figures were fitted to; None for a prior
    fit: FitBasis | None = field(repr=False, compare=False, default=None)

    @property
    def basis(self) -> str:
        """``fitted: N rows, CV median error X%``, ``validated: ...`` or ``prior: unvalidated``."""
        return basis_text(self.fit)

    def tables(self) -> Hardware:
        """The hardware tables the estimator reads; DeviceError when the profile has none."""
        if self.hardware is None:
            raise DeviceError(f"device profile {self.name} has no hardware tables to estimate "
                              "from")
        return self.hardware

    def summary(self) -> dict:
        """The fields `edgeopt devices --json` lists."""
        record = {f.name: getattr(self, f.name) for f in fields(self)
                  if f.name not in ("schema_version", "hardware", "path", "origin", "fit")}
        record["basis"] = self.basis
        if self.hardware is not None:
            record["main_unit"] = self.hardware.main_unit
            record["units"] = {name: {"kind": u.kind,
                                      "peak_ops": {d: f.value for d, f in u.peak_ops.items()}}
                               for name, u in self.hardware.units.items()}
        record["file"] = self.path
        record["origin"] = self.origin
        return record


_CHOICES = {
    "kind": KINDS,
    "runtime": RUNTIMES,
    "precision": PRECISIONS,
    "io_dtype": IO_DTYPES,
}


def _profile_files() -> dict[str, Path]:
    folder = resources.files("edgeopt.devices.profiles")
    return {Path(p.name).stem: Path(str(p)) for p in folder.iterdir() if p.name.endswith(".toml")}


def user_profile_dir() -> Path:
    """Where calibrated profiles live: ``$XDG_CACHE_HOME/edgeopt/profiles``."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "edgeopt" / "profiles"


def _user_profile(name: str) -> Path | None:
    path = user_profile_dir() / f"{name}.toml"
    return path if path.is_file() else None


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


def _check_delegate_name(path: Path, delegate: str) -> None:
    """A profile names its delegate; it never points at a library to load. A profile can be
    given by a config file found in the working folder, and a library path there would run
    its code (delegate libraries come from `--delegate PATH` on the command line)."""
    if "/" in delegate or "\\" in delegate or delegate.endswith((".so", ".dll", ".dylib")) \
            or ".so." in delegate:
        raise _fail(path, "delegate", f"must name a delegate (xnnpack, gpu, edgetpu, ...), "
                    f"not a library ({delegate!r}); give a library with --delegate PATH")


def parse_profile(path: Path, fitted: bool = True) -> DeviceProfile:
    """Read and validate one profile file; a bad file names the file and the field.

    ``fitted`` False reads the prior figures only (the ``[fit]`` table ignored)."""
    raw = read_toml(path, "device profile", DeviceError, CAPS["profile"])
    version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        raise _fail(path, "schema_version", f"must be {SCHEMA_VERSION}, got {version!r} "
                    "(version 2 adds the [units], [memory], [links] and [power] tables; "
                    "see the shipped profiles in edgeopt/devices/profiles)")
    hints = get_type_hints(DeviceProfile)
    types = {f.name: get_origin(hints[f.name]) or hints[f.name]
             for f in fields(DeviceProfile) if f.name not in ("hardware", "path", "origin", "fit")}
    values = {name: _check_field(path, raw, name, kind) for name, kind in types.items()}
    _check_delegate_name(path, values["delegate"])
    hardware = parse_hardware(TableReader(path, "", raw))
    fit = parse_fit(path, raw) if fitted else None
    if fit is not None:
        try:
            hardware = apply_fit(hardware, fit)
        except KeyError as exc:
            raise _fail(path, "fit", f"names unknown unit, memory level or link {exc}") \
                from None
    return DeviceProfile(**values, hardware=hardware, path=str(path), fit=fit)


def load_profile(name_or_path: str) -> DeviceProfile:
    """A profile by name (the user's calibrated one first, then the shipped one) or by path."""
    files = _profile_files()
    if not name_or_path.endswith(".toml") and (user := _user_profile(name_or_path)):
        return replace(parse_profile(user), origin=USER_CACHE)
    if name_or_path in files:
        return replace(parse_profile(files[name_or_path]), origin=SHIPPED)
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
    """Every shipped profile name, each loaded as `load_profile` would (calibrated first)."""
    return [load_profile(name) for name in profile_names()]
