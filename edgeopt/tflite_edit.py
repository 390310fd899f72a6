"""Read, edit and write a `.tflite` through the schema's object API (LiteRT's generated
`schema_py_generated`): the shared tools of the rewrites that change a graph in place.

    >>> model = unpack(content)                              # doctest: +SKIP
    >>> opcode_name(model, model.subgraphs[0].operators[0])  # doctest: +SKIP
    ('CONV_2D', '')
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.errors import ModelLoadError, first_line

# A flatbuffer holds at most 2 GB: a file this large keeps its buffers where they are
INLINE_LIMIT = 2**31 - 2**26
NUMPY_TYPES = {"FLOAT32": np.float32, "FLOAT16": np.float16, "INT8": np.int8,
               "UINT8": np.uint8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64}


def schema():
    from ai_edge_litert import schema_py_generated as generated

    return generated


def unpack(content: bytes, inline: bool = False) -> Any:
    """The mutable `ModelT`. Buffers stored after the flatbuffer (Buffer.offset/size: how
    the converter writes large or >2 GB models), which the object API cannot write back:
    None, or with `inline` moved into it when the file is small enough to pack as one
    flatbuffer (under 2 GB; None above)."""
    generated = schema()
    try:
        model = generated.ModelT.InitFromObj(generated.Model.GetRootAs(content, 0))
    except Exception as exc:  # no verifier in Python: any decoding error means corrupt
        raise ModelLoadError(f"corrupt TFLite flatbuffer ({first_line(exc)})") from exc
    if any(b is not None and b.offset > 1 for b in model.buffers or []):
        if not inline or len(content) >= INLINE_LIMIT:
            return None
        inline_buffers(model, content)
    return model


def inline_buffers(model: Any, content: bytes) -> None:
    """Weights stored after the flatbuffer (Buffer.offset/size) moved into it, so that the
    model packs anew as one flatbuffer."""
    for buffer in model.buffers or []:
        if buffer is not None and buffer.offset > 1:
            if buffer.offset + buffer.size > len(content):
                raise ModelLoadError("a weight buffer points past the end of the file")
            buffer.data = np.frombuffer(content, np.uint8, count=buffer.size,
                                        offset=buffer.offset)
            buffer.offset = buffer.size = 0


def pack(model: Any) -> bytes:
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def opcode_name(model: Any, op: Any) -> tuple[str, str]:
    """(builtin name, custom code) of an operator."""
    code = model.operatorCodes[op.opcodeIndex]
    builtin = max(int(code.deprecatedBuiltinCode), int(code.builtinCode))
    names = {v: k for k, v in vars(schema().BuiltinOperator).items() if isinstance(v, int)}
    custom = code.customCode.decode("utf-8", "replace") if code.customCode else ""
    return names.get(builtin, ""), custom


def opcode_index(model: Any, name: str, version: int) -> int:
    """The index of builtin `name` at `version` in the model's opcode table (added if new)."""
    generated = schema()
    builtin = getattr(generated.BuiltinOperator, name)
    for index, code in enumerate(model.operatorCodes):
        if max(int(code.deprecatedBuiltinCode), int(code.builtinCode)) == builtin \
                and code.version == version:
            return index
    code = generated.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version = builtin, min(builtin, 127), version
    model.operatorCodes.append(code)
    return len(model.operatorCodes) - 1


def type_name(code: int) -> str:
    return {v: k for k, v in vars(schema().TensorType).items() if isinstance(v, int)}.get(code, "")


def constant(model: Any, tensor: Any) -> np.ndarray | None:
    """The tensor's stored values in its own dtype (flat when sparse), None if not constant."""
    if tensor.buffer <= 0 or tensor.isVariable:
        return None
    buffer = model.buffers[tensor.buffer]
    dtype = NUMPY_TYPES.get(type_name(tensor.type))
    if buffer is None or buffer.data is None or len(buffer.data) == 0 or dtype is None:
        return None
    raw = np.frombuffer(np.asarray(buffer.data, np.uint8).tobytes(), dtype)
    if tensor.sparsity is not None:
        return raw
    shape = [int(d) for d in tensor.shape] if tensor.shape is not None else []
    return raw.reshape(shape) if raw.size == int(np.prod(shape)) else None


def set_constant(model: Any, tensor: Any, values: np.ndarray) -> None:
    """Give `tensor` its own new buffer holding `values` (in the tensor's type)."""
    buffer = schema().BufferT()
    buffer.data = np.frombuffer(np.ascontiguousarray(values).tobytes(), np.uint8)
    model.buffers.append(buffer)
    tensor.buffer = len(model.buffers) - 1


def text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
