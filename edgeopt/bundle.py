"""Write a bundle folder atomically: all of it appears at once, or nothing changes.

Files are written into a staging folder beside the destination, flushed to disk, then
swapped in with one `renameat2(RENAME_EXCHANGE)`; the old bundle, now in the staging
folder, is removed. A crash or SIGKILL at any point leaves either the old bundle or the
new one at the destination, never a mixture. Staging folders of killed builds are
removed by the next build into the same parent folder.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

from edgeopt.errors import OutputError

STAGING_MARK = ".edgeopt-staging-"
MANIFEST = "manifest.json"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def check_destination(output: Path) -> None:
    """Fail early when `output` cannot take a bundle: a file, or a folder of other things."""
    if output.is_symlink() or (output.exists() and not output.is_dir()):
        raise OutputError(f"output {output} exists and is not a folder")
    if output.is_dir() and any(output.iterdir()) and not (output / MANIFEST).is_file():
        raise OutputError(f"output folder {output} is not empty and holds no edgeopt bundle; "
                          "choose a new folder")
    parent = output.absolute().parent
    if not parent.is_dir():
        raise OutputError(f"cannot create {output}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"cannot write in {parent}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_staging(parent: Path) -> None:
    """Delete staging folders whose build process is gone (killed builds)."""
    for entry in parent.glob(f".*{STAGING_MARK}*"):
        try:
            pid = int(entry.name.split(STAGING_MARK, 1)[1].split("-", 1)[0])
        except ValueError:
            continue
        if not _pid_alive(pid):
            shutil.rmtree(entry, ignore_errors=True)


def _fsync_tree(folder: Path) -> None:
    for path in [*folder.rglob("*"), folder]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2); False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _publish(staging: Path, output: Path) -> None:
    try:
        os.rename(staging, output)  # fails if another build published meanwhile
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EISDIR):
            raise
    check_destination(output)
    if _exchange(staging, output):
        shutil.rmtree(staging, ignore_errors=True)
        return
    backup = staging.with_name(staging.name + "-old")
    os.rename(output, backup)
    os.rename(staging, output)
    shutil.rmtree(backup, ignore_errors=True)


def write_bundle(output: Path, files: dict[str, bytes]) -> Path:
    """Write `files` (name -> content) as the folder `output`, atomically."""
    output = Path(output)
    check_destination(output)
    parent = output.absolute().parent
    remove_stale_staging(parent)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}{STAGING_MARK}{os.getpid()}-",
                                    dir=parent))
    try:
        for name, content in files.items():
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        os.chmod(staging, 0o755)
        _fsync_tree(staging)
        _publish(staging, output)
    except OSError as exc:
        raise OutputError(f"cannot write the bundle to {output}: {exc.strerror or exc}") from exc
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return output


def write_file_atomic(path: Path, content: bytes) -> None:
    """One file, via a temporary sibling and os.replace."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"output {path} is a folder; give a file name")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise OutputError(f"cannot create {path}: folder {parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def manifest_bytes(manifest: dict) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode()
