"""A build's costly, repeatable stages kept for the next build in the same process.

A sweep builds many candidates of one model: the same float conversion, and the same pruning
and distillation, once for each scheme and device. A sweep worker turns the memo on
(`enabled()`); a stage then keeps its result under a key made of the bytes it was computed
from and its settings, and a later build with the same key takes the stored result instead
of computing it again (and says so in its manifest's notes). A plain `edgeopt build` never
turns it on: it computes everything.

Files a result needs after its build's work folder is gone (a SavedModel the converter reads
again) are copied into the memo's own temporary folder, removed when the process exits.

    >>> with enabled():                                                # doctest: +SKIP
    ...     build(config_a); build(config_b)   # b reuses a's conversion when they share it
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

MAX_BYTES = 1 << 30  # what the memo may hold (model bytes); the oldest entries go first
_state: dict[str, Any] = {"on": 0, "folder": None, "hits": []}
_entries: OrderedDict[str, tuple[Any, int]] = OrderedDict()


@contextmanager
def enabled() -> Iterator[None]:
    """Keep and reuse stage results inside this block (nested blocks are fine)."""
    _state["on"] += 1
    try:
        yield
    finally:
        _state["on"] -= 1


def active() -> bool:
    return _state["on"] > 0


@contextmanager
def hits() -> Iterator[list[str]]:
    """The stages whose kept result was taken inside this block (a build's notes say so)."""
    found: list[str] = []
    _state["hits"].append(found)
    try:
        yield found
    finally:
        _state["hits"].remove(found)


def key(*parts: Any) -> str:
    """A SHA-256 over the parts: paths by their content (a folder: every file in it, by
    relative path), arrays by dtype, shape and bytes, tuples and lists part by part, a
    callable by what it returns (called only here: work a plain build never does, such
    as listing a model's files), anything else by its repr."""
    h = hashlib.sha256()
    for part in parts:
        if callable(part):
            part = part()
        if isinstance(part, (tuple, list)):
            h.update(f"{type(part).__name__}{len(part)}\0".encode())
            h.update(key(*part).encode())
        elif isinstance(part, Path):
            _hash_path(h, part)
        elif isinstance(part, np.ndarray):
            h.update(f"{part.dtype}{part.shape}".encode())
            h.update(np.ascontiguousarray(part).tobytes())
        elif isinstance(part, dict):
            for name in sorted(part):
                h.update(f"{name}\0".encode())
                h.update(key(part[name]).encode())
        else:
            h.update(repr(part).encode())
        h.update(b"\1")
    return h.hexdigest()


def entry_key(*parts: Any) -> str | None:
    """`key(*parts)` while the memo is on, else None (and nothing read): a plain build
    does not hash its model and data for a memo it never uses."""
    return key(*parts) if active() else None


def _hash_path(h, path: Path) -> None:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        h.update(f"{file.relative_to(path) if path.is_dir() else ''}\0".encode())
        h.update(file.read_bytes())


def recall(stage: str, entry_key: str | None) -> Any | None:
    """The result a build stored under (stage, key), or None (also when the memo is off)."""
    if not active() or entry_key is None:
        return None
    found = _entries.get(f"{stage}:{entry_key}")
    if found is None:
        return None
    _entries.move_to_end(f"{stage}:{entry_key}")
    for collector in _state["hits"]:
        collector.append(stage)
    return found[0]


def keep(stage: str, entry_key: str | None, value: Any, size: int) -> None:
    """Store a result of `size` bytes; the oldest go when the memo would pass MAX_BYTES."""
    if not active() or entry_key is None or size > MAX_BYTES:
        return
    _entries[f"{stage}:{entry_key}"] = (value, size)
    while sum(s for _, s in _entries.values()) > MAX_BYTES:
        _entries.popitem(last=False)


def folder() -> Path:
    """The memo's own temporary folder (for files a kept result needs), made on first use."""
    if _state["folder"] is None or not _state["folder"].is_dir():  # made again if removed
        _state["folder"] = Path(tempfile.mkdtemp(prefix="edgeopt-memo-"))
        atexit.register(shutil.rmtree, _state["folder"], True)
    return _state["folder"]


def clear() -> None:
    """Forget every kept result (their files stay until the process exits)."""
    _entries.clear()
