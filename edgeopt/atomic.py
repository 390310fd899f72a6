"""The one file writer: every file edgeopt writes for the user goes through here.

    >>> out = check_output_path("digits.tflite")      # before any work: refuse bad -o early
    >>> write_file_atomic(out, tflite_bytes)            # doctest: +SKIP

A file is written to a short-named temporary sibling (same folder, so same file system),
flushed and fsynced, renamed over the destination, and the folder is fsynced: a crash
leaves the old file or the new one, never a mixture. Any failure, KeyboardInterrupt
included, removes the temporary file; a SIGKILL leaves it, and the next write into the same
folder removes it (its name carries the dead writer's pid).

Rules, checked up front by `check_output_path` (commands call it before loading anything)
and again just before the rename:

- outputs are regular files: a folder, device node, FIFO or socket at the destination, or a
  symlink to one, is refused; a symlink to a regular file is written through (the file it
  names is replaced, as `cp` would), a dangling one is refused;
- each path component fits the file system's NAME_MAX and the whole path its PATH_MAX; the
  temporary name is short, so any destination that fits can be written;
- the folder exists (or `make_parents`) and is writable.

The kind of the destination is checked again just before the rename; what is left is the
moment between that check and `rename(2)`, in which only someone who may write in the
destination's folder can swap a FIFO or device in (and a rename then replaces that
directory entry; it never writes into the device).

New files get mode 0644 minus the umask (the kernel applies it at creation): never group-
or world-writable even under umask 002, private under umask 077. The mode of a replaced
file is not carried over. Errors are `OutputError` (one `edgeopt: error:` line, exit 2); a
full disk names the destination's file system and its free space, not TMPDIR.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from pathlib import Path

from edgeopt.errors import OutputError
from edgeopt.tempfiles import pid_alive

TEMP_MARK = ".edgeopt-tmp-"
FILE_MODE = 0o644
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)
DEFAULT_NAME_MAX = 255
DEFAULT_PATH_MAX = 4096
# `.edgeopt-tmp-<pid>-<8 hex>`: pids stay below 2**22 on Linux
TEMP_NAME_LEN = len(TEMP_MARK) + 1 + 7 + 1 + 8
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"))


def size_text(n: int) -> str:
    """Bytes as KiB or MiB for messages."""
    return f"{n / 1024:.0f} KiB" if n < 1024 ** 2 else f"{n / 1024 ** 2:.1f} MiB"


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
    total = len(os.fsencode(str(path))) + max(reserve, TEMP_NAME_LEN - len(path.name), 0)
    if total >= path_max:
        raise OutputError(f"output path too long: {total} bytes, the system allows "
                          f"{path_max - 1} ({str(path)[:40]}...)")


def _kind(mode: int) -> str | None:
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


def _check_kind(path: Path, shown: Path) -> None:
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # nothing there (the folder check says)
        return
    except OSError as exc:
        raise OutputError(f"cannot write {shown}: {exc.strerror or exc}") from exc
    what = _kind(mode)
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
        why = "read-only file system" if _read_only(parent) else "permission denied"
        raise OutputError(f"cannot write in {parent} ({why})")


def _read_only(folder: Path) -> bool:
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
    _check_kind(target, given)
    _check_folder(target, make_parents)
    return Path(path) if target == given else target


def remove_stale_temp(folder: Path) -> None:
    """Delete temporary files of writers whose process is gone (SIGKILLed writes)."""
    try:
        entries = list(folder.glob(f"*{TEMP_MARK}*"))  # pathlib: * matches dot names
    except OSError:
        return
    for entry in entries:
        pid = _owner_pid(entry.name)
        if pid is not None and pid != os.getpid() and not pid_alive(pid):
            entry.unlink(missing_ok=True)


def _owner_pid(name: str) -> int | None:
    try:
        return int(name.split(TEMP_MARK, 1)[1].split("-", 1)[0])
    except (IndexError, ValueError):
        return None


def _temp_name(folder: Path) -> Path:
    return folder / f"{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"


def _open_new(tmp: Path) -> int:
    """Create `tmp` (mode FILE_MODE & ~umask), never opening an existing file."""
    return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                   | getattr(os, "O_CLOEXEC", 0), FILE_MODE)


def fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def replace_file(path: Path, content: bytes) -> None:
    """The mechanism without the checks: temp sibling, fsync, rename, fsync the folder.
    Raises the OSError; the temporary file is gone whatever happened."""
    folder = path.parent
    tmp = _temp_name(folder)
    try:
        # inside the try: an interrupt right after the file exists still removes it
        with os.fdopen(_open_new(tmp), "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        _check_kind(path, path)  # narrows the window: a FIFO swapped in since the check
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_folder(folder)


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


def disk_full_text(path: Path, needed: int) -> str:
    """'no space left on device writing P (it needs N; the file system at M has F free)'."""
    mount = mount_point(path)
    try:
        free = f", {size_text(shutil.disk_usage(mount).free)} free"
    except OSError:
        free = ""
    return (f"no space left on device writing {path} (it needs {size_text(needed)}; the file "
            f"system at {mount}{free})")


def write_error(exc: OSError, path: Path, needed: int) -> OutputError:
    """The one message for a failed write of `path`."""
    if exc.errno in DISK_FULL:
        return OutputError(f"{disk_full_text(path, needed)}; {path} was not changed")
    if exc.errno in NOT_WRITABLE:
        why = "read-only file system" if exc.errno == errno.EROFS or \
            _read_only(path.parent) else "permission denied"
        return OutputError(f"cannot write {path}: {why}")
    if exc.errno == errno.ENAMETOOLONG:
        return OutputError(f"cannot write {path}: the name is too long for its file system")
    return OutputError(f"cannot write {path}: {exc.strerror or exc}")


def write_file_atomic(path: str | os.PathLike, content: bytes | str,
                      make_parents: bool = False) -> Path:
    """Write `content` (str is UTF-8) as the regular file `path`, atomically; returns the
    path written. Raises OutputError with one message; `path` is untouched on failure."""
    data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    target = Path(os.path.abspath(check_output_path(path, make_parents)))
    try:
        if make_parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temp(target.parent)
        replace_file(target, data)
    except OSError as exc:
        raise write_error(exc, Path(path), len(data)) from exc
    return target


def append_text(path: str | os.PathLike, text: str, make_parents: bool = False) -> Path:
    """Append `text` to the regular file `path` (created with FILE_MODE & ~umask) and fsync.

    For logs that grow one record at a time (`bench --record`): one O_APPEND write keeps
    concurrent writers' lines whole, which a rewrite-and-rename would not (it would drop
    the other writer's line). Same destination rules and messages as `write_file_atomic`.
    """
    data = text.encode("utf-8")
    target = Path(os.path.abspath(check_output_path(path, make_parents)))
    try:
        if make_parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
                     | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
        try:
            _check_fd_kind(fd, Path(path))
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, "short write", str(target))
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise write_error(exc, Path(path), len(data)) from exc
    return target


def _check_fd_kind(fd: int, shown: Path) -> None:
    """The file really opened is regular (O_NONBLOCK kept a FIFO swapped in from blocking)."""
    what = _kind(os.fstat(fd).st_mode)
    if what is not None:
        raise OutputError(f"output {shown} is {what}; edgeopt writes only regular files")
