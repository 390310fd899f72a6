"""The one file writer: every file edgeopt writes for the user goes through here.

    >>> out = check_output_path("digits.tflite")      # before any work: refuse bad -o early
    >>> write_file_atomic(out, tflite_bytes)            # doctest: +SKIP

A file is written to a short-named temporary sibling (same folder, so same file system),
flushed and fsynced, renamed over the destination, and the folder is fsynced: a crash
leaves the old file or the new one, never a mixture. Any failure, KeyboardInterrupt
included, removes the temporary file; a SIGKILL leaves it, and the next write into the same
folder removes it (its name carries the dead writer's pid).

The destination rules (regular files only, names that fit, a writable folder) are
`edgeopt.output_paths.check_output_path`'s: commands call it before loading anything, and
the writer calls it again. The temporary name is short, so any destination that fits can
be written. The kind of the destination is checked once more just before the rename; what
is left is the
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
from pathlib import Path

from edgeopt.errors import OutputError
from edgeopt.output_paths import (
    TEMP_NAME_MAX,
    check_kind,
    check_output_path,
    check_path_length,
    kind_of,
    mount_point,
    read_only,
)
from edgeopt.tempfiles import pid_alive

TEMP_MARK = ".edgeopt-tmp-"
FILE_MODE = 0o644
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


__all__ = ["FILE_MODE", "TEMP_MARK", "append_text", "check_output_path", "check_path_length",
           "mount_point", "replace_file", "size_text", "write_file_atomic"]


def size_text(n: int) -> str:
    """Bytes as KiB or MiB for messages."""
    return f"{n / 1024:.0f} KiB" if n < 1024 ** 2 else f"{n / 1024 ** 2:.1f} MiB"


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
    name = f"{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"  # short: see TEMP_NAME_MAX
    return folder / name[:TEMP_NAME_MAX]


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
        check_kind(path, path)  # narrows the window: a FIFO swapped in since the check
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_folder(folder)


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
            read_only(path.parent) else "permission denied"
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
    what = kind_of(os.fstat(fd).st_mode)
    if what is not None:
        raise OutputError(f"output {shown} is {what}; edgeopt writes only regular files")
