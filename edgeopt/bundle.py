"""Write a bundle folder atomically: all of it appears at once, or nothing changes.

Files are written into a staging folder beside the destination, flushed to disk, then
swapped in with one `renameat2(RENAME_EXCHANGE)`; the old bundle, now in the staging
folder, is removed. A crash or SIGKILL at any point leaves either the old bundle or the
new one at the destination, never a mixture. Staging folders of killed builds are
removed by the next build into the same parent folder (where the system cannot exchange
two folders, a killed build's backup of the old bundle is put back instead).
A full disk ends the write with the file that did not fit named, and nothing left over.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

from edgeopt.atomic import DISK_FULL, check_path_length, mount_point, replace_file, size_text
from edgeopt.bundle_owner import MARKER, marker_bytes, ownership_problem, remove_owned
from edgeopt.errors import DeviceError, EdgeoptError, OutputError, first_line
from edgeopt.manifest import parse_manifest
from edgeopt.tempfiles import pid_alive

STAGING_MARK = ".edgeopt-staging-"
BACKUP_SUFFIX = "-old"
KEPT_MARK = ".edgeopt-kept-"
MANIFEST = "manifest.json"
# `.<name>.edgeopt-staging-<pid>-<8 chars>-old` beside the destination
STAGING_RESERVE = len(STAGING_MARK) + 1 + 7 + 1 + 8 + len(BACKUP_SUFFIX)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def check_destination(output: Path) -> None:
    """Fail early when `output` cannot take a bundle: a file, a link, or a folder that is
    not provably an edgeopt bundle (bundle_owner.py) and whose files would be lost."""
    check_path_length(output, reserve=STAGING_RESERVE)
    if output.is_symlink():
        raise OutputError(f"output {output} is a symbolic link; give the folder itself "
                          "(edgeopt replaces only folders it wrote)")
    if output.exists() and not output.is_dir():
        raise OutputError(f"output {output} exists and is not a folder")
    if output.is_dir() and any(output.iterdir()):
        problem = ownership_problem(output)
        if problem:
            raise OutputError(f"output folder {output} {problem}; nothing was written "
                              "(choose a new folder)")
    parent = output.absolute().parent
    if not parent.is_dir():
        raise OutputError(f"cannot create {output}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"cannot write in {parent}")


def _owner_pid(name: str, mark: str) -> int | None:
    """The pid written into a staging or temporary name after `mark`, if there is one."""
    try:
        return int(name.split(mark, 1)[1].split("-", 1)[0].split(".", 1)[0])
    except (IndexError, ValueError):
        return None


def remove_stale_staging(parent: Path) -> None:
    """Delete staging folders whose build process is gone (killed builds); a backup of an
    old bundle whose destination is empty is put back, not deleted."""
    for entry in parent.glob(f".*{STAGING_MARK}*"):
        pid = _owner_pid(entry.name, STAGING_MARK)
        if pid is None or pid_alive(pid):
            continue
        destination = parent / entry.name[1:].split(STAGING_MARK, 1)[0]
        if entry.name.endswith(BACKUP_SUFFIX) and not destination.exists():
            try:
                os.rename(entry, destination)
                continue
            except OSError:
                pass
        _discard(entry, destination)


def _discard(folder: Path, output: Path) -> Path | None:
    """Remove a staging folder. One holding a marker may hold the old bundle swapped out
    of `output`: only the files its marker lists go, and if anything else is left the
    folder is kept, renamed beside `output` (returned) so that no sweep deletes it."""
    if not folder.exists():
        return None
    if not (folder / MARKER).is_file():  # a staging folder a build was still filling
        shutil.rmtree(folder, ignore_errors=True)
        return None
    if not remove_owned(folder):
        return None
    kept = output.absolute().parent / f"{output.name}{KEPT_MARK}{os.getpid()}"
    try:
        os.rename(folder, kept)
    except OSError:
        return folder
    return kept


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    for path in [*folder.rglob("*"), folder]:
        _fsync_path(path)


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


def _changed_meanwhile(output: Path, problem: str, kept: Path | None) -> OutputError:
    where = f"it was put back at {output}" if kept is None else f"it was kept at {kept}"
    return OutputError(f"output folder {output} changed while the bundle was written: it now "
                       f"{problem}; {where}, and no bundle was written")


def _swap_in(staging: Path, output: Path) -> None:
    """Exchange, then check what came out: a folder that changed after check_destination
    (a file added, a bundle file edited) is swapped back, not deleted."""
    problem = ownership_problem(staging)  # staging now holds the old folder
    if problem is None:
        leftover = _discard(staging, output)
        if leftover is not None:
            raise OutputError(f"the bundle was written to {output}, but files appeared in the "
                              f"old one while it was replaced; they were kept at {leftover}")
        return
    if _exchange(staging, output):
        _discard(staging, output)  # our new bundle, back in staging
        raise _changed_meanwhile(output, problem, None)
    kept = _discard(staging, output)
    raise _changed_meanwhile(output, problem, kept)


def _publish(staging: Path, output: Path) -> None:
    try:
        os.rename(staging, output)  # fails if another build published meanwhile
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EISDIR):
            raise
    check_destination(output)
    if _exchange(staging, output):
        _swap_in(staging, output)
        return
    # No exchange on this system: a kill between these two renames leaves the old bundle
    # in the backup, which remove_stale_staging puts back.
    backup = staging.with_name(staging.name + BACKUP_SUFFIX)
    os.rename(output, backup)
    problem = ownership_problem(backup)
    if problem is not None:
        os.rename(backup, output)
        raise _changed_meanwhile(output, problem, None)
    os.rename(staging, output)
    _discard(backup, output)


def _free(output: Path) -> str:
    try:
        return f" has {size_text(shutil.disk_usage(mount_point(output)).free)} free"
    except OSError:
        return ""


def _write_error(exc: OSError, output: Path, name: str | None, needed: int) -> OutputError:
    where = output / name if name else output
    if exc.errno in DISK_FULL:
        return OutputError(f"no space left on device writing {where} (the bundle needs "
                           f"{size_text(needed)}; the file system at {mount_point(output)}"
                           f"{_free(output)}); nothing was changed at {output}")
    return OutputError(f"cannot write the bundle to {output}: {exc.strerror or exc} "
                       f"({where})")


def _stage(staging: Path, files: dict[str, bytes]) -> None:
    """Write every file into `staging`; an OSError says which file (`.bundle_file`)."""
    for name, content in files.items():
        target = staging / name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            replace_file(target, content)
        except OSError as exc:
            exc.bundle_file = name
            raise


def write_bundle(output: Path, files: dict[str, bytes]) -> Path:
    """Write `files` (name -> content) as the folder `output`, atomically."""
    output = Path(output)
    check_destination(output)
    parent = output.absolute().parent
    remove_stale_staging(parent)
    needed = sum(len(c) for c in files.values())
    staging = None
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{output.name}{STAGING_MARK}{os.getpid()}-",
                                        dir=parent))
        _stage(staging, {**files, MARKER: marker_bytes(files)})
        os.chmod(staging, 0o755)
        _fsync_tree(staging)
        _publish(staging, output)
        _fsync_path(parent)
    except OSError as exc:
        raise _write_error(exc, output, getattr(exc, "bundle_file", None), needed) from exc
    finally:
        if staging is not None:
            _discard(staging, output)
    return output


def manifest_bytes(manifest: dict) -> bytes:
    """The manifest as written, after checking it against the typed model (edgeopt.manifest):
    a key or type the model does not declare is a bug in edgeopt and fails the build."""
    parse_manifest(manifest)
    return (json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode()


def _file_problems(folder: Path, record: dict, what: str) -> list[str]:
    import hashlib

    path = folder / record["file"]
    if not path.is_file():
        return [f"{what} {record['file']} is missing"]
    content = path.read_bytes()
    problems = []
    if len(content) != record.get("size_bytes", len(content)):
        problems.append(f"{what} {record['file']} has {len(content)} bytes, the manifest "
                        f"says {record['size_bytes']}")
    if hashlib.sha256(content).hexdigest() != record.get("sha256"):
        problems.append(f"{what} {record['file']} does not match its sha256 in the manifest")
    return problems


def verify_bundle(folder: Path) -> list[str]:
    """What is wrong with a bundle folder (empty list: whole): the manifest parses, and the
    model (and compiled model) match the sizes and sha256 it records."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"{folder / MANIFEST} cannot be read: {exc}"]
    try:
        problems = _file_problems(folder, manifest["model"], "model")
        if manifest.get("compiled"):
            problems += _file_problems(folder, manifest["compiled"], "compiled model")
    except (KeyError, TypeError) as exc:
        return [f"{folder / MANIFEST} lacks the model record ({exc})"]
    return problems


