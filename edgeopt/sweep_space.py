"""The search space of `edgeopt sweep`: a `sweep.toml` read into candidates.

    models = ["digits_cnn.keras"]            # paths relative to the sweep file
    devices = ["pixel-npu", "host-cpu"]      # profile names or profile .toml files
    schemes = ["default", "w8a8", "float"]   # "default": the device's own precision
    recipes = ["none", "w8a8"]               # "none", a shipped recipe name or a .toml
    prune = [0.0, 0.5]                       # shares of MACs removed; 0: not pruned
    distill = [false, true]                  # train the pruned model back (prune > 0 only)
    formats = ["tflite"]

    [build]                                  # what every candidate shares: `build`'s keys
    calib = "digits_calib.npz"
    eval = "digits_eval.npz"

    >>> space = load_space("sweep.toml")                                 # doctest: +SKIP
    >>> [c.label for c in space.candidates][:1]                          # doctest: +SKIP
    ['digits_cnn.keras pixel-npu tflite w8a8']

A combination that a device refuses (a float scheme on an int8-only NPU, an `.onnx` on a
device that runs `.tflite` only) is not a candidate: it is listed in `excluded` with the
reason. An unknown key, an unknown device or a space with no candidate is a ConfigError
naming the file.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from edgeopt.config import NAME_OR_PATH_FIELDS, NOT_PATHS, PATH_FIELDS, BuildConfig
from edgeopt.devices.profile import load_profile
from edgeopt.errors import ConfigError, EdgeoptError
from edgeopt.inputs import CAPS, read_toml
from edgeopt.pipeline import resolve_scheme

# space key -> (the BuildConfig field it sets, its default values)
AXES: dict[str, tuple[str, tuple]] = {
    "models": ("model", ()), "devices": ("device", ()), "formats": ("format", ("tflite",)),
    "schemes": ("scheme", ("default",)), "recipes": ("recipe", ("none",)),
    "prune": ("prune", (0.0,)), "distill": ("distill", (False,)),
}
BUILD_TABLE = "build"
# `build` keys a sweep sets per candidate (the axes) or itself (where bundles go)
NOT_SHARED = {"model", "device", "output", "format", "scheme", "recipe", "prune", "distill"}
SHARED_KEYS = tuple(f.name for f in fields(BuildConfig) if f.name not in NOT_SHARED)
NONE_VALUES = ("default", "none")


@dataclass(frozen=True)
class Candidate:
    """One build of the sweep: the axes' values, the scheme resolved for the device."""

    model: str
    device: str
    format: str
    scheme: str
    recipe: str | None = None
    prune: float | None = None
    distill: bool = False

    @property
    def label(self) -> str:
        parts = [Path(self.model).name, self.device, self.format, self.scheme]
        if self.recipe:
            parts.append(f"recipe={Path(self.recipe).stem}")
        if self.prune:
            parts.append(f"prune={self.prune:g}" + ("+distill" if self.distill else ""))
        return " ".join(parts)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Space:
    path: Path
    candidates: tuple[Candidate, ...]
    excluded: tuple[tuple[str, str], ...]  # (label, why the devices refuse it)
    shared: dict  # BuildConfig keys every candidate shares, paths absolute

    def config(self, candidate: Candidate, output: str) -> BuildConfig:
        """The build of one candidate, written to `output`."""
        return BuildConfig(**self.shared, **candidate.to_json(), output=output)


def _fail(path: Path, message: str) -> ConfigError:
    return ConfigError(f"sweep file {path}: {message}")


def _absolute(value: str, base: Path, key: str) -> str:
    """Paths relative to the sweep file; names (a device, a recipe, 'random') stay names."""
    if value in NOT_PATHS:
        return value
    looks_like_path = "/" in value or os.sep in value or value.endswith(".toml")
    if key in NAME_OR_PATH_FIELDS and not looks_like_path:
        return value
    return str((base / value).resolve()) if key in PATH_FIELDS + NAME_OR_PATH_FIELDS else value


