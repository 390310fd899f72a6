"""The resolved configuration: flags over a config file over defaults.

Where a value comes from, highest first:

1. a flag on the command line;
2. the config file: `--config FILE` if given, else `edgeopt.toml` in the current folder
   (one file, never both);
3. the defaults below (and each command's own defaults).

A config file holds one table per command (`[build]`, `[bench]`, `[devices.calibrate]`, ...);
keys outside any table belong to `build`. Paths in a file are relative to the file, so a
bundle's `edgeopt.toml` (which holds the config that made it) rebuilds it from any folder:
`edgeopt build --config dist/edgeopt.toml`. An unknown key or a value of the wrong type is
an error naming the key and the file.

    >>> cfile = load_config_file("edgeopt.toml")                       # doctest: +SKIP
    >>> resolve_build({"device": "coral-usb"}, cfile).sources["device"]  # doctest: +SKIP
    'command line'
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from types import UnionType
from typing import Union, get_args, get_origin, get_type_hints

from edgeopt.errors import ConfigError
from edgeopt.inputs import CAPS, read_toml

CONFIG_NAME = "edgeopt.toml"
DEFAULT_DEVICE = "host-cpu"
ALL_DEVICES = "all"
COMMAND_LINE = "command line"
DEFAULT = "default"
PATH_FIELDS = ("model", "output", "calib", "eval", "prune_recipe", "labels")
# Values that are a name or a path: treated as a path when they look like one.
NAME_OR_PATH_FIELDS = ("device", "recipe")
NOT_PATHS = ("random", ALL_DEVICES, "")
METHODS = ("auto", "minmax", "percentile", "mse", "entropy", "converter")


@dataclass(frozen=True)
class BuildConfig:
    model: str
    device: str = DEFAULT_DEVICE  # a name, a profile .toml, 'all' or a comma list (first builds)
    output: str = "dist"
    format: str = "tflite"
    scheme: str | None = None  # None: the device's preferred precision
    calib: str | None = None
    eval: str | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    labels: str | None = None  # class names, one per line: the .tflite metadata's label file
    input_shapes: tuple[str, ...] = ()  # "name:1,3,224,224" fixes dynamic dimensions
    method: str = "auto"  # activation ranges: auto|minmax|percentile|mse|entropy|converter
    recipe: str | None = None
    accuracy_budget: float | None = None
    require_full_delegation: bool = False
    prune: float | None = None  # share of MACs removed by structured pruning before quantizing
    prune_criterion: str = "l1"
    prune_recipe: str | None = None
    distill: bool = False  # train the pruned model to match the source on the calib data
    distill_epochs: int = 20
    prune_channel_multiple: int = 8
    eval_fraction: float = 0.2
    parity_samples: int = 16
    seed: int = 0

    def __post_init__(self):
        if self.format not in ("tflite", "onnx"):
            raise ConfigError(f"format must be tflite or onnx, got {self.format!r}")
        if not 0 < self.eval_fraction < 1:
            raise ConfigError(f"eval_fraction must be in (0, 1), got {self.eval_fraction}")
        if self.parity_samples < 1:
            raise ConfigError("parity_samples must be at least 1")
        if self.method not in METHODS:
            raise ConfigError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if not _device_items(self.device):
            raise ConfigError("device must name at least one device profile")
        self._check_compression()

    def _check_compression(self) -> None:
        """Checked before any model is loaded (the same rules as `edgeopt compress`)."""
        if self.prune is None and self.prune_recipe is None and not self.distill:
            return
        from edgeopt.compress import CompressSettings

        if self.distill and self.prune is None and self.prune_recipe is None:
            raise ConfigError("--distill trains a pruned model: give --prune R or "
                              "--prune-recipe FILE too")
        CompressSettings(prune=self.prune, criterion=self.prune_criterion,
                         recipe=self.prune_recipe, distill=self.distill,
                         epochs=self.distill_epochs,
                         channel_multiple=self.prune_channel_multiple).check()

    def toml_values(self, base: Path) -> dict:
        """The fields worth writing, paths relative to `base` (None and empty left out)."""
        values = {}
        for key, value in asdict(self).items():
            if value is None or value == ():
                continue
            values[key] = _relative(key, value, base)
        return values

    def to_toml(self, base: Path, sources: dict[str, str] | None = None) -> str:
        """TOML with paths relative to `base`, the folder the file will live in; with
        `sources`, each line says where its value came from (a TOML comment)."""
        lines = ["# edgeopt build config; rebuild with: edgeopt build --config THIS_FILE",
                 "[build]"]
        for key, value in self.toml_values(base).items():
            line = f"{key} = {_toml_value(value)}"
            if sources is not None:
                line += f"  # {sources.get(key, DEFAULT)}"
            lines.append(line)
        return "\n".join(lines) + "\n"


def _toml_value(value) -> str:
    """One inline TOML value (the config holds only scalars and flat lists)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


