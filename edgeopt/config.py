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
    >>> cfile.build["device"], cfile.commands["bench"]["runs"]           # doctest: +SKIP
    ('coral-usb', 20)

Reading a file's tables into each command's defaults (checked with the option's own type,
paths made relative to the file) and saying where each value came from is the CLI's job:
edgeopt.cli.defaults, through click's `default_map` and parameter sources.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from edgeopt.choices import ArtifactFormat, RangeMethod, TorchRoute, values
from edgeopt.compress_settings import CompressSettings
from edgeopt.data_limits import HOLDOUT_SHARE
from edgeopt.devices.profile import profile_names
from edgeopt.errors import ConfigError
from edgeopt.inputs import CAPS, read_toml
from edgeopt.task_spec import DEFAULT_BLANK_INDEX, DEFAULT_SCORE_THRESHOLD, TaskSpec

CONFIG_NAME = "edgeopt.toml"
DEFAULT_DEVICE = "host-cpu"
ALL_DEVICES = "all"
DEFAULT = "default"
PATH_FIELDS = ("model", "output", "calib", "eval", "prune_recipe", "labels")
# Values that are a name or a path: treated as a path when they look like one.
NAME_OR_PATH_FIELDS = ("device", "recipe")
NOT_PATHS = ("random", ALL_DEVICES, "")
METHODS = values(RangeMethod)
FORMATS = values(ArtifactFormat)
TORCH_ROUTES = values(TorchRoute)


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
    input_values: tuple[str, ...] = ()  # "sr=16000" pins an .onnx input to one value
    torch_route: str = "onnx"  # a .pt2: torch.onnx.export (onnx) or litert-torch (litert)
    method: str = "auto"  # activation ranges: auto|minmax|percentile|mse|entropy|converter
    recipe: str | None = None
    accuracy_budget: float | None = None
    require_full_delegation: bool = False
    require_full_integer: bool = False  # fail when a w8a8/w4a8 artifact keeps a float op
    rewrite: bool = True  # apply the graph rewrites the placement's fallbacks ask for
    prune: float | None = None  # share of MACs removed by structured pruning before quantizing
    prune_criterion: str = "l1"
    prune_recipe: str | None = None
    distill: bool = False  # train the pruned model to match the source on the calib data
    distill_epochs: int = 20
    prune_channel_multiple: int = 8
    qat: bool = False  # quantization-aware training when PTQ misses the budget (or forced)
    qat_epochs: int = 10
    eval_fraction: float = HOLDOUT_SHARE
    parity_samples: int = 16
    seed: int = 0
    # what the outputs mean (edgeopt.task_spec): the task metric and the collapse check
    task: str | None = None  # classify | detect | sequence | regress
    task_output: str | None = None
    boxes: str | None = None  # detect: OUTPUT[:START:END]
    scores: str | None = None
    box_format: str = "cxcywh"
    score_threshold: float = DEFAULT_SCORE_THRESHOLD
    blank_index: int = DEFAULT_BLANK_INDEX
    accept_collapsed: bool = False

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ConfigError(f"format must be {' or '.join(FORMATS)}, got {self.format!r}")
        if not 0 < self.eval_fraction < 1:
            raise ConfigError(f"eval_fraction must be in (0, 1), got {self.eval_fraction}")
        if self.parity_samples < 1:
            raise ConfigError("parity_samples must be at least 1")
        if self.torch_route not in TORCH_ROUTES:
            raise ConfigError(f"torch_route must be {' or '.join(TORCH_ROUTES)}, got "
                              f"{self.torch_route!r}")
        if self.method not in METHODS:
            raise ConfigError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if not _device_items(self.device):
            raise ConfigError("device must name at least one device profile")
        self._check_compression()
        self.task_spec()

    def task_spec(self) -> TaskSpec:
        """The task flags as one checked spec (a ConfigError names the flag)."""
        return TaskSpec.from_flags(self.task, self.task_output, self.boxes, self.scores,
                                   self.box_format, self.score_threshold, self.blank_index,
                                   self.accept_collapsed)

    def _check_compression(self) -> None:
        """Checked before any model is loaded (the same rules as `edgeopt compress`)."""
        if self.prune is None and self.prune_recipe is None and not self.distill:
            return
        if self.distill and self.prune is None and self.prune_recipe is None:
            raise ConfigError("--distill trains a pruned model: give --prune R or "
                              "--prune-recipe FILE too")
        CompressSettings(prune=self.prune, criterion=self.prune_criterion,
                         recipe=self.prune_recipe, distill=self.distill,
                         epochs=self.distill_epochs,
                         channel_multiple=self.prune_channel_multiple).check()

    def to_json(self) -> dict:
        return asdict(self)

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


# --- devices ----------------------------------------------------------------------------

def _device_items(spec: str) -> list[str]:
    return [item.strip() for item in str(spec).split(",") if item.strip()]


def device_names(spec: str) -> tuple[str, ...]:
    """The devices a `--device` value names, the one the artifact is built for first.

    `pixel-npu` builds for the Pixel NPU; `pixel-npu,coral-usb` also estimates the same
    artifact on the Coral; `all` stands for every shipped profile. The first device named
    (not `all`) is the build target; `all` alone builds for the default, host-cpu.
    """
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


def with_scheme(config: BuildConfig, scheme: str) -> BuildConfig:
    return replace(config, scheme=scheme)
