"""Standard TFLite metadata in every `.tflite` edgeopt writes.

Android Studio's ML Model Binding, the TFLite Task Library and MediaPipe read a model's
name, what its tensors hold, how to normalise an image and which label each class has
from a `metadata_schema.fbs` flatbuffer (file identifier ``M001``) that the model keeps
in a buffer named ``TFLITE_METADATA``. Associated files such as ``labels.txt`` follow
the flatbuffer as an uncompressed zip archive, so the file is still a valid `.tflite`
and also a valid zip. This module writes both, with its own small encoder of the
schema's tables (only fields of schema 1.0.0, so every parser since then reads it).

    >>> spec = MetadataSpec(name="digits_cnn", description="digit classifier",
    ...                     normalization=Normalization((0.0,), (255.0,)),
    ...                     labels=tuple(str(d) for d in range(10)))
    >>> shipped = embed_metadata(tflite_bytes, spec)        # doctest: +SKIP

The tensors' own scale and zero point stay in the model, where every runtime reads
them; the metadata repeats them in each tensor's description and gives ``stats``, the
range of values the tensor holds (for an image input: what pixels 0..255 become).
"""

from __future__ import annotations

import io
import struct
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from edgeopt import __version__
from edgeopt.errors import DataError
from edgeopt.images import class_names
from edgeopt.inputs import CAPS, read_text
from edgeopt.runtime import TFLiteRunner

METADATA_NAME = "TFLITE_METADATA"
METADATA_IDENTIFIER = b"M001"
MIN_PARSER_VERSION = "1.0.0"  # every field written below exists since schema 1.0.0
LABELS_FILE = "labels.txt"
BUFFER_ALIGNMENT = 16  # the TFLite schema's force_align for buffer data
PIXEL_RANGE = (0.0, 255.0)

# Slot (field id) and kind of each metadata_schema.fbs field that edgeopt writes. A union
# takes two slots: its type (ubyte) first, then the table.
_LAYOUT: dict[str, dict[str, tuple[int, str]]] = {
    "ModelMetadata": {"name": (0, "string"), "description": (1, "string"),
                      "version": (2, "string"), "subgraph_metadata": (3, "tables"),
                      "author": (4, "string"), "license": (5, "string"),
                      "min_parser_version": (7, "string")},
    "SubGraphMetadata": {"name": (0, "string"), "description": (1, "string"),
                         "input_tensor_metadata": (2, "tables"),
                         "output_tensor_metadata": (3, "tables")},
    "TensorMetadata": {"name": (0, "string"), "description": (1, "string"),
                       "content": (3, "table"), "process_units": (4, "tables"),
                       "stats": (5, "table"), "associated_files": (6, "tables")},
    "Content": {"content_properties_type": (0, "ubyte"), "content_properties": (1, "table")},
    "FeatureProperties": {},
    "ImageProperties": {"color_space": (0, "byte"), "default_size": (1, "table")},
    "ImageSize": {"width": (0, "uint"), "height": (1, "uint")},
    "ProcessUnit": {"options_type": (0, "ubyte"), "options": (1, "table")},
    "NormalizationOptions": {"mean": (0, "floats"), "std": (1, "floats")},
    "Stats": {"max": (0, "floats"), "min": (1, "floats")},
    "AssociatedFile": {"name": (0, "string"), "description": (1, "string"),
                       "type": (2, "byte")},
}
# Enum and union values of the schema.
CONTENT_FEATURE, CONTENT_IMAGE = 1, 2
COLOR_RGB, COLOR_GRAYSCALE = 1, 2
PROCESS_NORMALIZATION = 1
FILE_TENSOR_AXIS_LABELS = 2


@dataclass(frozen=True)
class Normalization:
    """(pixel - mean) / std per channel on 0..255 pixels: the app repeats it."""

    mean: tuple[float, ...]
    std: tuple[float, ...]


@dataclass(frozen=True)
class MetadataSpec:
    """What edgeopt knows about a model beyond its graph.

    ``normalization`` is set only when the inputs are known to be images normalised
    that way (an image folder, or --mean/--std); ``None`` writes no guess.
    """

    name: str
    description: str
    normalization: Normalization | None = None
    labels: tuple[str, ...] | None = None
    input_names: tuple[str, ...] = ()  # the source model's names, by input position
    output_names: tuple[str, ...] = ()
    version: str | None = None
    author: str | None = None
    labels_optional: bool = False  # labels guessed from class folders: dropped if unfit


