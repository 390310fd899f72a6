"""Tell a folder edgeopt may replace from one that holds someone's files.

Every bundle carries `.edgeopt-bundle`, a marker listing each file edgeopt wrote with its
sha256 (and the manifest's sha256 on its own). A folder is replaced only when it is
provably such a bundle: the marker parses, every file in the folder is listed in it with
the same content, and nothing else is there (no other file, folder, link or device).
Anything else is refused, naming the first files that would be lost:

    >>> ownership_problem(Path("webapp"))                 # doctest: +SKIP
    'holds files edgeopt did not write: thesis.docx, notes/todo.txt'

Bundles of edgeopt versions before the marker carry none, so they are refused too, with
a message that says to delete them by hand: a `manifest.json` alone proves nothing (web
apps have one). Removing a bundle deletes only the files its marker lists, then the
folders left empty; whatever appeared meanwhile stays (`remove_owned`).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edgeopt.inputs import bounded_recursion

MARKER = ".edgeopt-bundle"
MANIFEST = "manifest.json"
MARKER_VERSION = 1
SHOWN = 5             # files named in a refusal; the count says how many more
MAX_ENTRIES = 10_000  # a folder this full is no bundle; stop walking it
SWAP_RETRIES = 20     # looks again when a concurrent build swapped the folder meanwhile


def _sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def marker_bytes(files: dict[str, bytes]) -> bytes:
    """The marker for a bundle of `files` (name -> content), marker itself excluded."""
    listed = {name: _sha256(content) for name, content in sorted(files.items())}
    record = {"edgeopt_bundle": MARKER_VERSION, "manifest_sha256": listed.get(MANIFEST),
              "files": listed}
    return (json.dumps(record, indent=1) + "\n").encode()


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


@contextmanager
def _opened(folder: Path) -> Iterator[int]:
    """`folder` opened once: every read below goes through this descriptor, so a folder
    swapped at that path meanwhile (another build publishing) is never read half-and-half."""
    fd = os.open(folder, _DIR_FLAGS)
    try:
        yield fd
    finally:
        os.close(fd)


def _walk(root: int) -> tuple[dict[str, int], list[str]]:
    """Every entry under the folder open at `root` without following links: files
    (name -> lstat mode) and sub-folders, as paths relative to it."""
    entries: dict[str, int] = {}
    folders: list[str] = []
    pending = [""]
    while pending and len(entries) + len(folders) <= MAX_ENTRIES:
        rel = pending.pop()
        fd = os.open(rel, _DIR_FLAGS, dir_fd=root) if rel else os.dup(root)
        try:
            with os.scandir(fd) as scan:
                for entry in scan:
                    name = f"{rel}/{entry.name}" if rel else entry.name
                    mode = entry.stat(follow_symlinks=False).st_mode
                    if stat.S_ISDIR(mode):
                        folders.append(name)
                        pending.append(name)
                    else:
                        entries[name] = mode
        finally:
            os.close(fd)
    return entries, folders


def _read(root: int, name: str, limit: int | None = None) -> Iterator[bytes]:
    """The chunks of regular file `name` under `root` (no link followed at the end);
    OSError when it is missing, not a regular file or over `limit` bytes."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0), dir_fd=root)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or (limit is not None and info.st_size > limit):
            raise OSError(errno.EINVAL, "not a regular file of bounded size", name)
        while chunk := f.read(1 << 20):
            yield chunk


def _read_marker(root: int) -> dict[str, str] | None:
    """The marker's file list, or None when there is no readable, well-formed marker."""
    try:
        content = b"".join(_read(root, MARKER, limit=1024 ** 2))
        with bounded_recursion():
            record = json.loads(content)
        files = record["files"]
        ok = record["edgeopt_bundle"] == MARKER_VERSION and isinstance(files, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items())
        ok = ok and record.get("manifest_sha256") == files.get(MANIFEST)
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return files if ok else None