def _disk_full_in(exc: BaseException) -> OSError | str | None:
    """The ENOSPC/EDQUOT OSError in an exception's chain, or a message that reports one
    (TensorFlow and onnx2tf turn it into text)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_FULL:
            return exc
        if "No space left on device" in str(exc) or "Disk quota exceeded" in str(exc):
            return str(exc)
        exc = exc.__cause__ or exc.__context__
    return None


def disk_full_message(exc: BaseException) -> str | None:
    """One line for a build that ran out of disk space outside the bundle (temporary files
    of conversion and quantization go to TMPDIR), or None when `exc` is something else."""
    if isinstance(exc, (OutputError, DeviceError)):  # the bundle's disk, or the device's
        return None
    found = _disk_full_in(exc)
    if found is None:
        return None
    temp = tempfile.gettempdir()
    try:
        free = f", {size_text(shutil.disk_usage(temp).free)} free there"
    except OSError:
        free = ""
    where = f" writing {found.filename}" if isinstance(found, OSError) and found.filename \
        else ""
    step = "" if not isinstance(exc, EdgeoptError) \
        else f" ({first_line(exc).split(': ', 1)[0][:120]})"
    return (f"no space left on device{where}: temporary files go to {temp}{free}; free "
            f"some space or set TMPDIR to a folder on a larger disk{step}")