class Table(NamedTuple):
    """One table of the metadata schema: its name and {field: value}."""

    kind: str
    fields: dict


@dataclass(frozen=True)
class TensorInfo:
    """An input or output tensor of subgraph 0, as the metadata describes it."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scale: float | None
    zero_point: int | None
    producer: str | None = None  # the op that writes an output (SOFTMAX, ...)


# --- encoding the metadata flatbuffer -------------------------------------------------

def _vector(builder, offsets: list[int]) -> int:
    builder.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    return builder.EndVector()


def _child(builder, kind: str, value: Any) -> int:
    """Write a field's out-of-line part (string, vector, table) before its table starts."""
    if kind == "string":
        return builder.CreateString(value)
    if kind == "floats":
        return builder.CreateNumpyVector(np.asarray(value, dtype="<f4"))
    if kind == "table":
        return encode_table(builder, value)
    if kind == "tables":
        return _vector(builder, [encode_table(builder, t) for t in value])
    return value


def encode_table(builder, table: Table) -> int:
    """Write `table` and its children (children first: flatbuffers build back to front)."""
    layout = _LAYOUT[table.kind]
    unknown = set(table.fields) - set(layout)
    if unknown:
        raise ValueError(f"{table.kind} has no field(s) {sorted(unknown)}")
    ready = [(layout[name], _child(builder, layout[name][1], value))
             for name, value in table.fields.items() if value is not None]
    builder.StartObject(1 + max((slot for slot, _ in layout.values()), default=-1))
    prepend = {"byte": builder.PrependInt8Slot, "ubyte": builder.PrependUint8Slot,
               "uint": builder.PrependUint32Slot}
    for (slot, kind), value in ready:
        prepend.get(kind, builder.PrependUOffsetTRelativeSlot)(slot, value, 0)
    return builder.EndObject()


def metadata_buffer(root: Table) -> bytes:
    """A finished ModelMetadata flatbuffer with the ``M001`` identifier."""
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    builder.Finish(encode_table(builder, root), file_identifier=METADATA_IDENTIFIER)
    return bytes(builder.Output())


# --- what the metadata says -------------------------------------------------------------

def _is_image(info: TensorInfo) -> bool:
    return len(info.shape) == 4 and info.shape[-1] in (1, 3) and min(info.shape[1:3]) > 0


def _quant_text(info: TensorInfo) -> str:
    if info.scale is None:
        return ""
    zp = info.zero_point
    shifted = f"q - {zp}" if zp >= 0 else f"q + {-zp}"
    return (f"; {info.dtype} quantized: real = {info.scale:.8g} * ({shifted})"
            f" (scale {info.scale:.8g}, zero point {zp})")


def _numbers(values: tuple[float, ...]) -> str:
    text = [f"{v:g}" for v in values]
    return text[0] if len(text) == 1 else "[" + ", ".join(text) + "]"


def _dtype_range(dtype: str) -> tuple[float, float] | None:
    if np.dtype(dtype).kind not in "iu":
        return None
    limits = np.iinfo(np.dtype(dtype))
    return float(limits.min), float(limits.max)


def _input_stats(info: TensorInfo, norm: Normalization | None) -> Table | None:
    """The values pixels 0..255 become in this tensor; else the integer type's range."""
    if norm is None or not _is_image(info):
        rng = _dtype_range(info.dtype)
        return None if rng is None else Table("Stats", {"min": [rng[0]], "max": [rng[1]]})
    mean, std = np.asarray(norm.mean, np.float64), np.asarray(norm.std, np.float64)
    low, high = (PIXEL_RANGE[0] - mean) / std, (PIXEL_RANGE[1] - mean) / std
    low, high = np.minimum(low, high), np.maximum(low, high)
    rng = _dtype_range(info.dtype)
    if rng is not None and info.scale:
        low = np.clip(np.round(low / info.scale) + info.zero_point, *rng)
        high = np.clip(np.round(high / info.scale) + info.zero_point, *rng)
    return Table("Stats", {"min": low.tolist(), "max": high.tolist()})


