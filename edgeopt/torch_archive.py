"""Check a PyTorch `.pt2` archive (torch.export.save) before any of it is unpickled or run.

`torch.export.load` is not safe on a file from someone else: it unpickles pickled weights
and constants with `weights_only=False`, unpickles "opaque" objects with `pickle.loads`,
falls back to `weights_only=False` when the sample inputs do not load, loads AOTInductor
shared libraries, parses symbolic-shape expressions with `sympy.sympify` (which evaluates
Python) and `exec`s the program's `guards_code`. edgeopt never calls it. This module reads
the zip directory and the graph JSON only (no torch needed) and refuses:

- any member outside the ExportedProgram format (compiled code, pickled Python objects,
  legacy pickled weights, executorch/MTIA payloads), a path out of the archive, a bomb;
- a program saved by a newer torch (schema major or minor past the installed one's);
- guard code, shape expressions that are not arithmetic on shape symbols, node and tensor
  names that are not identifiers (FX turns them into Python source);
- any op not in `ops_torch.toml` (aten ops less the excluded families, edgeopt's op
  allowlist), and control-flow or other higher-order ops edgeopt cannot convert.

edgeopt.torch_program then builds the program from the checked parts, weights through
`torch.load(weights_only=True)`.

    >>> archive = check_pt2_archive(Path("model.pt2"))   # doctest: +SKIP
    >>> archive.ops["aten.conv2d"]
    'node conv2d'
"""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from edgeopt.errors import ModelLoadError
from edgeopt.keras_archive import bomb_ratio, member_name_problem
from edgeopt.op_allowlist import check_ops

MAX_MEMBERS = 100_000
MAX_JSON_BYTES = 256 * 1024 ** 2
MAX_TOTAL_BYTES = 4 * 1024 ** 3
ARCHIVE_VERSION = "0"  # torch's pt2_archive_constants.ARCHIVE_VERSION_VALUE
MODEL = "model"  # torch.export.save writes its one program under this name

# Members (below the archive's root folder) that torch.export.save writes.
_FIXED = frozenset({"archive_format", "archive_version", "byteorder", ".data/version",
                    ".data/serialization_id", f"models/{MODEL}.json",
                    f"data/weights/{MODEL}_weights_config.json",
                    f"data/constants/{MODEL}_constants_config.json",
                    f"data/sample_inputs/{MODEL}.pt"})
_PAYLOAD = re.compile(r"^data/(weights/weight_|constants/tensor_)\d+$")
_EXTRA = "extra/"  # torch.export.save's extra_files: read by nobody here
# Members that hold code or arbitrary pickles, and why they are refused.
_REFUSED = (
    (re.compile(r"^data/aotinductor/"), "compiled AOTInductor code (a shared library)"),
    (re.compile(r"custom_obj_|opaque_obj_"), "a pickled Python object"),
    (re.compile(r"^data/(weights|constants)/[^/]*\.pt$"), "weights in the legacy pickle format"),
    (re.compile(r"^(data/executorch|data/mtia|xl_model_weights)/"), "another runtime's payload"),
)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A shape expression: integers, shape symbols (s0, u3, ...), arithmetic and the sympy
# functions torch's serializer writes; nothing that names an attribute or a builtin.
_EXPR_TOKEN = re.compile(r"\s*(?:\d+|[su]\d+|[-+*/%(),]|\*\*|//|Mod|FloorDiv|CleanDiv|"
                         r"PythonMod|Max|Min|CeilToInt|FloorToInt|TruncToInt|Abs|IntTrueDiv|"
                         r"Eq|Ne|Ge|Gt|Le|Lt|And|Or|Not|True|False|==|!=|>=|<=|<|>)")
# Python-level call targets export leaves in a graph: tuple indexing and shape arithmetic.
PYTHON_TARGETS = frozenset({"_operator.getitem", "_operator.add", "_operator.sub",
                            "_operator.mul", "_operator.floordiv", "_operator.truediv",
                            "_operator.mod", "_operator.neg", "torch.sym_int",
                            "torch.sym_float", "torch.sym_max", "torch.sym_min",
                            "torch.sym_not", "math.ceil", "math.floor", "math.trunc"})


@dataclass(frozen=True)
class Pt2Archive:
    """A checked archive: its root folder, the program JSON and the ops it calls."""

    path: Path
    root: str
    program: dict
    ops: dict[str, str]  # allowlist name -> the first node that calls it
    torch_version: str