# --- paths ------------------------------------------------------------------------------

def _looks_like_path(key: str, value: str) -> bool:
    if value in NOT_PATHS:
        return False
    if key in NAME_OR_PATH_FIELDS:
        return "/" in value or os.sep in value or value.endswith(".toml")
    return True


def _map_paths(key: str, value, convert):
    """Apply `convert` to the path parts of a value (a comma list for `device`)."""
    if not isinstance(value, str) or key not in PATH_FIELDS + NAME_OR_PATH_FIELDS:
        return value
    if key == "device":
        return ",".join(convert(v) if _looks_like_path(key, v) else v
                        for v in _device_items(value))
    return convert(value) if _looks_like_path(key, value) else value


def _relative(key: str, value, base: Path):
    def rel(path: str) -> str:
        return os.path.relpath(os.path.abspath(path), os.path.abspath(base))

    value = _map_paths(key, value, rel)
    return list(value) if isinstance(value, tuple) else value


def _rebased(key: str, value, folder: Path):
    """A path from a file in `folder`, made usable from the current folder."""
    def join(path: str) -> str:
        return path if os.path.isabs(path) else os.path.normpath(os.path.join(folder, path))

    return _map_paths(key, value, join)


# --- devices ----------------------------------------------------------------------------

def _device_items(spec: str) -> list[str]:
    return [item.strip() for item in str(spec).split(",") if item.strip()]


def device_names(spec: str) -> tuple[str, ...]:
    """The devices a `--device` value names, the one the artifact is built for first.

    `pixel-npu` builds for the Pixel NPU; `pixel-npu,coral-usb` also estimates the same
    artifact on the Coral; `all` stands for every shipped profile. The first device named
    (not `all`) is the build target; `all` alone builds for the default, host-cpu.
    """
    from edgeopt.devices.profile import profile_names

    items = _device_items(spec)
    named = [item for item in items if item != ALL_DEVICES]
    primary = named[0] if named else DEFAULT_DEVICE
    ordered = [primary]
    for item in items:
        ordered += profile_names() if item == ALL_DEVICES else [item]
    return tuple(dict.fromkeys(ordered))


def primary_device(spec: str) -> str:
    """The device the artifact is built for (see `device_names`)."""
    named = [item for item in _device_items(spec) if item != ALL_DEVICES]
    return named[0] if named else DEFAULT_DEVICE


# --- config files -----------------------------------------------------------------------

@dataclass(frozen=True)
class ConfigFile:
    """A parsed config file: the build table and the other commands' tables, raw."""

    path: Path
    build: dict = field(default_factory=dict)
    commands: dict = field(default_factory=dict)  # name -> table (nested for groups)


def find_config_file(explicit: str | None = None) -> Path | None:
    """`--config FILE` if given, else `edgeopt.toml` in the current folder, else None."""
    if explicit:
        return Path(explicit)
    local = Path.cwd() / CONFIG_NAME
    return local if local.is_file() else None