def _output_stats(info: TensorInfo) -> Table | None:
    rng = _dtype_range(info.dtype)
    if rng is not None:
        return Table("Stats", {"min": [rng[0]], "max": [rng[1]]})
    if info.producer in ("SOFTMAX", "LOGISTIC"):
        return Table("Stats", {"min": [0.0], "max": [1.0]})
    return None


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join("?" if d < 0 else str(d) for d in shape) or "scalar"


def _input_metadata(info: TensorInfo, name: str, norm: Normalization | None) -> Table:
    image = norm is not None and _is_image(info)
    if image:
        color = "RGB" if info.shape[-1] == 3 else "grayscale"
        text = (f"{color} image {info.shape[2]}x{info.shape[1]} (width x height), "
                f"{info.dtype}; normalise 0..255 pixels as (pixel - {_numbers(norm.mean)}) / "
                f"{_numbers(norm.std)}")
        if info.scale is not None:
            text += ", then quantize"
        props = Table("ImageProperties", {
            "color_space": COLOR_RGB if info.shape[-1] == 3 else COLOR_GRAYSCALE,
            "default_size": Table("ImageSize", {"width": info.shape[2],
                                                "height": info.shape[1]})})
        content = Table("Content", {"content_properties_type": CONTENT_IMAGE,
                                    "content_properties": props})
    else:
        text = f"{info.dtype} tensor {_shape_text(info.shape)}"
        if len(info.shape) == 4 and norm is None:
            text += "; normalisation unknown (calibrated on arrays: pass --mean/--std)"
        elif len(info.shape) == 4:
            text += (f"; normalise as (value - {_numbers(norm.mean)}) / "
                     f"{_numbers(norm.std)}")
        content = Table("Content", {"content_properties_type": CONTENT_FEATURE,
                                    "content_properties": Table("FeatureProperties", {})})
    units = None
    if norm is not None and len(info.shape) == 4:
        units = [Table("ProcessUnit", {
            "options_type": PROCESS_NORMALIZATION,
            "options": Table("NormalizationOptions", {"mean": list(norm.mean),
                                                      "std": list(norm.std)})})]
    return Table("TensorMetadata", {"name": name, "description": text + _quant_text(info),
                                    "content": content, "process_units": units,
                                    "stats": _input_stats(info, norm)})


def _output_metadata(info: TensorInfo, name: str, labels: tuple[str, ...] | None) -> Table:
    text = f"{info.dtype} tensor {_shape_text(info.shape)}"
    if info.producer in ("SOFTMAX", "LOGISTIC"):
        text += f", {info.producer.lower()} scores"
    files = None
    if labels and info.shape and info.shape[-1] == len(labels):
        text += f"; class names in {LABELS_FILE}, one per line, in class-index order"
        files = [Table("AssociatedFile", {
            "name": LABELS_FILE, "description": f"Names of the {len(labels)} classes.",
            "type": FILE_TENSOR_AXIS_LABELS})]
    content = Table("Content", {"content_properties_type": CONTENT_FEATURE,
                                "content_properties": Table("FeatureProperties", {})})
    return Table("TensorMetadata", {"name": name, "description": text + _quant_text(info),
                                    "content": content, "stats": _output_stats(info),
                                    "associated_files": files})


def _named(infos: list[TensorInfo], names: tuple[str, ...]) -> list[str]:
    return [names[i] if i < len(names) and names[i] else t.name for i, t in enumerate(infos)]


def model_metadata(spec: MetadataSpec, inputs: list[TensorInfo],
                   outputs: list[TensorInfo]) -> Table:
    """The ModelMetadata table for a model with these inputs and outputs."""
    check_labels_fit(spec.labels, outputs)
    subgraph = Table("SubGraphMetadata", {
        "name": spec.name,
        "input_tensor_metadata": [_input_metadata(t, n, spec.normalization) for t, n in
                                  zip(inputs, _named(inputs, spec.input_names))],
        "output_tensor_metadata": [_output_metadata(t, n, spec.labels) for t, n in
                                   zip(outputs, _named(outputs, spec.output_names))]})
    return Table("ModelMetadata", {"name": spec.name, "description": spec.description,
                                   "version": spec.version, "author": spec.author,
                                   "subgraph_metadata": [subgraph],
                                   "min_parser_version": MIN_PARSER_VERSION})


