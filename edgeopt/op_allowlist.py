"""Refuse a model that holds an op edgeopt does not know to be pure computation.

edgeopt runs the user's graphs (to check parity, calibrate and validate), so a graph
that reads or writes files, starts processes, reaches the network or calls back into
Python would do so on the user's machine. Before anything runs, every op a model can run
is looked up in an allowlist of op kinds (`ops_tensorflow.toml`, `ops_onnx.toml`,
`ops_tflite.toml`, `ops_torch.toml`: generated from the libraries' registries by
`op_allowlist_make.py`, with the families left out and why). The first op not listed ends
the command:

    >>> check_ops("tensorflow", {"ReadFile": "function serve"}, "m")  # doctest: +SKIP
    ModelLoadError: m: refusing op ReadFile (in function serve): it is one of the ops that
    read or write files named by the graph ...

The format walkers live beside their readers: saved_model_ops.py (GraphDef and function
library), onnx_ops.py (nodes, subgraphs, model-local functions), tflite_ops.py (every
subgraph's operator codes) and keras_archive.py (built-in layer classes only).
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path

from edgeopt.errors import ModelLoadError

HERE = Path(__file__).resolve().parent
SHOWN = 4  # other refused op kinds named after the first
LIBRARY = {"tensorflow": "TensorFlow", "onnx": "ONNX", "tflite": "TFLite", "torch": "PyTorch"}


@functools.cache
def allowlist(kind: str) -> tuple[frozenset[str], dict]:
    """The allowed op names of one format and its excluded families (name -> table)."""
    table = tomllib.loads((HERE / f"ops_{kind}.toml").read_text(encoding="utf-8"))
    return frozenset(table["allowed"]), table.get("excluded", {})


def excluded_family(name: str, excluded: dict) -> str | None:
    """The first excluded family whose patterns match `name`."""
    for family, entry in excluded.items():
        if any(re.search(pattern, name) for pattern in entry["patterns"]):
            return family
    return None


def _why(kind: str, op: str) -> str:
    _, excluded = allowlist(kind)
    family = excluded_family(op, excluded)
    if family is None:
        return (f"it is no {LIBRARY[kind]} op edgeopt knows to be pure computation (not in "
                f"edgeopt/ops_{kind}.toml)")
    return f"it is one of the ops that {excluded[family]['reason']}"


def check_ops(kind: str, ops: Mapping[str, str], label: str) -> None:
    """Raise ModelLoadError naming the first op (sorted) of `ops` (op -> where it is) that
    the allowlist of `kind` lacks, the node or function holding it, and why it is refused."""
    allowed, _ = allowlist(kind)
    refused = sorted(op for op in ops if op not in allowed)
    if not refused:
        return
    op = refused[0]
    shown = ", ".join(refused[1:1 + SHOWN])
    more = f" and {len(refused) - 1 - SHOWN} more" if len(refused) > 1 + SHOWN else ""
    also = f" (also refused: {shown}{more})" if shown else ""
    raise ModelLoadError(f"{label}: refusing op {op} (in {ops[op]}): {_why(kind, op)}; "
                         f"edgeopt never runs a graph that holds such an op{also}")
