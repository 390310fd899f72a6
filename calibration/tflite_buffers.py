"""Read and overwrite the float constants of a `.tflite` in place, by tensor name.

The calibration core hands the writer new float weights (the dequantized values of its
own integer codes) and corrected biases. They have the shape and type of the tensors
they replace, so they are written over the old bytes: the flatbuffer is never
re-serialised. A buffer shared by several tensors is only rewritten when every sharer
gets the same new values.

`with_current_opcodes` is the one exception: files written before schema 3a (many
MediaPipe and face-detection models) name their ops only in `deprecated_builtin_code`
and leave `builtin_code` at 0 (ADD). LiteRT reads the larger of the two; ai-edge-quantizer
reads `builtin_code` alone, so it took every op of such a file for an ADD (convolution
weights quantized like activations, PReLU alphas given per-channel scales on the wrong
axis). Those files are re-serialised once with `builtin_code` filled in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeopt.errors import ConversionError
from edgeopt.tflite_edit import inline_buffers as _inline_into

_FLOAT32 = 0  # TensorType.FLOAT32


@dataclass(frozen=True)
class ConstantLocation:
    tensor: int
    buffer: int
    start: int
    nbytes: int
    shape: tuple[int, ...]


def _root(model: bytes):
    from ai_edge_litert import schema_py_generated as schema

    return schema.Model.GetRootAs(model, 0)


def float_constants(model: bytes) -> dict[str, ConstantLocation]:
    """Float32 constant tensors of subgraph 0 stored inside the flatbuffer, by name."""
    root = _root(model)
    graph = root.Subgraphs(0)
    found = {}
    for index in range(graph.TensorsLength()):
        tensor = graph.Tensors(index)
        if tensor.Type() != _FLOAT32 or tensor.Buffer() <= 0:
            continue
        location = _buffer_span(root.Buffers(tensor.Buffer()))
        if location is None:
            continue
        start, nbytes = location
        shape = tuple(int(d) for d in tensor.ShapeAsNumpy()) if tensor.ShapeLength() else ()
        if nbytes != 4 * int(np.prod(shape)):
            continue
        found[tensor.Name().decode()] = ConstantLocation(index, tensor.Buffer(), start,
                                                         nbytes, shape)
    return found


def _buffer_span(buffer) -> tuple[int, int] | None:
    vector = buffer._tab.Offset(4)
    if vector:
        length = buffer.DataLength()
        return (buffer._tab.Vector(vector), length) if length else None
    if buffer.Offset() > 1:
        return int(buffer.Offset()), int(buffer.Size())
    return None


def read_constant(model: bytes, location: ConstantLocation) -> np.ndarray:
    raw = np.frombuffer(model, np.float32, location.nbytes // 4, location.start)
    return raw.reshape(location.shape).copy()


def patch_constants(model: bytes, new_values: dict[str, np.ndarray]) -> bytes:
    """A copy of `model` with the named float constants replaced (same shape)."""
    locations = float_constants(model)
    _check_shared(locations, new_values)
    patched = bytearray(model)
    for name, values in new_values.items():
        location = locations.get(name)
        if location is None:
            raise ConversionError(f"tensor '{name}' is not a float constant of the model")
        array = np.ascontiguousarray(values, dtype=np.float32)
        if array.shape != location.shape:
            raise ConversionError(f"tensor '{name}': new shape {array.shape} differs from "
                                  f"{location.shape}")
        patched[location.start:location.start + location.nbytes] = array.tobytes()
    return bytes(patched)


def shared_buffers(model: bytes) -> dict[str, set[str]]:
    """Tensor name -> the other tensor names that share its buffer (only when shared)."""
    by_buffer: dict[int, set[str]] = {}
    for name, location in float_constants(model).items():
        by_buffer.setdefault(location.buffer, set()).add(name)
    return {name: names - {name} for names in by_buffer.values() if len(names) > 1
            for name in names}


def _check_shared(locations: dict[str, ConstantLocation], new_values: dict) -> None:
    by_buffer: dict[int, list[str]] = {}
    for name, location in locations.items():
        by_buffer.setdefault(location.buffer, []).append(name)
    for name in new_values:
        sharers = by_buffer.get(locations[name].buffer, []) if name in locations else []
        for other in sharers:
            if other != name and not np.array_equal(new_values.get(other), new_values[name]):
                raise ConversionError(f"tensors '{name}' and '{other}' share one buffer; "
                                      "they cannot take different values")


def unpack_model(model: bytes):
    """The object form of `model` with every buffer inline. ai-edge-quantizer stores
    buffers after the flatbuffer (offset/size); re-packing such a model as it is dropped
    them ("Constant buffer 12 specified an out of range offset")."""
    from ai_edge_litert import schema_py_generated as schema

    unpacked = schema.ModelT.InitFromPackedBuf(bytearray(model), 0)
    _inline_into(unpacked, model)
    return unpacked


def inline_buffers(model: bytes) -> bytes:
    """`model` with every buffer inside the flatbuffer (unchanged when they already are):
    LiteRT's model-interface tool re-writes a model without the data stored after it."""
    root = _root(model)
    if not any(root.Buffers(i).Offset() > 1 for i in range(root.BuffersLength())):
        return model
    return pack_model(unpack_model(model), len(model))


def pack_model(unpacked, size_hint: int) -> bytes:
    import flatbuffers

    builder = flatbuffers.Builder(size_hint + 1024)
    builder.Finish(unpacked.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def with_current_opcodes(model: bytes) -> bytes:
    """`model` with every operator code's `builtin_code` set (unchanged when already set)."""
    root = _root(model)
    stale = any(int(root.OperatorCodes(i).BuiltinCode())
                < int(root.OperatorCodes(i).DeprecatedBuiltinCode())
                for i in range(root.OperatorCodesLength()))
    if not stale:
        return model
    unpacked = unpack_model(model)
    for code in unpacked.operatorCodes:
        code.builtinCode = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
    return pack_model(unpacked, len(model))