def _labels_fit(labels: tuple[str, ...] | None, outputs: list[TensorInfo]) -> bool:
    return not labels or any(t.shape and t.shape[-1] == len(labels) for t in outputs)


def check_labels_fit(labels: tuple[str, ...] | None, outputs: list[TensorInfo]) -> None:
    """A label file must name the classes of some output (its last dimension)."""
    if not _labels_fit(labels, outputs):
        shapes = ", ".join(_shape_text(t.shape) for t in outputs)
        raise DataError(f"the label file has {len(labels)} labels but no model output has "
                        f"{len(labels)} classes (outputs: {shapes})")


# --- the model side ---------------------------------------------------------------------

def _schema():
    from ai_edge_litert import schema_py_generated as schema

    return schema


def _enum_names(enum_cls: type) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_")
            and isinstance(v, int)}


def _tensor_info(model, index: int, producers: dict[int, str]) -> TensorInfo:
    tensor = model.subgraphs[0].tensors[index]
    dtype = _enum_names(_schema().TensorType)[tensor.type].lower()
    shape = tensor.shapeSignature if tensor.shapeSignature is not None else tensor.shape
    quant = tensor.quantization
    scale = zero_point = None
    if quant is not None and quant.scale is not None and len(quant.scale) == 1:
        scale = float(quant.scale[0])
        zero_point = int(quant.zeroPoint[0]) if quant.zeroPoint is not None else 0
    return TensorInfo(_text(tensor.name), tuple(int(d) for d in shape), dtype, scale, zero_point,
                      producers.get(index))


def _producers(model) -> dict[int, str]:
    """Tensor index -> the builtin op that computes it in subgraph 0, looking through the
    QUANTIZE/DEQUANTIZE that integer models put around their float outputs."""
    names = _enum_names(_schema().BuiltinOperator)
    codes = model.operatorCodes or []
    writers = {}
    for op in model.subgraphs[0].operators or []:
        code = codes[op.opcodeIndex]
        name = names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "CUSTOM")
        inputs = [int(i) for i in (op.inputs if op.inputs is not None else [])]
        for out in op.outputs if op.outputs is not None else []:
            writers[int(out)] = (name, inputs)

    def computed_by(index: int, hops: int = 4) -> str:
        name, inputs = writers[index]
        if name in ("QUANTIZE", "DEQUANTIZE") and inputs and inputs[0] in writers and hops:
            return computed_by(inputs[0], hops - 1)
        return name

    return {index: computed_by(index) for index in writers}


def _signature_names(model) -> dict[int, str]:
    """Tensor index -> its name in the first signature (the source model's IO name)."""
    signatures = [s for s in model.signatureDefs or [] if s.subgraphIndex == 0]
    if not signatures:
        return {}
    maps = list(signatures[0].inputs or []) + list(signatures[0].outputs or [])
    return {int(m.tensorIndex): _text(m.name) for m in maps if m.name}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def model_io(model) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """Inputs and outputs of subgraph 0 (the order the Task Library indexes them by)."""
    producers, names = _producers(model), _signature_names(model)
    sub = model.subgraphs[0]

    def info(index) -> TensorInfo:
        tensor = _tensor_info(model, int(index), producers)
        return replace(tensor, name=names.get(int(index), tensor.name))

    return [info(i) for i in sub.inputs], [info(i) for i in sub.outputs]


class _AlignedBuffer:
    """Packs a Buffer with its data on a 16-byte boundary, as the TFLite converter does."""

    def __init__(self, buffer):
        self.buffer = buffer

    def Pack(self, builder):  # noqa: N802 - the flatbuffers object API's name
        schema, data = _schema(), self.buffer.data
        offset = None
        if data is not None:
            raw = np.ascontiguousarray(data, dtype=np.uint8).tobytes()
            builder.StartVector(1, len(raw), BUFFER_ALIGNMENT)  # as CreateByteVector, aligned
            builder.head -= len(raw)
            builder.Bytes[builder.head:builder.head + len(raw)] = raw
            offset = builder.EndVector()
        schema.BufferStart(builder)
        if offset is not None:
            schema.BufferAddData(builder, offset)
        schema.BufferAddOffset(builder, self.buffer.offset)
        schema.BufferAddSize(builder, self.buffer.size)
        return schema.BufferEnd(builder)