def load_config_file(path: str | os.PathLike) -> ConfigFile:
    """Read a config file; keys outside any table belong to `build`."""
    file = Path(path)
    raw = read_toml(file, "config file", ConfigError, CAPS["config"])
    build = {k: v for k, v in raw.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in raw.items() if isinstance(v, dict)}
    build.update(tables.pop("build", {}))
    return ConfigFile(file, build, tables)


def read_config_file(path: str | os.PathLike) -> dict:
    """The build values of a config file, checked, paths usable from the current folder."""
    return build_values(load_config_file(path))


BUILD_FIELDS = {f.name: f for f in fields(BuildConfig)}


# Flag spellings that differ from the field they set.
BUILD_ALIASES = {"input_shape": "input_shapes"}


def _key(name: str) -> str:
    key = name.replace("-", "_")
    return BUILD_ALIASES.get(key, key)


def build_values(cfile: ConfigFile) -> dict:
    values = {}
    for raw_key, value in cfile.build.items():
        key = _key(raw_key)
        values[key] = _rebased(key, _coerce(key, value, cfile.path), cfile.path.parent)
    return values


def _field_type(name: str):
    """The field's type without its `| None`: str, int, float, bool or tuple[X, ...]."""
    hint = get_type_hints(BuildConfig)[name]
    if get_origin(hint) in (Union, UnionType):
        hint = next(a for a in get_args(hint) if a is not type(None))
    return hint


_KIND_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _scalar(kind: type, value):
    """`value` as `kind`, or None when it is not one (a bool is never a number here)."""
    if isinstance(value, bool) != (kind is bool):
        return None
    if kind is float and isinstance(value, (int, float)):
        return float(value)
    return value if isinstance(value, kind) else None


def _coerce(name: str, value, path: Path):
    """A file value checked against the type of the BuildConfig field it sets."""
    if name not in BUILD_FIELDS:
        raise ConfigError(f"config file {path}: unknown key '{name}' in [build]; known: "
                          f"{', '.join(BUILD_FIELDS)}")
    kind = _field_type(name)
    if get_origin(kind) is tuple:  # a list in the file; one value stands for a list of one
        item = get_args(kind)[0]
        items = [_scalar(item, v) for v in (value if isinstance(value, list) else [value])]
        if any(v is None for v in items):
            raise ConfigError(f"config file {path}: key '{name}' must be "
                              f"{_KIND_NAMES[item]} or a list of them, got {value!r}")
        return tuple(items)
    checked = _scalar(kind, value)
    if checked is None:
        raise ConfigError(f"config file {path}: key '{name}' must be {_KIND_NAMES[kind]}, "
                          f"got {value!r}")
    return checked


@dataclass(frozen=True)
class ResolvedBuild:
    config: BuildConfig
    sources: dict[str, str]  # field -> 'command line', the config file's path, or 'default'
    file: Path | None = None

    def to_json(self) -> dict:
        return {**asdict(self.config), "sources": self.sources,
                "config_file": str(self.file) if self.file else None}


def resolve_build(flag_values: dict, cfile: ConfigFile | None = None) -> ResolvedBuild:
    """Flags given on the command line win over the file; the file over the defaults."""
    file_values = build_values(cfile) if cfile else {}
    flags = {k: v for k, v in flag_values.items() if v is not None}
    merged = {**file_values, **flags}
    if "model" not in merged:
        raise ConfigError("no model given (pass MODEL, or 'model' in edgeopt.toml or a "
                          "--config file)")
    sources = {name: (COMMAND_LINE if name in flags else
                      str(cfile.path) if cfile and name in file_values else DEFAULT)
               for name in BUILD_FIELDS}
    return ResolvedBuild(BuildConfig(**merged), sources, cfile.path if cfile else None)


def with_scheme(config: BuildConfig, scheme: str) -> BuildConfig:
    return replace(config, scheme=scheme)
