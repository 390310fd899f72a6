"""onnxruntime's mobile execution providers as data: which op types each takes, and its limits.

The NNAPI and CoreML op tables are read, when first needed, from the markdown tables that
onnxruntime's own mobile usability checker reads (``tools/mobile_helpers/*_supported_ops.md``
in the installed onnxruntime wheel), so the rules follow the onnxruntime that runs the
artifact. QNN and XNNPACK ship no such table: their op lists live in ``onnx_eps.toml`` with
the onnxruntime source file they come from.

    >>> ep = load_ep("nnapi")                            # doctest: +SKIP
    >>> ep.supports("", "Conv"), ep.caveat("", "Conv")   # doctest: +SKIP
    (True, 'Only 2D Conv is supported. Weights and bias should be constant.')
    >>> ep_for_delegate("qnn-htp").provider               # doctest: +SKIP
    'QNNExecutionProvider'
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from importlib.util import find_spec
from pathlib import Path

from edgeopt.errors import ConfigError

DEFAULT_DOMAIN = "ai.onnx"
HELPERS = ("tools", "mobile_helpers")


@dataclass(frozen=True)
class ExecutionProvider:
    """One execution provider: its op table (``domain:op`` -> caveat) and its limits."""

    name: str
    provider: str
    title: str
    unit: str
    ops: Mapping[str, str]
    static_shapes: bool
    max_rank: int
    float_precision: str
    dtypes: tuple[str, ...]
    max_partitions: int
    source: str
    skip_qdq_groups: bool = False

    def supports(self, domain: str | None, op_type: str) -> bool:
        return qualified(domain, op_type) in self.ops

    def caveat(self, domain: str | None, op_type: str) -> str:
        """What the table says the EP does not check for us ('' when nothing)."""
        return self.ops.get(qualified(domain, op_type), "")


def qualified(domain: str | None, op_type: str) -> str:
    """``ai.onnx:Conv`` / ``com.microsoft:QLinearAdd``: the checker's op key."""
    return f"{domain or DEFAULT_DOMAIN}:{op_type}"


@cache
def _table() -> dict:
    text = resources.files("edgeopt.delegates").joinpath("onnx_eps.toml").read_text("utf-8")
    return tomllib.loads(text)


def ep_names() -> tuple[str, ...]:
    return tuple(_table()["eps"])


@cache
def load_ep(name: str) -> ExecutionProvider:
    """The execution provider ``name`` (``nnapi``, ``qnn``, ``xnnpack``, ``coreml-*``)."""
    eps = _table()["eps"]
    if name not in eps:
        raise ConfigError(f"unknown onnxruntime execution provider '{name}'; known: "
                          f"{', '.join(eps)}")
    row = eps[name]
    if "ops_file" in row:
        path = helpers_dir() / row["ops_file"]
        ops, source = read_ops_table(path), f"{row['source']}; read from {path}"
    else:
        ops, source = {_key(op): "" for op in row["ops"]}, row["source"]
    return ExecutionProvider(name, row["provider"], row["title"], row["unit"], ops,
                             bool(row["static_shapes"]), int(row["max_rank"]),
                             row["float_precision"], tuple(row["dtypes"]),
                             int(row["max_partitions"]), source,
                             bool(row.get("skip_qdq_groups", False)))


def _key(entry: str) -> str:
    return entry if ":" in entry else qualified(None, entry)


def ep_for_delegate(delegate: str) -> ExecutionProvider | None:
    """The EP that runs an .onnx artifact on a profile with this delegate (None: CPU EP),
    restricted to the element types that profile's accelerator computes."""
    name = _table()["profiles"].get(delegate, "")
    if not name:
        return None
    dtypes = _table().get("profile_dtypes", {}).get(delegate)
    ep = load_ep(name)
    return replace(ep, dtypes=tuple(dtypes)) if dtypes else ep


def cpu_only_note(delegate: str) -> str:
    """Why a profile's .onnx artifact runs on the CPU EP only ('' when it has an EP)."""
    return _table()["profile_notes"].get(delegate, "")


def helpers_dir() -> Path:
    """onnxruntime's ``tools/mobile_helpers`` directory, found without importing onnxruntime."""
    spec = find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("onnxruntime is not installed: its mobile op tables (tools/"
                          "mobile_helpers) are what ONNX placement reads")
    return Path(next(iter(spec.submodule_search_locations))).joinpath(*HELPERS)


def read_ops_table(path: Path) -> dict[str, str]:
    """``domain:op`` -> caveat from a two-column markdown table (the checker's format)."""
    try:
        lines = path.read_text("utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read onnxruntime's op table {path}: {exc}") from exc
    ops = {}
    for line in lines:
        cells = line.strip().split("|")
        if len(cells) == 4 and ":" in cells[1]:
            ops[cells[1].strip()] = cells[2].replace("<br/>", " ").strip()
    return ops
