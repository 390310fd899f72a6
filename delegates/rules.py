"""Rule machinery shared by every delegate: small check functions, op tables, evaluation.

A check is a function ``check(view: OpView) -> (ok, detail)``. Its docstring states the
constraint and is what the user reads when the check fails, followed by ``detail``; the
same docstring is a line of the generated ``SUPPORTED_OPS.md`` (Vela's
``tflite_supported_operators.py`` works the same way). A delegate is a TOML table of the op
types it takes (versions, dtypes, ranks, which specific checks apply) plus its checks:

    >>> rules = registry.load_delegate_rules("xnnpack")         # doctest: +SKIP
    >>> rules.evaluate(view)                                    # doctest: +SKIP
    Verdict(ok=False, rule='softmax_beta_one', constraint='SOFTMAX beta must be 1', detail='0.5')
"""

from __future__ import annotations

import inspect
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from edgeopt.delegates.view import OpSpec, OpView
from edgeopt.errors import ConfigError

Check = Callable[[OpView], tuple[bool, str]]
Finalizer = Callable[[Any, dict[int, OpView], dict[int, "Verdict"]], dict[int, "Verdict"]]
# What a delegated op computes in when the delegate changes it ("float16"), else "".
Precision = Callable[[OpView], str]


@dataclass(frozen=True)
class Rule:
    """A named check; ``constraint`` is the first line of its docstring."""

    name: str
    check: Check

    @property
    def constraint(self) -> str:
        doc = inspect.getdoc(self.check) or self.name
        return doc.strip().split("\n\n")[0].replace("\n", " ")

    def __call__(self, view: OpView) -> tuple[bool, str]:
        return self.check(view)


@dataclass(frozen=True)
class Verdict:
    """Whether the delegate takes one op, and if not which rule said no and why."""

    ok: bool
    rule: str | None = None
    constraint: str = ""
    detail: str = ""

    @property
    def reason(self) -> str:
        """The constraint, then what this op does that breaks it."""
        return f"{self.constraint} ({self.detail})" if self.detail else self.constraint


@dataclass(frozen=True)
class Partitioning:
    """How the runtime turns supported ops into delegate partitions.

    ``max_partitions`` 0 means no limit; ``prefix_only`` is the Edge TPU compiler's rule
    (only the ops before the first unsupported one are mapped); ``subgraphs`` is ``"all"``
    when the delegate also runs inside control-flow bodies, else ``"main"``.
    """

    max_partitions: int = 0
    min_partition_ops: int = 1
    prefix_only: bool = False
    subgraphs: str = "main"


@dataclass(frozen=True)
class DelegateRules:
    """Everything known about one delegate: its op table, its checks, how it partitions."""

    name: str
    title: str
    unit: str
    sources: tuple[str, ...]
    notes: tuple[str, ...]
    generic: tuple[Rule, ...]
    ops: Mapping[str, OpSpec]
    specific: Mapping[str, Rule]
    partitioning: Partitioning
    settings: Mapping[str, Any] = field(default_factory=dict)
    finalize: Finalizer | None = None
    precision: Precision | None = None

    def evaluate(self, view: OpView) -> Verdict:
        """Run the generic checks, then the op's specific ones; the first failure decides."""
        rules = self.generic + tuple(self.specific[name] for name in self.spec_checks(view))
        for rule in rules:
            ok, detail = rule(view)
            if not ok:
                return Verdict(False, rule.name, rule.constraint, detail)
        return Verdict(True)

    def spec_checks(self, view: OpView) -> tuple[str, ...]:
        return view.spec.checks if view.spec else ()

    def spec(self, op_name: str) -> OpSpec | None:
        return self.ops.get(op_name)

    def with_settings(self, overrides: Mapping[str, Any]) -> DelegateRules:
        unknown = set(overrides) - set(self.settings)
        if unknown:
            names = ", ".join(sorted(unknown))
            raise ConfigError(f"delegate '{self.name}' has no option(s) {names}; "
                              f"known: {', '.join(sorted(self.settings)) or 'none'}")
        merged = {**self.settings, **overrides}
        return DelegateRules(self.name, self.title, self.unit, self.sources, self.notes,
                             self.generic, self.ops, self.specific, self.partitioning,
                             merged, self.finalize, self.precision)


def build_rules(table_file: str, checks: Mapping[str, Check],
                finalize: Finalizer | None = None,
                precision: Precision | None = None) -> DelegateRules:
    """Read ``delegates/<table_file>`` and bind its check names to functions.

    Every name the table uses must exist in ``checks``: a typo fails at import, not at run
    time on the one model that reaches that op.
    """
    raw = tomllib.loads(resources.files("edgeopt.delegates").joinpath(table_file).read_text())
    head, defaults = raw["delegate"], raw.get("defaults", {})
    rules = {name: Rule(name, fn) for name, fn in checks.items()}
    ops = {name: _op_spec(name, row, defaults) for name, row in raw.get("ops", {}).items()}
    used = set(head.get("generic", ())) | {c for spec in ops.values() for c in spec.checks}
    missing = sorted(used - set(rules))
    if missing:
        raise RuntimeError(f"{table_file}: unknown check(s) {', '.join(missing)}")
    return DelegateRules(
        name=head["name"], title=head["title"], unit=head["unit"],
        sources=tuple(head.get("sources", ())), notes=tuple(head.get("notes", ())),
        generic=tuple(rules[name] for name in head.get("generic", ())),
        ops=ops, specific=rules,
        partitioning=Partitioning(**raw.get("partitioning", {})),
        settings=dict(raw.get("settings", {})), finalize=finalize, precision=precision)


def _op_spec(name: str, row: dict, defaults: dict) -> OpSpec:
    known = {"max_version", "dtypes", "rank", "checks", "note"}
    return OpSpec(
        op=name,
        max_version=row.get("max_version", defaults.get("max_version")),
        dtypes=tuple(row.get("dtypes", defaults.get("dtypes", ()))),
        rank=tuple(row.get("rank", defaults.get("rank", (0, 6)))),
        checks=tuple(defaults.get("checks", ())) + tuple(row.get("checks", ())),
        params={k: v for k, v in row.items() if k not in known},
        note=row.get("note", ""),
    )
