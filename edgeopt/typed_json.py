"""Frozen dataclasses as JSON contracts: a JSON Schema generated from the classes, and a
strict parser that turns a JSON value into the typed object or says what does not fit.

    >>> @dataclass(frozen=True)
    ... class Size:
    ...     before: int = field(metadata={"minimum": 0})
    ...     after: int = field(metadata={"minimum": 0})
    >>> parse(Size, {"before": 3, "after": 2})
    Size(before=3, after=2)
    >>> schema_of(Size)["$ref"]
    '#/$defs/Size'

Types understood: str, int, float (an int is a number too), bool, None, Any, Literal,
unions (`X | None`), list[X], tuple[X, ...], dict[str, X] and nested dataclasses. A field
without a default is required; every object forbids keys it does not declare. Field
metadata carries JSON Schema keywords (`minimum`, `pattern`, `description`, ...) that the
parser checks too, so a limit is written once.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import MISSING, dataclass, field
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")
_PRIMITIVES = {str: "string", int: "integer", float: "number", bool: "boolean",
               type(None): "null"}
_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern",
             "minItems", "format", "const")

__all__ = ["ContractError", "dataclass", "field", "parse", "schema_of", "document_schema"]


class ContractError(ValueError):
    """A JSON value that does not fit its declared type; says where (`manifest.model.sha256`)."""


def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls, include_extras=False)


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _constraints(meta: typing.Mapping[str, Any]) -> dict[str, Any]:
    return {k: meta[k] for k in _KEYWORDS if k in meta}


# --- schema ------------------------------------------------------------------------------

def _with_null(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, str) and "$ref" not in schema and "enum" not in schema:
        return {**schema, "type": [kind, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def _type_schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    if tp is Any:
        return {}
    if tp in _PRIMITIVES:
        return {"type": _PRIMITIVES[tp]}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        _define(tp, defs)
        return {"$ref": f"#/$defs/{tp.__name__}"}
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return {"const": args[0]} if len(args) == 1 else {"enum": list(args)}
    if _is_union(tp):
        rest = [a for a in args if a is not type(None)]
        inner = _type_schema(rest[0], defs) if len(rest) == 1 else \
            {"anyOf": [_type_schema(a, defs) for a in rest]}
        return _with_null(inner) if len(rest) < len(args) else inner
    if origin in (list, tuple):
        return {"type": "array", "items": _type_schema(args[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1], defs)}
    raise TypeError(f"no JSON Schema for {tp!r}")


def _field_schema(f: dataclasses.Field, tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    schema = _type_schema(tp, defs)
    limits = _constraints(f.metadata)
    if limits and "anyOf" in schema and "$ref" not in schema["anyOf"][0]:
        schema = {"anyOf": [{**schema["anyOf"][0], **limits}, schema["anyOf"][1]]}
    elif limits:
        schema = {**schema, **limits}
    if "description" in f.metadata:
        schema = {"description": f.metadata["description"], **schema}
    return schema


def _define(cls: type, defs: dict[str, Any]) -> None:
    if cls.__name__ in defs:
        return
    defs[cls.__name__] = {}  # placeholder: recursive types terminate
    hints = _hints(cls)
    fields = dataclasses.fields(cls)
    doc = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    defs[cls.__name__] = {
        **({"description": " ".join(doc.split())} if doc else {}),
        "type": "object",
        "required": [f.name for f in fields if _required(f)],
        "properties": {f.name: _field_schema(f, hints[f.name], defs) for f in fields},
        "additionalProperties": False}


def _required(f: dataclasses.Field) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def schema_of(tp: Any) -> dict[str, Any]:
    """The schema of `tp` with its definitions (`{"$ref": ..., "$defs": {...}}`)."""
    defs: dict[str, Any] = {}
    schema = _type_schema(tp, defs)
    return {**schema, "$defs": defs} if defs else schema


def document_schema(cls: type, schema_id: str, title: str) -> dict[str, Any]:
    """A whole JSON Schema document whose root is the dataclass `cls`."""
    defs: dict[str, Any] = {}
    _define(cls, defs)
    root = defs.pop(cls.__name__)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": schema_id,
            "title": title, **root, "$defs": dict(sorted(defs.items()))}


# --- parsing -----------------------------------------------------------------------------

def _fail(where: str, message: str) -> ContractError:
    return ContractError(f"{where}: {message}")


def _check_limits(value: Any, meta: typing.Mapping[str, Any], where: str) -> None:
    checks = (("minimum", lambda v, m: v >= m), ("maximum", lambda v, m: v <= m),
              ("exclusiveMinimum", lambda v, m: v > m), ("exclusiveMaximum", lambda v, m: v < m))
    if isinstance(value, int | float) and not isinstance(value, bool):
        for key, ok in checks:
            if key in meta and not ok(value, meta[key]):
                raise _fail(where, f"{value} breaks {key} {meta[key]}")
    if isinstance(value, str) and "pattern" in meta and not re.search(meta["pattern"], value):
        raise _fail(where, f"{value!r} does not match {meta['pattern']}")
    if isinstance(value, list | tuple) and len(value) < meta.get("minItems", 0):
        raise _fail(where, f"needs at least {meta['minItems']} items")
    if "const" in meta and value != meta["const"]:
        raise _fail(where, f"must be {meta['const']!r}, not {value!r}")


def _parse_primitive(tp: type, value: Any, where: str) -> Any:
    ok = isinstance(value, tp) and not (tp is int and isinstance(value, bool))
    if tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok:
        raise _fail(where, f"expected {_PRIMITIVES[tp]}, got {type(value).__name__} "
                           f"{str(value)[:40]!r}")
    return value


def _parse_union(tp: Any, value: Any, where: str) -> Any:
    options = [o for o in get_args(tp) if o is not type(None)]
    if value is None and len(options) < len(get_args(tp)):
        return None
    if len(options) == 1:  # `X | None` with a value: X's own error says most
        return _parse(options[0], value, where)
    errors = []
    for option in options:
        try:
            return _parse(option, value, where)
        except ContractError as exc:
            errors.append(str(exc))
    raise ContractError(f"{where}: fits none of the allowed types ({'; '.join(errors)})")


def _parse(tp: Any, value: Any, where: str) -> Any:
    if tp is Any:
        return value
    if tp in _PRIMITIVES:
        return _parse_primitive(tp, value, where)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _parse_object(tp, value, where)
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        if value not in args:
            raise _fail(where, f"{value!r} is not one of {list(args)}")
        return value
    if _is_union(tp):
        return _parse_union(tp, value, where)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise _fail(where, f"expected an array, got {type(value).__name__}")
        items = [_parse(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise _fail(where, f"expected an object, got {type(value).__name__}")
        return {k: _parse(args[1], v, f"{where}.{k}") for k, v in value.items()}
    raise TypeError(f"cannot parse {tp!r}")


def _parse_object(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise _fail(where, f"expected an object, got {type(value).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise _fail(where, f"unknown key {unknown[0]!r} (allowed: {', '.join(fields)})")
    missing = [name for name, f in fields.items() if _required(f) and name not in value]
    if missing:
        raise _fail(where, f"missing key {missing[0]!r}")
    hints = _hints(cls)
    parsed = {}
    for name, raw in value.items():
        spot = f"{where}.{name}"
        parsed[name] = _parse(hints[name], raw, spot)
        if raw is not None:
            _check_limits(raw, fields[name].metadata, spot)
    return cls(**parsed)


def parse(cls: type[T], value: Any, where: str = "value") -> T:
    """`value` (parsed JSON) as a `cls`; ContractError says the first thing that does not fit."""
    return typing.cast(T, _parse(cls, value, where))
