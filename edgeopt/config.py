"""The resolved build configuration: flags over a config file over defaults.

`edgeopt.toml` in a bundle holds the config that made it, with paths relative to the
file, so `edgeopt build --config dist/edgeopt.toml` rebuilds it from any folder.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from edgeopt.errors import ConfigError

PATH_FIELDS = ("model", "output", "calib", "eval")
METHODS = ("auto", "minmax", "percentile", "mse", "entropy", "converter")


@dataclass(frozen=True)
class BuildConfig:
    model: str
    device: str = "host-cpu"
    output: str = "dist"
    format: str = "tflite"
    scheme: str | None = None  # None: the device's preferred precision
    calib: str | None = None
    eval: str | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    input_shapes: tuple[str, ...] = ()  # "name:1,3,224,224" fixes dynamic dimensions
    method: str = "auto"  # activation ranges: auto|minmax|percentile|mse|entropy|converter
    recipe: str | None = None
    accuracy_budget: float | None = None
    require_full_delegation: bool = False
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

    def to_toml(self, base: Path) -> str:
        """TOML with paths relative to `base`, the folder the file will live in."""
        import tomli_w

        values = {}
        for key, value in asdict(self).items():
            if value is None:
                continue
            if key in PATH_FIELDS and value != "random":
                value = os.path.relpath(os.path.abspath(value), os.path.abspath(base))
            if value == ():
                continue
            values[key] = list(value) if isinstance(value, tuple) else value
        return "# edgeopt build config; rebuild with: edgeopt build --config THIS_FILE\n" + \
            tomli_w.dumps({"build": values})


def _coerce(name: str, value):
    kinds = {f.name: f.type for f in fields(BuildConfig)}
    if name not in kinds:
        raise ConfigError(f"unknown config key '{name}'; known: {', '.join(kinds)}")
    if name == "input_shapes":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError("config key 'input_shapes' must be a list of 'name:d,d,...'")
        return tuple(value)
    if name in ("mean", "std"):
        if not isinstance(value, list) or not all(isinstance(v, (int, float)) for v in value):
            raise ConfigError(f"config key '{name}' must be a list of numbers")
        return tuple(float(v) for v in value)
    expected = {"eval_fraction": (int, float), "parity_samples": int, "seed": int,
                "require_full_delegation": bool, "accuracy_budget": (int, float)}.get(name, str)
    if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
        raise ConfigError(f"config key '{name}' has the wrong type: {value!r}")
    return value


def read_config_file(path: str) -> dict:
    """The [build] table of a config file, paths made relative to the current folder."""
    file = Path(path)
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    table = raw.get("build", raw)
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path}: [build] must be a table")
    values = {key: _coerce(key, value) for key, value in table.items()}
    for key in PATH_FIELDS:
        if key in values and values[key] != "random" and not os.path.isabs(values[key]):
            values[key] = os.path.normpath(os.path.join(file.parent, values[key]))
    return values


def resolve(file_values: dict, flag_values: dict) -> BuildConfig:
    """Flags given on the command line win over the file; the file over the defaults."""
    merged = {**file_values, **{k: v for k, v in flag_values.items() if v is not None}}
    if "model" not in merged:
        raise ConfigError("no model given (pass MODEL or a --config file with 'model')")
    return BuildConfig(**merged)


def with_scheme(config: BuildConfig, scheme: str) -> BuildConfig:
    return replace(config, scheme=scheme)
