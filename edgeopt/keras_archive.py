"""Check a `.keras` archive before Keras opens it: only Keras's own members, no tricks.

    >>> check_keras_archive(Path("samples/digits_cnn.keras"))   # None, or ModelLoadError

A `.keras` file is a zip of `config.json`, `metadata.json`, `model.weights.h5` (or `.npz`)
and an optional `assets/` folder, written uncompressed. Keras extracts the archive to a
temporary folder when it holds assets, and reads members into memory, so an archive from
elsewhere could name a path outside that folder (`../x`, `/etc/x`), carry a symlink, or
declare gigabytes that a few kilobytes of deflate expand into. Such archives are refused
here, from the zip's directory alone, before any member is decompressed; then the members'
CRCs are checked, and every object `config.json` declares must be a Keras built-in that
runs no outside code (CODE_LAYERS: Lambda, TFSMLayer...; no custom or registered class):
safe mode refuses Lambda too, but without saying which layer.
"""

from __future__ import annotations

import json
import re
import stat
import zipfile
import zlib
from pathlib import Path

from edgeopt.errors import ModelLoadError
from edgeopt.inputs import bounded_recursion

KERAS_FILES = frozenset({"config.json", "metadata.json", "model.weights.h5",
                         "model.weights.npz"})
ASSETS = "assets/"
# A .tflite flatbuffer cannot exceed 2 GiB, so no member of a model edgeopt can ship may.
MAX_MEMBER_BYTES = 2 * 1024 ** 3
MAX_TOTAL_BYTES = 4 * 1024 ** 3
MAX_CONFIG_BYTES = 64 * 1024 ** 2   # config.json is read whole into memory
MAX_MEMBERS = 10_000
# Keras stores members uncompressed; deflate of real weights, even pruned ones, stays far
# below 100:1 (Keras's own limit), while a zip bomb reaches about 1000:1.
MAX_RATIO = 100
RATIO_FLOOR_BYTES = 1024 ** 2        # small members (JSON) may compress well
_DRIVE = re.compile(r"^[A-Za-z]:")


def _mib(n: int) -> str:
    return f"{n / 1024 ** 2:,.1f} MiB"


def member_name_problem(info: zipfile.ZipInfo) -> str | None:
    """Why a member's name or type could reach outside the extraction folder, if it could."""
    name = info.filename
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        return "has an absolute path"
    if ".." in parts:
        return "climbs out of the archive with '..'"
    if "\0" in name or any(ord(c) < 32 for c in name):
        return "has control characters in its name"
    kind = stat.S_IFMT(info.external_attr >> 16) if info.create_system == 3 else 0
    if kind == stat.S_IFLNK:
        return "is a symbolic link"
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        return "is a special file (device, FIFO or socket)"
    if info.flag_bits & 0x1:
        return "is encrypted"
    return None


def _in_keras_format(name: str) -> bool:
    return name in KERAS_FILES or name.startswith(ASSETS)


def bomb_ratio(info: zipfile.ZipInfo) -> float | None:
    """The member's declared inflation ratio when it is past what real data compresses to
    (a decompression bomb), else None; read from the zip directory, nothing inflated."""
    ratio = info.file_size / max(info.compress_size, 1)
    return ratio if info.file_size > RATIO_FLOOR_BYTES and ratio > MAX_RATIO else None


def _size_problem(info: zipfile.ZipInfo) -> str | None:
    """Why a member is too big to read, judged from the sizes the directory declares."""
    limit = MAX_CONFIG_BYTES if info.filename.endswith(".json") else MAX_MEMBER_BYTES
    if info.file_size > limit:
        return f"declares {_mib(info.file_size)}, over the limit of {_mib(limit)}"
    if (ratio := bomb_ratio(info)) is not None:
        return (f"expands {ratio:,.0f}-fold ({_mib(info.compress_size)} stored, "
                f"{_mib(info.file_size)} declared): a decompression bomb")
    return None


