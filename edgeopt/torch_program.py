"""Build a PyTorch ExportedProgram from a checked `.pt2` archive, without torch.export.load.

What torch.export.load unpickles or runs, and what edgeopt does instead (the archive and
the graph JSON were checked first by edgeopt.torch_archive):

- raw weights and constants: read as bytes into tensors of the declared dtype, strides and
  offset (torch bounds-checks the view); pickled ones only through
  `torch.load(weights_only=True)`, torch's restricted unpickler, and they must be tensors;
- sample inputs: `torch.load(weights_only=True)`, never torch's `weights_only=False` retry;
- custom and opaque objects, AOTInductor libraries, legacy pickles: refused by the archive
  check; guard code: refused; node metadata: only `nn_module_stack` (module paths, kept as
  strings) is passed on, so no metadata string is looked up as a torch attribute.

    >>> program = load_program(Path("model.pt2"))          # doctest: +SKIP
    >>> outputs = run_program(program, {"x": batch})       # doctest: +SKIP
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import numpy as np

from edgeopt.errors import ModelLoadError, first_line
from edgeopt.torch_archive import MODEL, Pt2Archive, check_pt2_archive, read_json

INSTALL_HINT = "pip install 'edgeopt[torch]' (PyTorch with its ONNX exporter, onnxscript)"
_PAYLOAD_NAME = {"weights": re.compile(r"^weight_\d+$"), "constants": re.compile(r"^tensor_\d+$")}
_KEPT_METADATA = ("nn_module_stack",)
# A weight's name becomes a chain of module attributes (torch's _assign_attr): dotted
# identifiers only, no dunder that would reach a class or its __dict__.
_FQN = re.compile(r"^(?!.*(^|\.)__)[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$")


def import_torch():
    """torch, or the one error that says what to install."""
    try:
        import torch
    except ImportError:
        raise ModelLoadError("reading a PyTorch .pt2 program needs PyTorch, which is not "
                             f"installed: {INSTALL_HINT}") from None
    return torch


def schema_version() -> tuple[int, int]:
    """The newest export schema the installed torch reads."""
    import_torch()
    from torch._export.serde.schema import SCHEMA_VERSION

    return (int(SCHEMA_VERSION[0]), int(SCHEMA_VERSION[1]))


def _strip_metadata(program: dict) -> dict:
    for node in program.get("graph_module", {}).get("graph", {}).get("nodes", []):
        if isinstance(node, dict) and isinstance(node.get("metadata"), dict):
            node["metadata"] = {k: v for k, v in node["metadata"].items()
                                if k in _KEPT_METADATA}
    return program


def _weights_only(data: bytes, what: str, path: Path):
    torch = import_torch()
    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # the restricted unpickler raises UnpicklingError, ...
        raise ModelLoadError(f"{path}: {what} does not load as plain tensors "
                             f"(torch.load weights_only=True: {first_line(exc)}); edgeopt "
                             "loads no other pickle") from None


def _tensor(archive: zipfile.ZipFile, checked: Pt2Archive, kind: str, fqn: str, meta):
    """One weight or constant as torch would rebuild it, on the CPU."""
    torch = import_torch()
    from torch._export.serde.serialize import (
        deserialize_scalar_type,
        deserialize_size,
        deserialize_storage_offset,
        deserialize_stride,
    )

    path = checked.path
    if not _FQN.match(fqn):
        raise ModelLoadError(f"{path}: {kind} name {fqn[:60]!r} is not a dotted module path; "
                             "refusing it")
    if not _PAYLOAD_NAME[kind].match(meta.path_name or ""):
        raise ModelLoadError(f"{path}: {kind} entry '{fqn}' points at {meta.path_name!r}, "
                             "which is not a plain tensor payload; refusing it")
    data = archive.read(f"{checked.root}data/{kind}/{meta.path_name}")
    if meta.use_pickle:
        value = _weights_only(data, f"{kind} entry '{fqn}'", path)
        if not isinstance(value, torch.Tensor):
            raise ModelLoadError(f"{path}: {kind} entry '{fqn}' is a {type(value).__name__}, "
                                 "not a tensor")
        return value
    tensor_meta = meta.tensor_meta
    dtype = deserialize_scalar_type(tensor_meta.dtype)
    size = deserialize_size(tensor_meta.sizes)
    if not data:
        return torch.zeros(size, dtype=dtype)
    flat = torch.frombuffer(bytearray(data), dtype=dtype)
    return torch.as_strided(flat, size, deserialize_stride(tensor_meta.strides),
                            deserialize_storage_offset(tensor_meta.storage_offset)).clone()


def _payloads(archive: zipfile.ZipFile, checked: Pt2Archive, kind: str) -> dict:
    torch = import_torch()
    from torch._export.serde import schema
    from torch._export.serde.serialize import _dict_to_dataclass

    name = f"{checked.root}data/{kind}/{MODEL}_{kind}_config.json"
    config = _dict_to_dataclass(schema.PayloadConfig, read_json(checked.path, archive, name))
    tensors = {}
    for fqn, meta in config.config.items():
        tensor = _tensor(archive, checked, kind, fqn, meta)
        if kind == "weights" and meta.is_param:
            tensor = torch.nn.Parameter(tensor, requires_grad=False)
        tensors[fqn] = tensor
    return tensors


def _sample_inputs(archive: zipfile.ZipFile, checked: Pt2Archive):
    data = archive.read(f"{checked.root}data/sample_inputs/{MODEL}.pt")
    value = _weights_only(data, "the sample inputs", checked.path) if data else None
    if value is not None and not (isinstance(value, tuple) and len(value) == 2):
        raise ModelLoadError(f"{checked.path}: the sample inputs are not (args, kwargs)")
    return value


def _deserialize(checked: Pt2Archive, state_dict: dict, constants: dict, samples):
    from torch._export.serde import schema
    from torch._export.serde.serialize import ExportedProgramDeserializer, _dict_to_dataclass

    program = _dict_to_dataclass(schema.ExportedProgram, _strip_metadata(checked.program))
    return ExportedProgramDeserializer().deserialize(program, state_dict, constants, samples)


def load_program(path: Path):
    """The ExportedProgram of a `.pt2`, built from checked parts; ModelLoadError else."""
    import_torch()
    checked = check_pt2_archive(path, schema_version())
    try:
        with zipfile.ZipFile(path) as archive:
            state_dict = _payloads(archive, checked, "weights")
            constants = _payloads(archive, checked, "constants")
            samples = _sample_inputs(archive, checked)
        return _deserialize(checked, state_dict, constants, samples)
    except ModelLoadError:
        raise
    except Exception as exc:  # torch's deserializer raises many types for a bad program
        why = (f"it was saved by torch {checked.torch_version}, newer than the installed "
               f"{import_torch().__version__}: install torch {checked.torch_version} or newer, "
               "or save the program with the installed torch"
               if _newer_than_installed(checked.torch_version) else
               "the file is corrupt or truncated")
        # torch's message can quote a whole node (a kilobyte); the start says which
        text = first_line(exc)
        text = text if len(text) <= _MESSAGE_CHARS else text[:_MESSAGE_CHARS] + "..."
        raise ModelLoadError(f"{path}: torch cannot rebuild the exported program "
                             f"({type(exc).__name__}: {text}); {why}") from None


_MESSAGE_CHARS = 160


_RELEASE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def _newer_than_installed(saved_by: str) -> bool:
    """Whether the torch that saved a program is a newer release than the installed one (a
    newer torch can write ops or fields an older one cannot rebuild, within one schema)."""
    saved, installed = _RELEASE.match(saved_by), _RELEASE.match(import_torch().__version__)
    if saved is None or installed is None:
        return False
    return tuple(int(g or 0) for g in saved.groups()) > \
        tuple(int(g or 0) for g in installed.groups())


def program_inputs(program) -> list[str]:
    """The user input names of a program, in call order."""
    from torch.export.graph_signature import InputKind

    return [spec.arg.name for spec in program.graph_signature.input_specs
            if spec.kind == InputKind.USER_INPUT]


def _batch(program, name: str) -> int | None:
    """The static first dimension of a user input (None when it is dynamic)."""
    node = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == name)
    value = node.meta.get("val")
    size = value.shape[0] if value is not None and value.dim() else None
    return size if isinstance(size, int) else None


def run_program(program, feeds: dict[str, np.ndarray], names: list[str] | None = None
                ) -> list[np.ndarray]:
    """Run the program on numpy inputs, all samples (first axis) in the program's own batch
    size (a program exported at batch 1 checks its input shape and takes one at a time)."""
    torch = import_torch()
    names = names or program_inputs(program)
    module = program.module()
    count = len(feeds[names[0]])
    step = _batch(program, names[0]) or count
    chunks: list[list[np.ndarray]] = []
    with torch.no_grad():
        for start in range(0, count, step):
            args = [torch.from_numpy(np.ascontiguousarray(feeds[n][start:start + step]))
                    for n in names]
            outputs = module(*args)
            flat = outputs if isinstance(outputs, (tuple, list)) else [outputs]
            chunks.append([o.detach().cpu().numpy() for o in flat])
    return [np.concatenate(parts) for parts in zip(*chunks)]


class ProgramRunner:
    """The PyTorch program itself, as validation runs models (edgeopt.runtime.ModelRunner):
    a .pt2 build's reference outputs come from it, not from its ONNX export."""

    label = "PyTorch (torch.export program)"

    def __init__(self, program) -> None:
        self.program = program
        self._names = program_inputs(program)

    @property
    def input_names(self) -> list[str]:
        return list(self._names)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(o, dtype=np.float32) if np.issubdtype(o.dtype, np.floating) else o
                for o in run_program(self.program, feeds, self._names)]
