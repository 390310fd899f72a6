"""Load a model safely and read its signature: the `ModelHandle` every stage passes on.

    >>> handle = load_model("samples/digits_cnn.onnx")
    >>> handle.format, handle.inputs[0].shape
    ('onnx', (-1, 1, 32, 32))

The format is told from the content, not the file name: TFLite files carry `TFL3` at
byte 4, `.keras` archives are zips with `config.json`, SavedModels are folders with
`saved_model.pb`, and ONNX is a protobuf that must parse and pass the checker. A PyTorch
`.pt2` (torch.export.save) is a zip with `models/model.json`: it is checked without
torch.export.load (edgeopt.torch_archive, edgeopt.torch_program), exported to ONNX
(edgeopt.torch_onnx) and handed on as that ONNX model, with `torch` saying where it came from;
with `torch_route="litert"`, converted by litert-torch to a float .tflite
(edgeopt.torch_litert) and handed on as that .tflite.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

from edgeopt.choices import TorchRoute, values
from edgeopt.errors import ConfigError, ModelLoadError, first_line
from edgeopt.graph import MAX_TENSOR_BYTES, check_declared_sizes
from edgeopt.inputs import CAPS, check_regular, looks_like_protobuf, read_bytes
from edgeopt.keras_archive import check_keras_archive
from edgeopt.onnx_functions import check_function_expansion
from edgeopt.onnx_ops import check_onnx_ops
from edgeopt.onnx_reader import check_sizes
from edgeopt.saved_model_ops import check_saved_model_ops
from edgeopt.shape_bounds import check_shape, check_signature
from edgeopt.tf_env import quiet_tensorflow
from edgeopt.tflite_ops import check_tflite_ops
from edgeopt.tflite_prepare import prepare_tflite
from edgeopt.tflite_reader import read_tflite
from edgeopt.torch_archive import looks_like_pt2
from edgeopt.torch_litert import convert_pt2
from edgeopt.torch_onnx import TorchOrigin, export_pt2

FORMATS = ("onnx", "keras", "saved_model", "tflite", "pt2")
TORCH_ROUTES = values(TorchRoute)
# The exported .onnx of each .pt2 this process loaded, removed when the process ends.
_EXPORTS: list[tempfile.TemporaryDirectory] = []

# ONNX TensorProto element types -> numpy dtype names.
_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
                7: "int64", 8: "string", 9: "bool", 10: "float16", 11: "float64",
                12: "uint32", 13: "uint64", 16: "bfloat16"}


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output; -1 marks a dynamic dimension."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    quantization: tuple[float, int] | None = None

    def to_json(self) -> dict:
        quant = None
        if self.quantization is not None:
            quant = {"scale": self.quantization[0], "zero_point": self.quantization[1]}
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "quantization": quant}


@dataclass(frozen=True)
class ModelHandle:
    path: Path
    format: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    # A .tflite rewritten into a plain float32 graph (edgeopt.tflite_prepare), and what was
    # changed; None when the file is read as it is.
    prepared: bytes | None = None
    preparation: tuple[str, ...] = ()
    # A .pt2 input: the program and its ONNX export's parity (the handle is the ONNX).
    torch: TorchOrigin | None = None
    # An .onnx rewritten before the build (inputs pinned, dynamic quantization undone:
    # edgeopt.converters.onnx_adapt): what was done; `path` is then the rewritten file.
    adaptation: dict | None = None

    @property
    def size_bytes(self) -> int:
        return path_size(self.path)

    def tflite_bytes(self) -> bytes:
        """The .tflite every stage reads: the prepared float graph, else the file."""
        return self.prepared if self.prepared is not None else self.path.read_bytes()

    @property
    def stem(self) -> str:
        return (self.path.name if self.path.is_dir() else self.path.stem) or "model"

    def files(self) -> tuple[Path, ...]:
        """Every file the model's content is read from: the model (a SavedModel: its
        folder) and, for an .onnx, the external-data files its tensors name (two .onnx
        files with the same bytes may read different weights)."""
        if self.format != "onnx":
            return (self.path,)
        import onnx

        model = onnx.load(str(self.path), load_external_data=False)
        return (self.path, *(self.path.parent / name for name in external_locations(model)))


def batch_axis(shape: tuple[int, ...]) -> int | None:
    """The axis of an input (or output) declared shape that counts samples; -1 marks a
    dynamic dimension. None for a scalar (rank 0): one value for every sample, such as
    silero-vad's sample rate `sr`. Axis 0 when it is dynamic or 1; else the one dynamic
    axis (a recurrent state [layers, N, units]); else axis 0.
    """
    if not shape:
        return None
    if shape[0] < 0 or shape[0] == 1:
        return 0
    dynamic = [i for i, d in enumerate(shape) if d < 0]
    return dynamic[0] if len(dynamic) == 1 else 0


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """`name:1,3,224,224` -> ('name', (1, 3, 224, 224))."""
    name, sep, dims = text.rpartition(":")
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or any(d <= 0 for d in shape):
        raise ModelLoadError(f"--input-shape '{text}': expected NAME:D,D,... with positive "
                             "dimensions, e.g. x:1,3,224,224")
    return name, shape


def with_input_shapes(handle: ModelHandle, overrides: tuple[str, ...]) -> ModelHandle:
    """Fix dynamic input dimensions; a static dimension must keep its size."""
    if not overrides:
        return handle
    by_name = {spec.name: spec for spec in handle.inputs}
    fixed = dict(by_name)
    for text in overrides:
        name, shape = parse_input_shape(text)
        spec = by_name.get(name)
        if spec is None:
            raise ModelLoadError(f"--input-shape names '{name}', but the model's inputs are "
                                 f"{', '.join(by_name)}")
        clash = len(shape) != len(spec.shape) or any(
            old >= 0 and old != new for old, new in zip(spec.shape, shape))
        if clash:
            raise ModelLoadError(f"--input-shape {text} does not fit input '{name}' of shape "
                                 f"{list(spec.shape)} (-1 marks the dimensions you may set)")
        check_shape(name, shape, spec.dtype, f"--input-shape {text}")
        fixed[name] = TensorSpec(spec.name, shape, spec.dtype, spec.quantization)
    return replace(handle, inputs=tuple(fixed[s.name] for s in handle.inputs))


def path_size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def detect_format(path: Path) -> str:
    """Tell the format from the content; raise ModelLoadError for anything else."""
    if not path.exists():
        raise ModelLoadError(f"model not found: {path}")
    if path.is_dir():
        if (path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file():
            return "saved_model"
        raise ModelLoadError(f"{path} is a folder but not a SavedModel (no saved_model.pb)")
    head = read_bytes(path, "model", ModelLoadError, CAPS["keras"], limit=8)
    if len(head) < 8:
        raise ModelLoadError(f"{path} is empty or truncated ({len(head)} bytes)")
    if head[4:8] == b"TFL3":
        return "tflite"
    if head.startswith(b"PK\x03\x04"):
        return "pt2" if _zip_is_pt2(path) else "keras"
    if head.startswith(b"\x89HDF"):
        raise ModelLoadError(
            f"{path} is a legacy HDF5 Keras file; re-save it as .keras (model.save('m.keras'))")
    if not looks_like_protobuf(head):
        raise ModelLoadError(f"{path} is not a model edgeopt can read (not TFLite, Keras, "
                             "SavedModel, and it does not start as an ONNX protobuf does)")
    return "onnx"


def _zip_is_pt2(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return looks_like_pt2(archive.namelist())
    except (zipfile.BadZipFile, OSError, ValueError):
        return False  # the Keras archive check says what is wrong with the zip


def check_torch_route(route: str) -> str:
    """The route, or one error naming the ones there are."""
    if route not in TORCH_ROUTES:
        raise ConfigError(f"torch route must be {' or '.join(TORCH_ROUTES)}, got {route!r}")
    return route


def load_model(path: str | os.PathLike, torch_route: str = TorchRoute.ONNX) -> ModelHandle:
    """Detect the format, check the file is sound and safe, and read its signature.
    `torch_route` says how a .pt2 becomes a model (TorchRoute); other formats ignore it."""
    check_torch_route(torch_route)
    path = Path(path)
    fmt = detect_format(path)
    if fmt != "saved_model":  # the format's own cap, now that it is known
        check_regular(path, f"{fmt} model", ModelLoadError, CAPS[fmt])
    if fmt == "tflite":
        return _load_tflite(path)
    if fmt == "pt2":
        return _load_pt2(path, torch_route)
    reader = {"onnx": _onnx_signature, "keras": _keras_signature,
              "saved_model": _saved_model_signature}[fmt]
    inputs, outputs = reader(path)
    return _handle(path, fmt, inputs, outputs)


def _handle(path: Path, fmt: str, inputs, outputs, **prepared) -> ModelHandle:
    if not inputs or not outputs:
        raise ModelLoadError(f"{path}: the model declares no inputs or no outputs")
    check_signature([*inputs, *outputs], str(path))
    return ModelHandle(path=path, format=fmt, inputs=tuple(inputs), outputs=tuple(outputs),
                       **prepared)


def _load_tflite(path: Path) -> ModelHandle:
    """Checked as the file is, then read as the float graph every stage sees (fp16 weights
    folded, ...: edgeopt.tflite_prepare)."""
    _check_tflite_buffer(path)
    try:
        prepared = prepare_tflite(path.read_bytes())
    except ModelLoadError as exc:
        raise ModelLoadError(f"{path}: {exc}") from exc
    content = prepared.content if prepared.changed else None
    inputs, outputs = _tflite_signature(path, content)
    return _handle(path, "tflite", inputs, outputs, prepared=content,
                   preparation=prepared.notes)


def _load_pt2(path: Path, route: str) -> ModelHandle:
    """The ONNX export of a checked PyTorch program, loaded as any .onnx is; by the litert
    route its litert-torch .tflite, loaded as any .tflite is."""
    folder = tempfile.TemporaryDirectory(prefix="edgeopt-pt2-", ignore_cleanup_errors=True)
    _EXPORTS.append(folder)
    if route == TorchRoute.LITERT:
        tflite_path, origin = convert_pt2(path, Path(folder.name))
        check_regular(tflite_path, "tflite model", ModelLoadError, CAPS["tflite"])
        return replace(_load_tflite(tflite_path), torch=origin)
    onnx_path, origin = export_pt2(path, Path(folder.name))
    return replace(load_model(onnx_path), torch=origin)


# --- ONNX -------------------------------------------------------------------------------

def external_locations(model) -> list[str]:
    """The external-data file names (relative to the model's folder) an ONNX model's
    tensors read, sorted, each once."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    return sorted({entry.value for tensor in _get_all_tensors(model)
                   if uses_external_data(tensor)
                   for entry in tensor.external_data if entry.key == "location"})