def _axis(raw: dict, key: str, path: Path) -> list:
    field, default = AXES[key]
    values = raw.get(key, list(default))
    if not isinstance(values, list):
        values = [values]
    if not values:
        raise _fail(path, f"'{key}' is empty: the space has no candidate")
    values = [None if v in NONE_VALUES else v for v in values]
    if field in PATH_FIELDS + NAME_OR_PATH_FIELDS:
        values = [v if v is None else _absolute(str(v), path.parent, field) for v in values]
    if field == "prune":
        values = [None if not v else float(v) for v in values]
    return list(dict.fromkeys(values))


def _shared(raw: dict, path: Path) -> dict:
    table = raw.get(BUILD_TABLE, {})
    if not isinstance(table, dict):
        raise _fail(path, f"'{BUILD_TABLE}' must be a table of build settings")
    unknown = sorted(set(table) - set(SHARED_KEYS))
    if unknown:
        raise _fail(path, f"unknown key '{BUILD_TABLE}.{unknown[0]}' (a [build] key is one "
                    f"of: {', '.join(SHARED_KEYS)})")
    return {k: _absolute(v, path.parent, k) if isinstance(v, str) else
            (tuple(v) if isinstance(v, list) else v) for k, v in table.items()}


def _check_keys(raw: dict, path: Path) -> None:
    unknown = sorted(set(raw) - set(AXES) - {BUILD_TABLE})
    if unknown:
        raise _fail(path, f"unknown key '{unknown[0]}' (the keys are: "
                    f"{', '.join([*AXES, '[build]'])})")
    for key in ("models", "devices"):
        if key not in raw:
            raise _fail(path, f"'{key}' is missing: name at least one")


def _refusal(candidate: Candidate, config: BuildConfig) -> tuple[Candidate, str | None]:
    """The candidate with its scheme resolved, or why the device refuses it."""
    if candidate.distill and candidate.prune is None:
        return candidate, "distillation trains a pruned model (prune > 0)"
    try:
        scheme = resolve_scheme(config, load_profile(candidate.device))
    except ConfigError as exc:
        return candidate, str(exc)
    return replace(candidate, scheme=scheme), None


def _expand(axes: dict[str, list], shared: dict, path: Path):
    kept: dict[Candidate, None] = {}
    excluded: list[tuple[str, str]] = []
    for values in itertools.product(*axes.values()):
        raw = dict(zip([AXES[k][0] for k in axes], values))
        candidate = Candidate(**{**raw, "scheme": raw["scheme"] or ""})
        try:
            config = BuildConfig(**shared, **{**raw, "distill": False}, output="unused")
        except EdgeoptError as exc:
            raise _fail(path, str(exc)) from None
        candidate, why = _refusal(candidate, config)
        if why is None:
            kept[candidate] = None
        elif not (candidate.distill and candidate.prune is None):  # not a real combination
            excluded.append((candidate.label, why))
    return tuple(kept), tuple(excluded)


def _check_devices(devices: list, path: Path) -> None:
    for device in devices:
        try:
            load_profile(str(device))
        except EdgeoptError as exc:
            raise _fail(path, f"devices: {exc}") from None


def _check_files(axes: dict[str, list], shared: dict, path: Path) -> None:
    """A missing input is the sweep file's error, not one failed point per candidate."""
    named = [("models", m) for m in axes["models"]]
    named += [(f"build.{k}", v) for k, v in shared.items()
              if k in PATH_FIELDS and isinstance(v, str) and v not in NOT_PATHS]
    for key, value in named:
        if not Path(value).exists():
            raise _fail(path, f"{key}: {value} not found")


def load_space(path: str | os.PathLike) -> Space:
    """Read and expand a sweep file; a ConfigError names the file and the key."""
    file = Path(path)
    raw = read_toml(file, "sweep file", ConfigError, CAPS["config"])
    _check_keys(raw, file)
    axes = {key: _axis(raw, key, file) for key in AXES}
    _check_devices(axes["devices"], file)
    shared = _shared(raw, file)
    _check_files(axes, shared, file)
    candidates, excluded = _expand(axes, shared, file)
    if not candidates:
        why = f" (every combination is refused: {excluded[0][1]})" if excluded else ""
        raise _fail(file, f"the space has no candidate{why}")
    return Space(file, candidates, excluded, shared)