def _file_sha256(root: int, name: str) -> str | None:
    digest = hashlib.sha256()
    try:
        for chunk in _read(root, name):
            digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def _names(paths: list[str]) -> str:
    shown = ", ".join(paths[:SHOWN])
    return shown if len(paths) <= SHOWN else f"{shown} and {len(paths) - SHOWN} more"


def _foreign(entries: dict[str, int], folders: list[str], listed: dict[str, str]) -> list[str]:
    """Entries the marker does not account for: unlisted files, links, devices, folders
    that hold no listed file."""
    parents = {"/".join(n.split("/")[:i]) for n in listed for i in range(1, n.count("/") + 1)}
    unknown = [n for n, mode in entries.items()
               if n != MARKER and (n not in listed or not stat.S_ISREG(mode))]
    return sorted(unknown + [f"{d}/" for d in folders if d not in parents])


def ownership_problem(folder: Path) -> str | None:
    """Why `folder` is not provably an untouched edgeopt bundle (None: it is one).

    The words complete "output folder X ...": what is there that edgeopt did not write."""
    problem: str | None = None
    for _ in range(SWAP_RETRIES):
        try:
            with _opened(folder) as root:
                examined = os.fstat(root)
                try:
                    problem = _problem(root)
                except OSError as exc:
                    problem = (f"cannot be read whole ({exc.strerror}: {exc.filename}); it "
                               "is left as it is")
                if problem is None or not _swapped(folder, examined):
                    return problem
        except OSError as exc:
            return f"cannot be read whole ({exc.strerror}: {exc.filename}); it is left as it is"
    return problem


def _swapped(folder: Path, examined: os.stat_result) -> bool:
    """Whether another folder now sits at `folder` than the one examined: a concurrent
    build published, and the examined one (its old bundle) is being removed, so what
    looked wrong in it says nothing about what is there now."""
    try:
        now = os.stat(folder, follow_symlinks=False)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) != (examined.st_dev, examined.st_ino)


def _problem(root: int) -> str | None:
    entries, folders = _walk(root)
    if len(entries) + len(folders) > MAX_ENTRIES:
        return f"holds more than {MAX_ENTRIES} entries; it is not an edgeopt bundle"
    everything = sorted(entries) + [f"{d}/" for d in folders]
    listed = _read_marker(root)
    if listed is None:
        what = "is not empty and holds no edgeopt bundle (no valid .edgeopt-bundle marker)"
        if MANIFEST in entries:
            what = ("holds a manifest.json but no valid .edgeopt-bundle marker, so it is no "
                    "bundle this edgeopt wrote (a bundle of an edgeopt older than the marker "
                    "carries none: delete it by hand if that is what it is)")
        return f"{what}; replacing it would delete {_names(everything)}"
    foreign = _foreign(entries, folders, listed)
    if foreign:
        return (f"holds files edgeopt did not write: {_names(foreign)}; replacing it would "
                "delete them")
    changed = sorted(n for n in entries if n in listed and _file_sha256(root, n) != listed[n])
    if changed:
        return (f"holds files changed since edgeopt wrote them: {_names(changed)}; replacing "
                "it would lose those changes")
    return None


def remove_owned(folder: Path) -> list[str]:
    """Delete the files `folder`'s marker lists (those still as written), the marker, then
    the folders left empty; what remains is returned and left in place."""
    with _opened(folder) as root:
        listed = _read_marker(root) or {}
        for name, sha256 in listed.items():
            if _file_sha256(root, name) == sha256:  # a changed file is not ours any more
                os.unlink(name, dir_fd=root)
        if listed:
            os.unlink(MARKER, dir_fd=root)
        entries, folders = _walk(root)
        for rel in sorted(folders, key=lambda d: d.count("/"), reverse=True):
            try:
                os.rmdir(rel, dir_fd=root)  # fails, and keeps it, if anything is inside
            except OSError:
                pass
        entries, folders = _walk(root)
    left = sorted(entries) + [f"{d}/" for d in folders]
    if left:
        return left
    try:
        folder.rmdir()
    except OSError:  # something appeared since the walk: it stays, and is named
        return remove_owned(folder) if folder.is_dir() else []
    return []