def _check_members(path: Path, infos: list[zipfile.ZipInfo]) -> None:
    names = [i.filename for i in infos]
    if len(infos) > MAX_MEMBERS:
        raise ModelLoadError(f"{path}: the archive has {len(infos)} members (at most "
                             f"{MAX_MEMBERS}); refusing to open it")
    for info in infos:
        if problem := member_name_problem(info):
            raise ModelLoadError(f"{path}: archive member '{info.filename}' {problem}; "
                                 "refusing to open it")
    if "config.json" not in names:
        raise ModelLoadError(f"{path} is a zip but not a Keras model (no config.json)")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ModelLoadError(f"{path}: archive member '{duplicates[0]}' appears more than "
                             "once; refusing to guess which one Keras would read")
    for info in infos:
        if not _in_keras_format(info.filename):
            raise ModelLoadError(f"{path}: archive member '{info.filename}' is not part of the "
                                 "Keras format (config.json, metadata.json, model.weights.h5, "
                                 "assets/); refusing to open it")
        if problem := _size_problem(info):
            raise ModelLoadError(f"{path}: archive member '{info.filename}' {problem}; "
                                 "refusing to open it")
    total = sum(i.file_size for i in infos)
    if total > MAX_TOTAL_BYTES:
        raise ModelLoadError(f"{path}: the archive declares {_mib(total)} in all, over the "
                             f"limit of {_mib(MAX_TOTAL_BYTES)}; refusing to open it")


# Built-in classes that run code or read files from outside the archive: Python bytecode
# (Lambda and the TF op lambdas), another framework's callable (Jax, Flax, a pickled Torch
# module) or a SavedModel folder given by path (TFSMLayer).
CODE_LAYERS = frozenset({"Lambda", "TFOpLambda", "SlicingOpLambda", "__lambda__", "TFSMLayer",
                         "TorchModuleWrapper", "JaxLayer", "FlaxLayer"})
# Serialized values that are no class at all (tensors, arrays, slices in a layer's call).
VALUE_TYPES = frozenset({"__keras_tensor__", "__tensor__", "__numpy__", "__bytes__",
                         "__typespec__", "__ellipsis__", "__slice__", "__str__"})
VOCABULARY_LAYERS = frozenset({"StringLookup", "IntegerLookup", "TextVectorization"})


def _object_problem(node: dict) -> str | None:
    """Why one serialized object ({"module", "class_name", ...}) may not be loaded."""
    name, module = node.get("class_name"), node.get("module")
    registered = node.get("registered_name")
    if name in CODE_LAYERS:
        return (f"is a {name} layer, which holds Python code" if "ambda" in str(name)
                else f"is a {name} layer, which runs code from outside the archive")
    if module is None:
        return None if name in VALUE_TYPES else f"is a '{name}' object of no Keras module"
    if not isinstance(module, str) or not (module == "keras" or module.startswith("keras.")):
        return f"is a custom object ({module}.{name}), not a Keras built-in"
    if registered not in (None, name):
        return f"is a custom object registered as '{registered}', not a Keras built-in"
    inner = node.get("config")
    if name in VOCABULARY_LAYERS and isinstance(inner, dict) \
            and isinstance(inner.get("vocabulary"), str):
        return f"is a {name} layer that reads its vocabulary from a file path"
    return None


def _unsafe_objects(config) -> list[tuple[str, str]]:
    """(layer name, problem) for each serialized object edgeopt will not let Keras build."""
    found, stack = [], [(config, "?")]
    while stack:
        node, layer = stack.pop()
        if isinstance(node, list):
            stack.extend((item, layer) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        inner = node.get("config")
        if isinstance(inner, dict) and isinstance(inner.get("name"), str) \
                and "class_name" in node:
            layer = inner["name"]
        if "class_name" in node and (problem := _object_problem(node)):
            found.append((layer, problem))
        stack.extend((value, layer) for value in node.values())
    return found


def _check_config(path: Path, archive: zipfile.ZipFile) -> None:
    """Only Keras built-in classes, none that runs code: what safe mode refuses, said with
    the layer's name, and what it lets through (custom registered classes, TFSMLayer)."""
    try:
        with bounded_recursion():
            config = json.loads(archive.read("config.json"))
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path}: config.json is not valid JSON ({exc})") from exc
    unsafe = _unsafe_objects(config)
    if unsafe:
        layer, problem = unsafe[0]
        raise ModelLoadError(
            f"{path}: layer '{layer}' {problem}; edgeopt loads Keras models in safe mode "
            "and never runs code from a model file (rebuild the model with built-in layers "
            "and save it again)")


def check_keras_archive(path: Path) -> None:
    """Refuse unsafe or malformed `.keras` archives with a one-line reason."""
    try:
        with zipfile.ZipFile(path) as archive:
            _check_members(path, archive.infolist())
            bad = archive.testzip()
            if bad is not None:
                raise ModelLoadError(f"{path}: archive member '{bad}' is corrupt")
            _check_config(path, archive)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError,
            NotImplementedError, RuntimeError, zlib.error) as exc:
        raise ModelLoadError(f"{path} is not a readable .keras archive: {exc}") from exc
