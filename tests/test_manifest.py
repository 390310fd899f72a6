"""The typed manifest model (edgeopt/manifest.py), its generated JSON Schema, and the
strict JSON parser under it (edgeopt/typed_json.py)."""

from __future__ import annotations

import subprocess
import sys

import jsonschema
import pytest

from edgeopt.manifest import SCHEMA_FILE, manifest_schema, schema_path, schema_text
from edgeopt.typed_json import ContractError, dataclass, field, parse, schema_of


def test_the_shipped_schema_is_generated_from_the_model():
    assert schema_path().name == SCHEMA_FILE
    assert schema_path().read_text(encoding="utf-8") == schema_text(), \
        "stale: run python -m edgeopt.manifest --write"


def test_the_check_mode_reports_up_to_date():
    proc = subprocess.run([sys.executable, "-m", "edgeopt.manifest", "--check"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_schema_is_valid_and_closed_everywhere():
    schema = manifest_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    objects = [schema, *schema["$defs"].values()]
    assert all(o["additionalProperties"] is False for o in objects)
    for section in ("validation", "conversion", "sizes", "source", "data", "compiled",
                    "quantization", "preprocessing", "comparison", "compression",
                    "placement_note", "estimate_note"):
        assert section in schema["properties"], section
    assert "for" in schema["$defs"]["Compiled"]["properties"]  # the JSON key, not for_


@dataclass(frozen=True)
class Inner:
    """An inner record."""

    count: int = field(metadata={"minimum": 0})
    label: str | None = None


@dataclass(frozen=True)
class Outer:
    """An outer record."""

    inner: Inner
    values: list[float]
    flag: bool = False


def test_parse_builds_the_typed_object():
    parsed = parse(Outer, {"inner": {"count": 2}, "values": [1, 2.5]})
    assert parsed == Outer(Inner(2), [1, 2.5])


@pytest.mark.parametrize(("value", "message"), [
    ({"inner": {"count": 2}, "values": [], "extra": 1}, "value: unknown key 'extra'"),
    ({"inner": {"count": 2, "x": 0}, "values": []}, "value.inner: unknown key 'x'"),
    ({"values": []}, "value: missing key 'inner'"),
    ({"inner": {"count": True}, "values": []}, "value.inner.count: expected integer"),
    ({"inner": {"count": -1}, "values": []}, "value.inner.count: -1 breaks minimum 0"),
    ({"inner": {"count": 1}, "values": ["a"]}, r"value.values\[0\]: expected number"),
    ({"inner": {"count": 1, "label": 3}, "values": []}, "value.inner.label"),
])
def test_parse_names_the_first_key_that_does_not_fit(value, message):
    with pytest.raises(ContractError, match=message):
        parse(Outer, value)


def test_the_schema_agrees_with_the_parser():
    schema = schema_of(Outer)
    good = {"inner": {"count": 2, "label": None}, "values": [1.5], "flag": True}
    jsonschema.validate(good, schema)
    parse(Outer, good)
    bad = {"inner": {"count": 2}, "values": [], "extra": 1}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    assert schema["$defs"]["Inner"]["required"] == ["count"]
    assert schema["$defs"]["Inner"]["properties"]["label"] == {"type": ["string", "null"]}