def _attach(model, metadata: bytes) -> None:
    """Point a ``TFLITE_METADATA`` entry at a buffer holding `metadata` (replacing one)."""
    schema = _schema()
    data = np.frombuffer(metadata, dtype=np.uint8)
    model.metadata = list(model.metadata or [])
    for entry in model.metadata:
        if _text(entry.name) == METADATA_NAME:
            model.buffers[entry.buffer].data = data
            return
    buffer = schema.BufferT()
    buffer.data = data
    model.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name, entry.buffer = METADATA_NAME, len(model.buffers) - 1
    model.metadata.append(entry)


def _pack(model, size_hint: int) -> bytes:
    import flatbuffers

    model.buffers = [_AlignedBuffer(b) for b in model.buffers]
    builder = flatbuffers.Builder(size_hint)  # sized once: no regrowth copies of the weights
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _append_files(model: bytes, files: dict[str, bytes]) -> bytes:
    """Model + an uncompressed zip of `files` (offsets count from the file's start)."""
    if not files:
        return model
    stream = io.BytesIO()
    stream.write(model)
    with zipfile.ZipFile(stream, "w", zipfile.ZIP_STORED) as archive:
        for name, content in files.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), content)
    return stream.getvalue()


def _uses_external_offsets(model) -> bool:
    return any(b is not None and b.offset > 1 for b in model.buffers or [])


def embed_metadata(tflite: bytes, spec: MetadataSpec) -> bytes:
    """`tflite` with `spec` as TFLite metadata (and labels.txt when labels are given).

    The graph, weights and signatures are repacked unchanged; metadata already in the
    model (``min_runtime_version``, conversion metadata) is kept, an older
    ``TFLITE_METADATA`` is replaced and previously appended files are dropped.
    """
    schema = _schema()
    model = schema.ModelT.InitFromPackedBuf(bytearray(tflite), 0)
    if _uses_external_offsets(model):
        return tflite  # > 2 GB models keep weights outside the flatbuffer: left as they are
    inputs, outputs = model_io(model)
    if spec.labels_optional and not _labels_fit(spec.labels, outputs):
        spec = replace(spec, labels=None)
    metadata = metadata_buffer(model_metadata(spec, inputs, outputs))
    _attach(model, metadata)
    files = {LABELS_FILE: labels_text(spec.labels)} if spec.labels else {}
    return _append_files(_pack(model, len(tflite) + len(metadata) + 4096), files)


# --- labels -----------------------------------------------------------------------------

def labels_text(labels: tuple[str, ...]) -> bytes:
    return ("\n".join(labels) + "\n").encode("utf-8")


def read_labels(path: str | Path) -> tuple[str, ...]:
    """Class names from a text file, one per line (trailing blank lines ignored)."""
    file = Path(path)
    lines = read_text(file, "label file", DataError, CAPS["labels"]).splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise DataError(f"label file {path} is empty")
    return tuple(line.strip() for line in lines)


def folder_class_names(spec: str | None) -> tuple[str, ...] | None:
    """Class names of an image folder with one subfolder per class (edgeopt.data's order)."""
    if not spec or spec == "random" or not Path(spec).is_dir():
        return None
    return class_names(Path(spec))


# --- what each command knows: build, convert, quantize ----------------------------------

def normalization_from(preprocessing: dict) -> Normalization | None:
    """The manifest's preprocessing record -> normalization, when images are known."""
    if preprocessing.get("source") == "images":
        return _normalization(preprocessing["mean"], preprocessing["std"])
    app = preprocessing.get("app_normalization")
    return _normalization(app["mean"], app["std"]) if app else None


