"""Files edgeopt reads from the user: regular files only, each read under a cap that fits
its format, so a device node, a FIFO or a sparse file ends in one error, not a hang or an
allocation.

    >>> text = read_text("edgeopt.toml", "config file", ConfigError, CAPS["config"])

A path is opened with O_NONBLOCK (opening a FIFO with no writer would block) and checked
with fstat on the descriptor read from, so what was checked is what is read. Paths handed
to a third-party reader (onnx, LiteRT, Keras, numpy, PIL) go through `check_regular` first.
"""

from __future__ import annotations

import os
import stat
import sys
import tomllib
from contextlib import contextmanager

from edgeopt.errors import EdgeoptError

MiB = 1 << 20
GiB = 1 << 30

# A protobuf and a flatbuffer cannot exceed 2 GiB; a .keras zip holds at most the members
# keras_archive allows; text files edgeopt reads are small by nature.
CAPS = {
    "onnx": 2 * GiB, "tflite": 2 * GiB, "keras": 4 * GiB, "pt2": 4 * GiB, "saved_model": 2 * GiB,
    "numpy": 8 * GiB, "image": 256 * MiB, "config": 4 * MiB, "labels": 16 * MiB,
    "records": 256 * MiB, "recipe": 4 * MiB, "profile": 4 * MiB, "external_data": 64 * GiB,
}
# Files larger than this whose blocks on disk cover less than a tenth of their size are
# mostly holes: no exporter writes a model that way, and reading one reads gigabytes of zeros.
SPARSE_FLOOR_BYTES = 64 * MiB
SPARSE_RATIO = 10
# Nesting no config, recipe or profile edgeopt reads needs (tomllib recurses per level).
MAX_TOML_DEPTH = 32
MAX_PARSE_RECURSION = 2000  # Python's default is 1000; some libraries raise it far higher

_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


def _size_text(n: int) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / MiB:.1f} MiB"


def check_stat(st: os.stat_result, path: str | os.PathLike, what: str,
               error: type[EdgeoptError], cap: int) -> int:
    """The size of a regular file within `cap`; anything else raises `error` naming it."""
    kind = _KINDS.get(stat.S_IFMT(st.st_mode))
    if kind is not None or not stat.S_ISREG(st.st_mode):
        raise error(f"{what} {path} is not a regular file ({kind or 'a special file'}); "
                    "edgeopt reads regular files only")
    if st.st_size > cap:
        raise error(f"{what} {path} is {_size_text(st.st_size)}, over the "
                    f"{_size_text(cap)} such a file may take; refusing to read it")
    on_disk = getattr(st, "st_blocks", None)
    if (on_disk is not None and st.st_size > SPARSE_FLOOR_BYTES
            and on_disk * 512 * SPARSE_RATIO < st.st_size):
        raise error(f"{what} {path} is a sparse file ({_size_text(st.st_size)} long, "
                    f"{_size_text(on_disk * 512)} on disk): mostly holes, not a real "
                    f"{what}; refusing to read it")
    return st.st_size


def open_regular(path: str | os.PathLike, what: str, error: type[EdgeoptError],
                 cap: int) -> tuple[int, int]:
    """(descriptor, size) of a regular file within `cap`; the caller closes the descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        size = check_stat(os.fstat(fd), path, what, error, cap)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, size


def check_regular(path: str | os.PathLike, what: str, error: type[EdgeoptError],
                  cap: int) -> int:
    """Check a file a third-party reader will open by name: its size, or `error`."""
    fd, size = open_regular(path, what, error, cap)
    os.close(fd)
    return size


def read_bytes(path: str | os.PathLike, what: str, error: type[EdgeoptError], cap: int,
               limit: int | None = None) -> bytes:
    """The file's bytes (the first `limit` of them when given), never more than `cap`."""
    fd, size = open_regular(path, what, error, cap)
    want = size if limit is None else min(size, limit)
    chunks, got = [], 0
    try:
        with os.fdopen(fd, "rb", closefd=True) as f:
            while got < want:  # a file that grows while read stops at its checked size
                chunk = f.read(min(want - got, 16 * MiB))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    return b"".join(chunks)


def read_text(path: str | os.PathLike, what: str, error: type[EdgeoptError], cap: int) -> str:
    """The file as UTF-8 text; bytes that are not UTF-8 raise `error` with their offset."""
    data = read_bytes(path, what, error, cap)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text (byte {exc.start} is "
                    f"0x{data[exc.start]:02x})") from None


@contextmanager
def bounded_recursion():
    """Parse nested text (TOML, JSON) under Python's usual recursion limit: the parsers
    recurse per nesting level, and under the far higher limit some libraries set (TensorFlow's
    importers do) 50,000 nested arrays exhaust the C stack and kill the process."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(min(limit, MAX_PARSE_RECURSION))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def read_toml(path: str | os.PathLike, what: str, error: type[EdgeoptError],
              cap: int | None = None) -> dict:
    """A TOML file, at most `MAX_TOML_DEPTH` tables or arrays deep."""
    text = read_text(path, what, error, cap or CAPS["config"])
    try:
        with bounded_recursion():
            table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"cannot read {what} {path}: not valid TOML ({exc})") from None
    except RecursionError:
        raise error(f"cannot read {what} {path}: it nests arrays or tables deeper than TOML "
                    f"parsing allows (edgeopt reads at most {MAX_TOML_DEPTH} levels)") from None

    if _depth(table) > MAX_TOML_DEPTH:
        raise error(f"{what} {path} nests arrays or tables more than {MAX_TOML_DEPTH} "
                    "levels deep; no edgeopt setting needs that")
    return table


def _depth(value) -> int:
    """Nesting depth of dicts and lists, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        deepest = max(deepest, level)
        stack.extend((c, level + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def looks_like_protobuf(head: bytes) -> bool:
    """Whether `head` can start a protobuf message: a tag with a field number of at least 1
    and a wire type protobuf still uses (a file of zeros or a text file is neither)."""
    tag, shift = 0, 0
    for byte in head[:5]:
        tag |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return tag >> 3 >= 1 and tag & 7 in (0, 1, 2, 5)
    return False
