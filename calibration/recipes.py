"""Declarative quantization recipes: regex-scoped per-layer rules in a TOML file.

A rule's `match` is searched (`re.search`) in each layer's name (its output tensor
name); an optional `kind` narrows it to `conv`, `depthwise`, `grouped` or `dense`
layers. For each layer the first matching rule wins. Named recipes ship in
`edgeopt/calibration/recipes/`; a path to a `.toml` file works too.

    # recipes/w4a8-keep-depthwise.toml
    name = "w4a8-keep-depthwise"
    scheme = "w4a8"
    [[rules]]
    match = ".*depthwise.*"
    precision = "int8"
    [[rules]]
    match = ".*"
    precision = "int4"

    >>> load_recipe("w4a8-keep-depthwise").rules[0].precision
    <Precision.INT8: 'int8'>
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from edgeopt.calibration.config import BLOCK_SIZES, Precision, Scheme, WeightMethod
from edgeopt.calibration.estimators import METHODS
from edgeopt.calibration.graphspec import LayerKind
from edgeopt.errors import ConfigError
from edgeopt.inputs import CAPS, read_toml

RECIPE_DIR = Path(__file__).parent / "recipes"
_RULE_KEYS = {"match", "kind", "precision", "block_size", "weight_method"}
_RECIPE_KEYS = {"name", "description", "scheme", "method", "rules", "schema_version"}


@dataclass(frozen=True)
class RecipeRule:
    match: str
    precision: Precision
    kind: LayerKind | None = None
    block_size: int | None = None
    weight_method: WeightMethod | None = None

    def applies(self, layer_name: str, kind: LayerKind) -> bool:
        return (self.kind is None or self.kind == kind) and bool(re.search(self.match, layer_name))


@dataclass(frozen=True)
class Recipe:
    name: str
    rules: tuple[RecipeRule, ...]
    description: str = ""
    scheme: Scheme | None = None
    method: str | None = None
    source: str = ""

    def rule_for(self, layer_name: str, kind: LayerKind) -> RecipeRule | None:
        return next((r for r in self.rules if r.applies(layer_name, kind)), None)


def builtin_recipes() -> list[str]:
    return sorted(p.stem for p in RECIPE_DIR.glob("*.toml"))


def load_recipe(name_or_path: str | Path) -> Recipe:
    """A shipped recipe by name, or a recipe file; ConfigError names the bad field."""
    path = Path(name_or_path)
    if not path.suffix and (RECIPE_DIR / f"{path.name}.toml").is_file():
        path = RECIPE_DIR / f"{path.name}.toml"
    if not path.is_file():
        raise ConfigError(f"recipe '{name_or_path}' not found: give a .toml file or one of "
                          f"{', '.join(builtin_recipes())}")
    data = read_toml(path, "recipe", ConfigError, CAPS["recipe"])
    return parse_recipe(data, str(path))


def parse_recipe(data: dict, source: str = "<recipe>") -> Recipe:
    unknown = set(data) - _RECIPE_KEYS
    if unknown:
        raise ConfigError(f"recipe {source}: unknown field(s) {sorted(unknown)}")
    rules = data.get("rules")
    if not isinstance(rules, list) or not rules:
        raise ConfigError(f"recipe {source}: needs at least one [[rules]] table")
    scheme = _field(Scheme, data.get("scheme"), source, "scheme")
    method = data.get("method")
    if method is not None:
        if method not in METHODS:
            raise ConfigError(f"recipe {source}: method '{method}' not one of {METHODS}")
    parsed = tuple(_rule(rule, f"{source} rule {i + 1}") for i, rule in enumerate(rules))
    return Recipe(str(data.get("name", Path(source).stem)), parsed,
                  str(data.get("description", "")), scheme, method, source)


def _rule(rule: dict, where: str) -> RecipeRule:
    if not isinstance(rule, dict):
        raise ConfigError(f"recipe {where}: a rule must be a table")
    unknown = set(rule) - _RULE_KEYS
    if unknown:
        raise ConfigError(f"recipe {where}: unknown field(s) {sorted(unknown)}")
    match = rule.get("match")
    if not isinstance(match, str):
        raise ConfigError(f"recipe {where}: 'match' must be a regular expression string")
    try:
        re.compile(match)
    except re.error as exc:
        raise ConfigError(f"recipe {where}: bad regular expression {match!r}: {exc}") from exc
    block = rule.get("block_size")
    if block is not None and block not in BLOCK_SIZES:
        raise ConfigError(f"recipe {where}: block_size {block} not one of {BLOCK_SIZES}")
    precision = _field(Precision, rule.get("precision"), where, "precision")
    if precision is None:
        raise ConfigError(f"recipe {where}: 'precision' is required")
    return RecipeRule(match, precision, _field(LayerKind, rule.get("kind"), where, "kind"),
                      block, _field(WeightMethod, rule.get("weight_method"), where,
                                    "weight_method"))


def _field(kind, value, where: str, name: str):
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        raise ConfigError(f"recipe {where}: {name} '{value}' not one of {choices}") from None