def looks_like_pt2(names: list[str]) -> bool:
    """Whether a zip's member names are those of a torch.export.save archive."""
    return any(n.endswith(f"/models/{MODEL}.json") for n in names) and \
        any(n.endswith("/archive_format") for n in names)


def _root(path: Path, names: list[str]) -> str:
    roots = {n.split("/", 1)[0] for n in names}
    if len(roots) != 1 or any("/" not in n for n in names):
        raise ModelLoadError(f"{path}: a .pt2 archive keeps every member in one root folder; "
                             "this one does not (it was not written by torch.export.save)")
    return roots.pop() + "/"


def _member_problem(name: str) -> str | None:
    for pattern, what in _REFUSED:
        if pattern.search(name):
            return f"holds {what}, which edgeopt never loads"
    if name in _FIXED or _PAYLOAD.match(name) or name.startswith(_EXTRA):
        return None
    return "is not part of an ExportedProgram archive"


def _check_members(path: Path, infos: list[zipfile.ZipInfo]) -> str:
    if len(infos) > MAX_MEMBERS:
        raise ModelLoadError(f"{path}: the archive has {len(infos):,} members (at most "
                             f"{MAX_MEMBERS:,}); refusing to open it")
    names = [i.filename for i in infos]
    if len(set(names)) != len(names):
        raise ModelLoadError(f"{path}: an archive member appears more than once; refusing to "
                             "guess which one torch would read")
    root = _root(path, names)
    for info in infos:
        inner = info.filename[len(root):]
        problem = member_name_problem(info) or _member_problem(inner)
        if problem is None and (ratio := bomb_ratio(info)) is not None:
            problem = f"expands {ratio:,.0f}-fold: a decompression bomb"
        if problem:
            raise ModelLoadError(f"{path}: archive member '{info.filename}' {problem}; "
                                 "refusing to open it")
    if sum(i.file_size for i in infos) > MAX_TOTAL_BYTES:
        raise ModelLoadError(f"{path}: the archive declares more than "
                             f"{MAX_TOTAL_BYTES // 1024 ** 3} GiB; refusing to open it")
    return root


def _read(path: Path, archive: zipfile.ZipFile, name: str, cap: int) -> bytes:
    try:
        info = archive.getinfo(name)
    except KeyError:
        raise ModelLoadError(f"{path}: the .pt2 archive has no '{name}'; it is truncated or "
                             "was not written by torch.export.save") from None
    if info.file_size > cap:
        raise ModelLoadError(f"{path}: '{name}' declares {info.file_size:,} bytes, over the "
                             f"{cap:,} edgeopt reads")
    try:
        return archive.read(name)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise ModelLoadError(f"{path}: cannot read '{name}' from the archive ({exc}); the "
                             "file is corrupt or truncated") from None


