"""Concrete rewrites for each fallback reason, from ``rewrites.toml``.

    >>> suggest("edgetpu", "Edge TPU", "op_in_table", view)   # doctest: +SKIP
    'HARD_SWISH is not supported by the Edge TPU: replace with RELU6 (...)'
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources

from edgeopt.delegates.view import FLOAT_DTYPES, OpView


@cache
def _table() -> dict:
    text = resources.files("edgeopt.delegates").joinpath("rewrites.toml").read_text()
    return tomllib.loads(text)


def suggest(delegate: str, title: str, rule: str | None, view: OpView | None) -> str:
    """The rewrite for ``rule`` failing on ``view``'s op; '' when there is nothing to suggest."""
    if rule is None:
        return ""
    if rule == "op_in_table" and view is not None:
        return _replacement(delegate, title, view.name)
    text = _rule_text(rule, view)
    return _fill(text, title, view)


def replacement(delegate: str, title: str, op: str) -> str:
    """What to use instead of ``op`` when ``delegate`` has no kernel for it."""
    return _replacement(delegate, title, op)


def rule_text(rule: str, op: str, title: str) -> str:
    """The rewrite of ``rule`` for an op known only by name (no view: e.g. Vela's verdicts)."""
    text = _rule_text(rule, None)
    try:
        return text.format(op=op, delegate=title, custom="", version="", dtype="")
    except (KeyError, IndexError):
        return text


def _replacement(delegate: str, title: str, op: str) -> str:
    table = _table()
    specific = table.get("replace_for", {}).get(delegate, {})
    text = specific.get(op) or table["replace"].get(op)
    if text:
        return text
    return f"{op} is not supported by {title}: replace it with supported ops or keep it on the CPU"


def _rule_text(rule: str, view: OpView | None) -> str:
    entry = _table()["rules"].get(rule, "")
    if isinstance(entry, str):
        return entry
    if view is None:
        return entry.get("default", "")
    case = _float_case(view) if rule == "float_op_in_integer_graph" else _dtype_case(view)
    return entry.get(case, entry.get("default", ""))


def _float_case(view: OpView | None) -> str:
    return "default" if view is None or view.index.integer_graph else "float_model"


def _dtype_case(view: OpView | None) -> str:
    """Which flavour of the data-type rewrite fits the op's offending tensors."""
    if view is None:
        return "default"
    allowed = set(view.spec.dtypes if view.spec else ())
    bad = [t.dtype for t in view.data_tensors if allowed and t.dtype not in allowed]
    if not bad:
        return "default"
    if bad[0] in FLOAT_DTYPES and view.index.integer_graph:
        return "float_in_integer"
    if bad[0] in ("int8", "uint8", "int16") and allowed <= FLOAT_DTYPES:
        return "quantized_on_float"
    if bad[0] in ("int32", "int64"):
        return "int_on_float"
    return "default"


def _fill(text: str, title: str, view: OpView | None) -> str:
    if not text:
        return ""
    op = view.op if view is not None else None
    values = {
        "op": op.op if op else "the op",
        "delegate": title,
        "custom": (op.custom_code or "") if op else "",
        "version": op.version if op else "",
        "dtype": next((t.dtype for t in view.data_tensors), "") if view else "",
    }
    try:
        return text.format(**values)
    except (KeyError, IndexError):
        return text