def _normalization(mean, std) -> Normalization:
    """Equal-length mean and std (the Task Library rejects a 3-value mean with 1 std);
    one value when the channels agree, as MediaPipe takes no per-channel normalization."""
    if len(set(mean)) == 1 and len(set(std)) == 1:
        return Normalization((float(mean[0]),), (float(std[0]),))
    count = max(len(mean), len(std))
    return Normalization(tuple(float(m) for m in np.broadcast_to(mean, count)),
                         tuple(float(s) for s in np.broadcast_to(std, count)))


def check_labels_file(labels_file: str | None, handle) -> None:
    """Fail before the long stages on a label file that cannot name any output's classes
    (the exact check, on the .tflite's own output shapes, comes when it is embedded)."""
    if not labels_file:
        return
    count = len(read_labels(labels_file))
    if not any(count in spec.shape[1:] for spec in handle.outputs):
        shapes = ", ".join(_shape_text(spec.shape) for spec in handle.outputs)
        raise DataError(f"the label file has {count} labels but no model output has "
                        f"{count} classes (outputs: {shapes})")


def labels_from(labels_file: str | None, *data_specs: str | None,
                source: bytes | None = None) -> tuple[tuple | None, bool]:
    """(labels, optional): a label file must fit; the source .tflite's own label file and
    class folders are used when they fit."""
    labels, optional, _ = labels_with_source(labels_file, *data_specs, source=source)
    return labels, optional


def labels_with_source(labels_file: str | None, *data_specs: str | None,
                       source: bytes | None = None) -> tuple[tuple | None, bool, str]:
    """`labels_from` and where the names came from, in words."""
    if labels_file:
        return read_labels(labels_file), False, f"--labels {Path(labels_file).name}"
    try:
        packed = source_labels(source) if source else None
    except (IndexError, ValueError, TypeError, struct.error):  # malformed foreign metadata
        packed = None
    if packed:
        return packed, True, "the label file packed in the source .tflite"
    for spec in data_specs:
        names = folder_class_names(spec)
        if names:
            return names, True, (f"the class subfolders of {Path(spec).name}, sorted by name "
                                 "(numerically when every name is a number)")
    return None, False, ""


def labels_record(labels_file: str | None, handle, outputs, *data_specs: str | None
                  ) -> dict | None:
    """The manifest's `labels`: class names in output order (label i names output index i)
    and their source; None when there are none or they fit no output's last dimension."""
    source = handle.path.read_bytes() if handle.format == "tflite" else None
    labels, _, where = labels_with_source(labels_file, *data_specs, source=source)
    if not labels or not any(s.shape and s.shape[-1] == len(labels) for s in outputs):
        return None
    return {"names": list(labels), "source": where}


def source_spec(handle, description: str, preprocessing: dict, labels_file: str | None,
                *data_specs: str | None) -> MetadataSpec:
    """The spec for a model made from `handle`: its name, its IO names, what data said."""
    source = handle.path.read_bytes() if handle.format == "tflite" else None
    labels, optional = labels_from(labels_file, *data_specs, source=source)
    return MetadataSpec(
        name=handle.stem, description=f"{description} Made by edgeopt {__version__}.",
        normalization=normalization_from(preprocessing), labels=labels,
        labels_optional=optional, input_names=tuple(s.name for s in handle.inputs),
        output_names=tuple(s.name for s in handle.outputs))


def with_build_metadata(artifact, config, handle, profile, preprocessing: dict):
    """`edgeopt build`'s artifact with metadata, and a runner for the file that ships."""
    text = (f"{handle.stem} ({handle.path.name}, {handle.format}) for {profile.name}: "
            f"scheme {config.scheme}, {artifact.method}.")
    spec = source_spec(handle, text, preprocessing, config.labels,
                       config.calib, config.eval)
    content = embed_metadata(artifact.content, spec)
    names = [s.name for s in handle.inputs]
    runner = replace(artifact.runner, runner=TFLiteRunner(content, names))
    return replace(artifact, content=content, runner=runner)


class DataFiles(Protocol):
    """The data flags a made model's metadata names: edgeopt.quantize.QuantizeRequest, which
    this ground module may not import (docs/ARCHITECTURE.md)."""

    @property
    def labels(self) -> str | None: ...
    @property
    def calib(self) -> str | None: ...
    @property
    def eval(self) -> str | None: ...


