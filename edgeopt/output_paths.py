"""Where edgeopt may write: the destination rules every output path is checked against,
before any work and again just before the write.

    >>> check_output_path("/dev/null")                  # doctest: +SKIP
    OutputError: output /dev/null is a character device; edgeopt writes only regular files

- outputs are regular files: a folder, device node, FIFO or socket at the destination, or a
  symlink to one, is refused; a symlink to a regular file is written through (the file it
  names is replaced, as `cp` would), a dangling one is refused;
- each path component fits the file system's NAME_MAX and the whole path its PATH_MAX,
  with room for the writer's temporary sibling (`TEMP_NAME_MAX`) or a bundle's staging
  folder (`reserve`);
- the folder exists (or `make_parents`) and is writable.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from edgeopt.errors import OutputError

DEFAULT_NAME_MAX = 255
DEFAULT_PATH_MAX = 4096
TEMP_NAME_MAX = 32  # the atomic writer's temporary names are no longer than this
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"))


def _limit(folder: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(folder, name)
    except (OSError, ValueError):
        return default


def _existing_ancestor(path: Path) -> Path:
    for folder in path.parents:
        if os.path.isdir(folder):  # never raises (a too-long path is just not a folder)
            return folder
    return Path("/")


def check_path_length(path: Path, reserve: int = 0) -> None:
    """Refuse a path the file system cannot hold: a component over NAME_MAX bytes, or the
    whole over PATH_MAX. `reserve` bytes are kept for a sibling name longer than the last
    component (a bundle's staging folder)."""
    path = Path(os.path.abspath(path))
    folder = _existing_ancestor(path)
    name_max = _limit(folder, "PC_NAME_MAX", DEFAULT_NAME_MAX)
    path_max = _limit(folder, "PC_PATH_MAX", DEFAULT_PATH_MAX)
    for part in path.parts[1:]:
        size = len(os.fsencode(part))
        extra = reserve if part == path.name else 0
        if size + extra > name_max:
            allowed = f"at most {name_max - extra}" + (" here" if extra else "")
            raise OutputError(f"output name too long: {part[:40]}... has {size} bytes, "
                              f"{allowed} ({folder} allows {name_max} per name)")
    total = len(os.fsencode(str(path))) + max(reserve, TEMP_NAME_MAX - len(path.name), 0)
    if total >= path_max:
        raise OutputError(f"output path too long: {total} bytes, the system allows "
                          f"{path_max - 1} ({str(path)[:40]}...)")


def kind_of(mode: int) -> str | None:
    """What a non-regular file is, or None for a regular file."""
    return next((what for test, what in _KINDS if test(mode)), None if stat.S_ISREG(mode)
                else "not a regular file")


def _resolved(path: Path) -> Path:
    """The path to write: `path`, or the regular file a symlink at `path` names."""
    if not path.is_symlink():
        return path
    try:
        target = path.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise OutputError(f"output {path} is a symlink that cannot be followed") from exc
    if not target.exists():
        raise OutputError(f"output {path} is a symlink to {target}, which does not exist; "
                          "give a file name")
    return target


def check_kind(path: Path, shown: Path) -> None:
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # nothing there (the folder check says)
        return
    except OSError as exc:
        raise OutputError(f"cannot write {shown}: {exc.strerror or exc}") from exc
    what = kind_of(mode)
    if what is None:
        return
    via = f" (through the symlink {shown})" if path != shown else ""
    hint = "; give a file name" if stat.S_ISDIR(mode) else \
        "; edgeopt writes only regular files"
    raise OutputError(f"output {path} is {what}{via}{hint}")


def _check_folder(path: Path, make_parents: bool) -> None:
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise OutputError(f"cannot create {path}: {parent} is not a folder")
    if not parent.is_dir():
        if not make_parents:
            raise OutputError(f"cannot create {path}: folder {parent} does not exist")
        parent = _existing_ancestor(path)
        blocked = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        if blocked is not None:
            raise OutputError(f"cannot create {path}: {blocked} is not a folder")
    if not os.access(parent, os.W_OK):
        why = "read-only file system" if read_only(parent) else "permission denied"
        raise OutputError(f"cannot write in {parent} ({why})")


def read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_output_path(path: str | os.PathLike, make_parents: bool = False) -> Path:
    """Refuse, before any work, a destination `write_file_atomic` could not write; returns
    the path to write (a symlink to a regular file resolved to that file).

    User messages: "output out.tflite is a folder; give a file name", "output /dev/null is a
    character device; edgeopt writes only regular files", "output name too long: ...",
    "cannot create a/b.tflite: folder a does not exist", "cannot write in dist (read-only
    file system)".
    """
    if "\0" in os.fspath(path):
        raise OutputError("output path contains a NUL byte")
    given = Path(os.path.abspath(path))
    check_path_length(given)
    target = _resolved(given)
    if target != given:
        check_path_length(target)
    check_kind(target, given)
    _check_folder(target, make_parents)
    return Path(path) if target == given else target


def mount_point(path: Path) -> Path:
    """The root of the file system holding `path` (its nearest existing folder)."""
    path = Path(os.path.abspath(path))
    folder = path if path.is_dir() else _existing_ancestor(path)
    try:
        device = folder.stat().st_dev
        while folder != folder.parent and folder.parent.stat().st_dev == device:
            folder = folder.parent
    except OSError:
        pass
    return folder
