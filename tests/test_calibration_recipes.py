"""Recipes: parsing into frozen dataclasses, built-ins, first-match rules, bad files."""

from __future__ import annotations

import dataclasses

import pytest
from test_calibration_core import fake_graph

from edgeopt.calibration.config import Precision, QuantConfig
from edgeopt.calibration.precision import assign_precisions
from edgeopt.calibration.recipes import builtin_recipes, load_recipe, parse_recipe
from edgeopt.errors import ConfigError


@pytest.mark.parametrize("name", builtin_recipes())
def test_builtin_recipes_load(name):
    recipe = load_recipe(name)
    assert recipe.rules and recipe.name == name
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.rules[0].precision = Precision.FLOAT


def test_builtins_include_the_documented_ones():
    assert {"w8a8", "w4a8-keep-depthwise", "w4a8-int8-head", "w4-dense-block32"} <= set(
        builtin_recipes())


def test_first_matching_rule_wins_and_kind_narrows():
    recipe = parse_recipe({"rules": [
        {"match": "head", "precision": "fp16"},
        {"match": ".*", "kind": "conv", "precision": "int4", "weight_method": "rtn"},
        {"match": ".*", "precision": "int8"}]})
    choices, warnings = assign_precisions(fake_graph(), QuantConfig(scheme="w4a8", recipe=recipe))
    assert choices["head"].precision == Precision.FP16
    assert choices["conv_a"].precision == Precision.INT4
    assert choices["conv_a"].weight_method == "rtn"
    assert choices["dw_b"].precision == Precision.INT8
    assert not warnings


def test_a_rule_matching_nothing_warns_with_the_pattern_and_an_example_name():
    recipe = parse_recipe({"name": "mine", "rules": [
        {"match": "^decoder/", "precision": "int4"}, {"match": ".*", "precision": "int8"}]})
    _, warnings = assign_precisions(fake_graph(), QuantConfig(recipe=recipe))
    assert any("rule 1" in w and "'^decoder/'" in w and "conv_a" in w for w in warnings)


def test_int4_on_a_depthwise_layer_falls_back_to_int8_with_a_warning():
    recipe = parse_recipe({"rules": [{"match": ".*", "precision": "int4"}]})
    choices, warnings = assign_precisions(fake_graph(), QuantConfig(scheme="w4a8", recipe=recipe))
    assert choices["dw_b"].precision == Precision.INT8
    assert any("dw_b" in w for w in warnings)


@pytest.mark.parametrize("data, fragment", [
    ({"rules": []}, "at least one"),
    ({"rules": [{"match": "(", "precision": "int8"}]}, "bad regular expression"),
    ({"rules": [{"match": ".*", "precision": "int3"}]}, "precision 'int3'"),
    ({"rules": [{"match": ".*", "precision": "int8", "colour": "red"}]}, "colour"),
    ({"rules": [{"match": ".*", "precision": "int4", "block_size": 48}]}, "block_size 48"),
    ({"scheme": "w2a2", "rules": [{"match": ".*", "precision": "int8"}]}, "scheme 'w2a2'"),
])
def test_bad_recipes_name_the_field(data, fragment):
    with pytest.raises(ConfigError, match=fragment):
        parse_recipe(data, "bad.toml")


def test_recipe_file_and_unknown_name(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('scheme = "w4a8"\n[[rules]]\nmatch = ".*"\nprecision = "int4"\n')
    assert load_recipe(path).scheme == "w4a8"
    with pytest.raises(ConfigError, match="not found"):
        load_recipe("no-such-recipe")
    (tmp_path / "broken.toml").write_text("rules = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_recipe(tmp_path / "broken.toml")