def check_external_data(model, folder: Path) -> None:
    """Refuse external-data locations that leave the model's folder (absolute, `..`, links)."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    root = folder.resolve()
    for tensor in _get_all_tensors(model):
        if not uses_external_data(tensor):
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        if "\0" in location:  # os calls refuse it with a ValueError, not an OSError
            raise ModelLoadError(f"tensor '{tensor.name}': external data location "
                                 f"{location!r} holds a NUL byte; the file is corrupt")
        target = (folder / location).resolve()
        if os.path.isabs(location) or not target.is_relative_to(root) or target == root:
            raise ModelLoadError(
                f"tensor '{tensor.name}' stores its data at '{location}', outside the model's "
                f"folder {folder}; refusing to read it")
        if not target.is_file():
            raise ModelLoadError(f"tensor '{tensor.name}': external data file '{location}' "
                                 "is missing")
        check_external_range(tensor.name, location, info, target)


def check_external_range(name: str, location: str, info: dict, target: Path) -> None:
    """The offset and length a tensor declares must lie inside its external-data file."""
    size = check_regular(target, "external data file", ModelLoadError, CAPS["external_data"])
    try:
        offset = int(info.get("offset") or 0)
        length = int(info["length"]) if info.get("length") else size - offset
    except ValueError:
        raise ModelLoadError(f"tensor '{name}': external data offset/length "
                             f"{info.get('offset')!r}/{info.get('length')!r} are not "
                             "numbers") from None
    if offset < 0 or length < 0 or offset + length > size:
        raise ModelLoadError(f"tensor '{name}' declares bytes {offset:,}..{offset + length:,} "
                             f"of '{location}', which holds {size:,}; the model is corrupt")


def load_onnx_proto(path: Path, with_data: bool = True):
    """Parse and check an ONNX file; external data only from inside its own folder."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError, OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(
            f"{path} is not a model edgeopt can read (not TFLite, Keras, SavedModel, "
            f"and it does not parse as ONNX: {first_line(exc)})"
        ) from exc
    if not model.graph.node or not model.opset_import or model.ir_version <= 0:
        raise ModelLoadError(f"{path} is not a model edgeopt can read (not TFLite, Keras, "
                             "SavedModel, and not a complete ONNX graph)")
    check_onnx_ops(model, str(path))  # before any runtime sees the graph (and names the op)
    check_function_expansion(model, str(path))
    check_external_data(model, path.parent)
    try:
        onnx.checker.check_model(str(path))
    except Exception as exc:  # the checker raises several private error types
        first = first_line(exc)
        raise ModelLoadError(f"{path} is not a valid ONNX model: {first}") from exc
    if with_data:
        from onnx.external_data_helper import load_external_data_for_model
        load_external_data_for_model(model, str(path.parent))
    return model