def with_quantize_metadata(result, handle, request: DataFiles, calib):
    """`edgeopt quantize`'s result with metadata; --mean/--std count for array data too
    (edgeopt.data.load_data records them, with build's defaults)."""
    preprocessing = dict(calib.preprocessing)
    text = (f"{handle.stem} ({handle.path.name}, {handle.format}): scheme {result.scheme}, "
            f"{result.method}.")
    spec = source_spec(handle, text, preprocessing, request.labels, request.calib,
                       request.eval)
    return replace(result, model=embed_metadata(result.model, spec))


def converted_with_metadata(tflite: bytes, handle, converter: str, data,
                            labels_file: str | None = None) -> bytes:
    """`edgeopt convert`'s float model with metadata (normalization from image samples)."""
    text = (f"{handle.stem}: float32 .tflite converted from {handle.path.name} "
            f"({handle.format}) with {converter}.")
    spec = source_spec(handle, text, data.preprocessing, labels_file, data.source)
    return embed_metadata(tflite, spec)


def with_packed_files(source: bytes, compiled: bytes) -> bytes:
    """`compiled` (Vela's output, which keeps the TFLITE_METADATA buffer but not the zip
    after the flatbuffer) with the files packed in `source`, so its label file resolves."""
    files = packed_files(source)
    if not files or packed_files(compiled):
        return compiled
    return _append_files(compiled, files)


def packed_files(tflite: bytes) -> dict[str, bytes]:
    """The associated files appended to a model (name -> content); {} when there are none."""
    try:
        with zipfile.ZipFile(io.BytesIO(tflite)) as archive:
            return {name: archive.read(name) for name in archive.namelist()}
    except (zipfile.BadZipFile, OSError, ValueError, KeyError):
        return {}


# --- reading back a label file (a .tflite input may carry one) ---------------------------

def _slot(table, slot: int) -> int:
    return table.Offset(4 + 2 * slot)


def _tables(table, slot: int) -> list:
    from flatbuffers.table import Table as FbTable

    offset = _slot(table, slot)
    if not offset:
        return []
    start = table.Vector(offset)
    return [FbTable(table.Bytes, table.Indirect(start + 4 * i))
            for i in range(table.VectorLen(offset))]


def _label_file_names(metadata: bytes) -> list[str]:
    """Names of the TENSOR_AXIS_LABELS files on the outputs of a ModelMetadata buffer."""
    from flatbuffers import number_types
    from flatbuffers.table import Table as FbTable

    root = FbTable(bytearray(metadata), int.from_bytes(metadata[:4], "little"))
    names = []
    for subgraph in _tables(root, _LAYOUT["ModelMetadata"]["subgraph_metadata"][0])[:1]:
        outputs = _tables(subgraph, _LAYOUT["SubGraphMetadata"]["output_tensor_metadata"][0])
        for tensor in outputs:
            for file in _tables(tensor, _LAYOUT["TensorMetadata"]["associated_files"][0]):
                kind, name = (_slot(file, _LAYOUT["AssociatedFile"][f][0])
                              for f in ("type", "name"))
                if name and kind and file.Get(number_types.Int8Flags, file.Pos + kind) == \
                        FILE_TENSOR_AXIS_LABELS:
                    names.append(file.String(file.Pos + name).decode("utf-8"))
    return names


def source_labels(tflite: bytes) -> tuple[str, ...] | None:
    """The class names a .tflite carries in its own metadata (a Task Library model's), or
    None: they would be lost when edgeopt rewrites the model."""
    files = packed_files(tflite)
    if not files:
        return None
    model = _schema().Model.GetRootAs(tflite, 0)
    for i in range(model.MetadataLength()):
        entry = model.Metadata(i)
        if entry.Name() != METADATA_NAME.encode():
            continue
        buffer = model.Buffers(entry.Buffer()).DataAsNumpy()
        if isinstance(buffer, int) or buffer[4:8].tobytes() != METADATA_IDENTIFIER:
            return None
        for name in _label_file_names(buffer.tobytes()):
            if name in files:
                lines = files[name].decode("utf-8", errors="replace").splitlines()
                while lines and not lines[-1].strip():
                    lines.pop()
                return tuple(line.strip() for line in lines) or None
    return None
