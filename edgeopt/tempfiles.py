"""One private temporary folder per edgeopt process, swept when its process is gone.

Every stage makes its temporary files with Python's `tempfile` (and so do TensorFlow,
onnx2tf and the quantizers, in-process). A build killed with SIGKILL cannot remove them,
and their names do not say whose they are. So each command sets `tempfile.tempdir` to
`$TMPDIR/edgeopt-<pid>-XXXX/` while it runs, removes that folder when it ends, and first
deletes the folders of edgeopt processes that no longer exist.

    >>> with private_tempdir():                 # doctest: +SKIP
    ...     tempfile.mkdtemp()                   # inside $TMPDIR/edgeopt-<pid>-xxxx/
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

PREFIX = "edgeopt-"
_outer: list[str] = []  # the temp folders private_tempdir() replaced, innermost last
_OWNED = re.compile(r"^edgeopt-(\d+)-[A-Za-z0-9_]+$")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (someone else's live process counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_dead(parent: Path) -> int:
    """Remove `edgeopt-<pid>-*` folders whose process is gone; how many were removed."""
    removed = 0
    try:
        entries = list(parent.iterdir())
    except OSError:
        return 0
    for entry in entries:
        match = _OWNED.match(entry.name)
        if not match or int(match[1]) == os.getpid() or pid_alive(int(match[1])):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


@contextlib.contextmanager
def private_tempdir() -> Iterator[Path]:
    """Point `tempfile` at a fresh folder of this process for the duration, then remove it."""
    parent = Path(tempfile.gettempdir())
    sweep_dead(parent)
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent))
    saved = tempfile.tempdir
    _outer.append(str(parent))
    tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = saved
        _outer.pop()
        shutil.rmtree(folder, ignore_errors=True)


def shared_tempdir() -> str:
    """The temp folder outside this process's private one: for files meant to outlive it."""
    return _outer[0] if _outer else tempfile.gettempdir()