def _onnx_value_spec(value) -> TensorSpec:
    ttype = value.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in ttype.shape.dim)
    return TensorSpec(value.name, dims, _ONNX_DTYPES.get(ttype.elem_type, "unknown"))


def _onnx_signature(path: Path):
    model = load_onnx_proto(path, with_data=False)
    check_sizes(path)  # shapes as declared and as inferred, before a runtime allocates them
    initializers = {t.name for t in model.graph.initializer}
    inputs = [_onnx_value_spec(v) for v in model.graph.input if v.name not in initializers]
    return inputs, [_onnx_value_spec(v) for v in model.graph.output]


# --- TFLite -----------------------------------------------------------------------------

def tflite_interpreter(path_or_bytes: Path | bytes, num_threads: int | None = None,
                       default_delegates: bool = True, unprepared_ok: bool = False):
    """A LiteRT interpreter with tensors allocated; bad flatbuffers become ModelLoadError.

    Without the default (XNNPACK) delegate, allocating plans the memory but touches none of
    it: enough to read the signature and the shapes LiteRT propagates. A model with dynamic
    inputs may not prepare at its placeholder shape (openWakeWord's melspectrogram declares
    [-1, -1] with a [1, 1] default its CONV_2D cannot take); with `unprepared_ok` it comes
    back unallocated, to be resized to real data first."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    source = (
        {"model_content": bytes(path_or_bytes)} if isinstance(path_or_bytes, (bytes, bytearray))
        else {"model_path": str(path_or_bytes)}
    )
    if not default_delegates:
        source["experimental_op_resolver_type"] = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    interpreter = None
    try:
        interpreter = Interpreter(**source, num_threads=num_threads)
        interpreter.allocate_tensors()
    except (ValueError, RuntimeError) as exc:
        if unprepared_ok and interpreter is not None and _dynamic_inputs(interpreter):
            return interpreter
        first = first_line(exc)
        raise ModelLoadError(f"LiteRT cannot load the model: {first}{_dynamic_hint(interpreter)}"
                             ) from exc
    return interpreter


def _dynamic_inputs(interpreter) -> list[dict]:
    return [d for d in interpreter.get_input_details()
            if any(int(s) < 0 for s in d.get("shape_signature", ())[1:])]


def _dynamic_hint(interpreter) -> str:
    """Why a model with dynamic inputs did not prepare, and what to give."""
    dynamic = _dynamic_inputs(interpreter) if interpreter is not None else []
    if not dynamic:
        return ""
    named = ", ".join(f"'{d['name']}' {[int(s) for s in d['shape_signature']]}"
                      for d in dynamic)
    return (f" (dynamic input {named} does not prepare at its placeholder shape; give data "
            "of a fixed shape or --input-shape)")


def _tflite_spec(detail: dict) -> TensorSpec:
    import numpy as np

    # The concrete shape, except dimensions past the batch that really are dynamic.
    signature = detail.get("shape_signature", detail["shape"])
    shape = tuple(int(s) if i > 0 and s < 0 else int(d)
                  for i, (s, d) in enumerate(zip(signature, detail["shape"])))
    scale, zero_point = detail["quantization"]
    quant = (float(scale), int(zero_point)) if scale else None
    return TensorSpec(detail["name"], shape, np.dtype(detail["dtype"]).name, quant)


def _tflite_signature(path: Path, content: bytes | None = None):
    interpreter = tflite_interpreter(path if content is None else content,
                                     default_delegates=False, unprepared_ok=True)
    try:
        _check_prepared_sizes(interpreter, path)
        return ([_tflite_spec(d) for d in interpreter.get_input_details()],
                [_tflite_spec(d) for d in interpreter.get_output_details()])
    except (ValueError, TypeError, UnicodeDecodeError) as exc:  # names, dtypes numpy lacks
        raise ModelLoadError(f"{path}: LiteRT cannot describe the model's inputs and "
                             f"outputs: {first_line(exc)}") from exc


def _check_prepared_sizes(interpreter, path: Path) -> None:
    """Sizes after LiteRT's shape propagation: a corrupt input shape grows every tensor
    after it, which the declared shapes do not show. The reference kernels' unnamed
    scratch tensors (im2col) do not count: the XNNPACK delegate that runs models needs none."""
    import numpy as np

    for detail in interpreter.get_tensor_details():
        size = int(np.prod(detail["shape"], dtype=np.float64)) * np.dtype(detail["dtype"]).itemsize
        if size > MAX_TENSOR_BYTES and detail["name"]:
            raise ModelLoadError(f"{path}: tensor '{detail['name']}' would take "
                                 f"{size / 2**30:.1f} GiB (shape {detail['shape'].tolist()}), "
                                 f"over the {MAX_TENSOR_BYTES / 2**30:.0f} GiB a tensor may take")


def _check_tflite_buffer(path: Path) -> None:
    """Verify the flatbuffer before LiteRT maps it: a corrupt file must not crash the process,
    nor a corrupt shape make LiteRT allocate more than any edge model needs."""
    graph = read_tflite(path)
    check_declared_sizes(graph, str(path))
    check_tflite_ops(graph, str(path))


# --- Keras and SavedModel ---------------------------------------------------------------

def load_keras(path: Path):
    """Keras 3 in safe mode: no Lambda code, no pickled objects; the archive is checked
    first (keras_archive.py), so Keras never opens a zip with paths out or a bomb in it."""
    check_keras_archive(path)
    quiet_tensorflow()
    import keras

    # Keras goes by the file name; the content already told us this is a .keras archive.
    with tempfile.TemporaryDirectory(prefix="edgeopt-keras-") as tmp:
        named = path
        if path.suffix != ".keras":
            named = Path(tmp) / "model.keras"
            named.symlink_to(path.resolve())
        try:
            return keras.saving.load_model(str(named), safe_mode=True, compile=False)
        except Exception as exc:  # Keras raises ValueError, TypeError, KeyError... when bad
            first = first_line(exc)
            raise ModelLoadError(f"Keras cannot load {path} in safe mode: {first}") from exc


def _keras_specs(tensors, names: list[str] | None = None) -> list[TensorSpec]:
    names = names or [t.name for t in tensors]
    return [TensorSpec(name, tuple(-1 if d is None else int(d) for d in t.shape),
                       str(t.dtype).replace("tf.", "")) for name, t in zip(names, tensors)]


def _keras_signature(path: Path):
    model = load_keras(path)
    # Keras 3 names output tensors 'keras_tensor_N'; the layer names are what users gave.
    output_names = list(getattr(model, "output_names", None) or [])
    if len(output_names) != len(model.outputs):
        output_names = None
    return _keras_specs(model.inputs), _keras_specs(model.outputs, output_names)


def saved_model_signature_fn(path: Path):
    """Load a SavedModel and its serving signature, once its ops passed the allowlist
    (saved_model_ops.py reads them from the protobuf; nothing runs before)."""
    check_saved_model_ops(path)
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as exc:  # TF raises many error types for a corrupt SavedModel
        first = first_line(exc)
        raise ModelLoadError(f"TensorFlow cannot load the SavedModel {path}: {first}") from exc
    signature = loaded.signatures.get("serving_default")
    if signature is None:
        raise ModelLoadError(f"SavedModel {path} has no 'serving_default' signature")
    return loaded, signature


def _tf_specs(specs: dict) -> list[TensorSpec]:
    return [TensorSpec(name, tuple(-1 if d is None else int(d) for d in spec.shape),
                       spec.dtype.name) for name, spec in specs.items()]


def _saved_model_signature(path: Path):
    _, signature = saved_model_signature_fn(path)
    inputs = _tf_specs(signature.structured_input_signature[1])
    return inputs, _tf_specs(signature.structured_outputs)