def read_json(path: Path, archive: zipfile.ZipFile, name: str) -> dict:
    """One JSON member of the archive, as a dict."""
    data = _read(path, archive, name, MAX_JSON_BYTES)
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ModelLoadError(f"{path}: '{name}' is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ModelLoadError(f"{path}: '{name}' is not a JSON object")
    return value


def _check_version(path: Path, archive: zipfile.ZipFile, root: str, program: dict,
                   supported: tuple[int, int] | None) -> str:
    version = _read(path, archive, root + "archive_version", 64).decode("latin-1").strip()
    saved_by = str(program.get("torch_version") or "an unknown torch")
    schema = program.get("schema_version") or {}
    major, minor = schema.get("major"), schema.get("minor")
    if version != ARCHIVE_VERSION or not isinstance(major, int) or not isinstance(minor, int):
        raise ModelLoadError(f"{path}: archive version {version!r} / schema {schema!r} is not "
                             "one edgeopt reads (saved by torch " + saved_by + ")")
    if supported is not None and (major, minor) > supported:
        raise ModelLoadError(
            f"{path} was saved by torch {saved_by} (export schema {major}.{minor}); the "
            f"installed torch reads schema {supported[0]}.{supported[1]} at most: install "
            f"torch {saved_by} or newer, or save the program with the installed torch")
    if supported is not None and major != supported[0]:
        raise ModelLoadError(f"{path}: export schema {major}.{minor} (torch {saved_by}) is "
                             f"older than the installed torch reads ({supported[0]}.x); "
                             "re-save the program with the installed torch")
    return saved_by


def _walk(value, key: str = ""):
    """(key, value) of every field of the program JSON, depth first, without recursion."""
    stack = [(key, value)]
    while stack:
        key, value = stack.pop()
        yield key, value
        if isinstance(value, dict):
            stack.extend(value.items())
        elif isinstance(value, list):
            stack.extend((key, v) for v in value)


def _expression_ok(text: str) -> bool:
    position = 0
    while position < len(text):
        match = _EXPR_TOKEN.match(text, position)
        if match is None or match.end() == position:
            return text[position:].strip() == ""
        position = match.end()
    return True


def _check_text(path: Path, program: dict) -> None:
    """No guard code; only identifiers as names, only arithmetic as shape expressions."""
    if program.get("guards_code"):
        raise ModelLoadError(f"{path}: the program carries guard code (Python that torch "
                             "would exec); edgeopt never runs code from a model file")
    for key, value in _walk(program.get("graph_module", {}).get("graph", {})):
        if key == "name" and isinstance(value, str) and value and not _IDENTIFIER.match(value):
            raise ModelLoadError(f"{path}: graph name {value[:60]!r} is not an identifier; "
                                 "torch.export writes none such, and FX would turn it into "
                                 "Python source: refusing the file")
        if key == "expr_str" and (not isinstance(value, str) or not _expression_ok(value)):
            raise ModelLoadError(f"{path}: shape expression {str(value)[:60]!r} is not "
                                 "arithmetic on shape symbols; refusing to evaluate it")


_OP_TARGET = re.compile(r"^torch\.ops\.([a-z][a-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)"
                        r"\.([A-Za-z][A-Za-z0-9_]*)$")
_HOP_TARGET = re.compile(r"^torch\.ops\.higher_order\.([A-Za-z_][A-Za-z0-9_]*)$")


def allowlist_name(target: str) -> str:
    """`torch.ops.aten.conv2d.default` -> `aten.conv2d`; anything else stays as it is, so
    a target that is not exactly namespace.op.overload (torch deserializes a target by
    getattr from the torch module: `torch.load` would be a call) is refused by name."""
    if match := _OP_TARGET.match(target):
        return f"{match[1]}.{match[2]}"
    if match := _HOP_TARGET.match(target):
        return f"higher_order.{match[1]}"
    return target


def _graph_ops(program: dict) -> dict[str, str]:
    ops: dict[str, str] = {}
    for key, value in _walk(program.get("graph_module", {})):
        if key != "nodes" or not isinstance(value, dict):
            continue
        target = value.get("target")
        outputs = value.get("outputs") or [{}]
        first = next(iter(outputs[0].values()), {}) if isinstance(outputs[0], dict) else {}
        where = f"node {first.get('name', '?')}" if isinstance(first, dict) else "a node"
        ops.setdefault(allowlist_name(str(target)), where)
    return ops


def check_program_ops(ops: dict[str, str], label: str) -> None:
    """Refuse higher-order ops (control flow) and any op the torch allowlist lacks."""
    hops = sorted(op for op in ops if op.startswith("higher_order."))
    if hops:
        raise ModelLoadError(f"{label}: the program holds {hops[0]} (in {ops[hops[0]]}): a "
                             "control-flow or wrapper op that edgeopt does not convert; "
                             "export a forward without torch.cond/while_loop/map")
    check_ops("torch", {op: w for op, w in ops.items() if op not in PYTHON_TARGETS}, label)


def check_pt2_archive(path: Path, supported_schema: tuple[int, int] | None = None
                      ) -> Pt2Archive:
    """The checked archive, or ModelLoadError saying what is wrong with the file."""
    try:
        with zipfile.ZipFile(path) as archive:
            root = _check_members(path, archive.infolist())
            program = read_json(path, archive, root + f"models/{MODEL}.json")
            saved_by = _check_version(path, archive, root, program, supported_schema)
    except zipfile.BadZipFile as exc:
        raise ModelLoadError(f"{path} is not a readable .pt2 archive ({exc}); the file is "
                             "corrupt or truncated") from None
    _check_text(path, program)
    ops = _graph_ops(program)
    if not ops:
        raise ModelLoadError(f"{path}: the exported program has no graph nodes")
    check_program_ops(ops, str(path))
    return Pt2Archive(path, root, program, ops, saved_by)
