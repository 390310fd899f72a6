"""Read a ``.tflite`` flatbuffer into the format-neutral `edgeopt.graph.Graph`.

The file is decoded with the flatbuffer schema that ships with ai-edge-litert
(``ai_edge_litert.schema_py_generated``), through its object API (``ModelT``). The LiteRT
interpreter is never created: reading must work for models the local runtime cannot run
(Flex ops, vendor custom ops, >2 GB models with buffers stored after the flatbuffer).

Quirks of the generated Python object API that this module absorbs:

* strings (tensor names, custom codes, signature keys) come back as ``bytes``;
* vectors come back as numpy arrays (views into the file) when numpy is importable, else lists;
* enums are plain ints -- names are recovered by reflecting over the enum classes;
* builtin options are ``XxxOptionsT`` objects with camelCase attributes, converted here to
  snake_case keys (``strideW`` -> ``stride_w``);
* there is no flatbuffer verifier in Python: bad offsets surface as IndexError,
  struct.error, ValueError, ... anywhere during unpacking, so the whole unpack is guarded.
"""

from __future__ import annotations

import math
import mmap
import os
import re
from collections.abc import Sequence
from typing import Any

from edgeopt.errors import ModelLoadError
from edgeopt.graph import Graph, Op, Quantization, Tensor

_FILE_IDENTIFIER = b"TFL3"
# The flatbuffer root: uoffset (4 bytes) + file identifier (4 bytes).
_MIN_SIZE = 8
# Buffer.offset values 0 and 1 are sentinels; real out-of-flatbuffer data starts after them.
_MIN_EXTERNAL_OFFSET = 1

# Ops whose MACs are computed; everything else has macs == 0 (see edgeopt.graph).
MAC_OPS = frozenset(
    {
        "CONV_2D",
        "DEPTHWISE_CONV_2D",
        "FULLY_CONNECTED",
        "BATCH_MATMUL",
        "TRANSPOSE_CONV",
        "CONV_3D",
        "CONV_3D_TRANSPOSE",
    }
)


def read_tflite(path_or_bytes: str | os.PathLike | bytes | bytearray | memoryview) -> Graph:
    """Parse a TFLite model (a path or the file's bytes) into a `Graph`.

    Raises `ModelLoadError` for a missing, empty, truncated or non-TFLite file.

    >>> g = read_tflite("net.tflite")  # doctest: +SKIP
    >>> g.op_histogram(), g.total_macs(), g.param_count()  # doctest: +SKIP
    ({'CONV_2D': 1, 'DEPTHWISE_CONV_2D': 1, 'FULLY_CONNECTED': 1, 'RESHAPE': 1}, 19296, 3194)
    """
    buf, label = _load_bytes(path_or_bytes)
    _check_identifier(buf, label)
    model = _unpack_model(buf, label)
    try:
        return _build_graph(model)
    except ModelLoadError as exc:
        raise ModelLoadError(f"{label}: {exc}") from exc
    except (IndexError, KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        # Structurally valid flatbuffer whose indices point nowhere (e.g. a tensor index
        # beyond the tensor list): a corrupt file, not a bug in the caller.
        raise ModelLoadError(f"{label}: malformed TFLite model ({_describe(exc)})") from exc


# --------------------------------------------------------------------------
# Loading and validation
# --------------------------------------------------------------------------


def _load_bytes(source: str | os.PathLike | bytes | bytearray | memoryview) -> tuple[Any, str]:
    """Return (buffer, label for messages); files are memory-mapped, not read."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), "<bytes>"
    label = os.fspath(source)
    try:
        with open(label, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                raise ModelLoadError(f"{label}: empty file, not a TFLite model")
            try:
                # mmap so that a multi-GB model is not copied into memory just to read its
                # structure; the map outlives the file handle.
                return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ), label
            except (OSError, ValueError):
                return fh.read(), label  # pipes and special files cannot be mapped
    except OSError as exc:
        raise ModelLoadError(f"{label}: cannot read model file ({exc.strerror or exc})") from exc


def _check_identifier(buf: Any, label: str) -> None:
    """Reject anything that is not a TFL3 flatbuffer before touching the schema code."""
    if len(buf) < _MIN_SIZE:
        raise ModelLoadError(f"{label}: file too small ({len(buf)} bytes) to be a TFLite model")
    if bytes(buf[4:8]) != _FILE_IDENTIFIER:
        raise ModelLoadError(f"{label}: not a TFLite model (missing 'TFL3' file identifier)")


def _unpack_model(buf: Any, label: str) -> Any:
    """Unpack the flatbuffer into a ``ModelT``; any decoding failure becomes ModelLoadError."""
    from ai_edge_litert import schema_py_generated as schema

    try:
        root = schema.Model.GetRootAs(buf, 0)
        _check_vector_lengths(root, len(buf))
        return schema.ModelT.InitFromObj(root)
    except ModelLoadError:
        raise
    except Exception as exc:  # no flatbuffer verifier in Python: see module doc
        raise ModelLoadError(
            f"{label}: corrupt or truncated TFLite flatbuffer ({_describe(exc)})"
        ) from exc


def _check_vector_lengths(root: Any, buf_len: int) -> None:
    """Cheap sanity check: a garbage vector length would make the object API loop for ages.

    Every element of a vector of tables takes at least 4 bytes (its offset), so a length
    above ``buf_len / 4`` can only come from corrupt data.
    """
    limit = buf_len // 4
    lengths = [
        root.OperatorCodesLength(),
        root.SubgraphsLength(),
        root.BuffersLength(),
        root.MetadataLength(),
        root.SignatureDefsLength(),
    ]
    if all(n <= limit for n in lengths):  # only then is the subgraph count worth a loop
        for i in range(root.SubgraphsLength()):
            sub = root.Subgraphs(i)
            lengths += [sub.TensorsLength(), sub.OperatorsLength()]
    if any(n > limit for n in lengths):
        raise ValueError("vector length exceeds file size")


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --------------------------------------------------------------------------
# Enum name tables (reflection over the generated enum classes)
# --------------------------------------------------------------------------


def _enum_names(enum_cls: type) -> dict[int, str]:
    """``{value: NAME}`` for a generated flatbuffer enum class."""
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


_ENUM_CACHE: dict[str, Any] = {}


def _tables() -> dict[str, Any]:
    """Enum lookup tables, built once on first use (keeps module import free of flatbuffers)."""
    if not _ENUM_CACHE:
        from ai_edge_litert import schema_py_generated as s

        tensor_type = {k: v.lower() for k, v in _enum_names(s.TensorType).items()}
        _ENUM_CACHE.update(
            operator=_enum_names(s.BuiltinOperator),
            tensor_type=tensor_type,
            # Option field (snake_case) -> value names, for fields that hold an enum value.
            fields={
                "padding": _enum_names(s.Padding),
                "fused_activation_function": _enum_names(s.ActivationFunctionType),
                "weights_format": _enum_names(s.FullyConnectedOptionsWeightsFormat),
                "kernel_type": _enum_names(s.LSTMKernelType),
                "combiner": _enum_names(s.CombinerType),
                "mode": _enum_names(s.MirrorPadMode),
                "type": _enum_names(s.LSHProjectionType),
                "reduce_function": _enum_names(s.ReduceWindowFunction),
                "comparison_direction": _enum_names(s.StablehloComparisonDirection),
                "compare_type": _enum_names(s.StablehloComparisonType),
                "algorithm": _enum_names(s.RngAlgorithm),
                **{
                    name: tensor_type
                    for name in (
                        "quantized_bias_type",
                        "in_data_type",
                        "out_data_type",
                        "out_type",
                        "output_type",
                        "idx_out_type",
                        "key_dtype",
                        "value_dtype",
                    )
                },
            },
        )
    return _ENUM_CACHE


# --------------------------------------------------------------------------
# Graph construction
# --------------------------------------------------------------------------


def _build_graph(model: Any) -> Graph:
    subgraphs = model.subgraphs or []
    if not subgraphs:
        raise ModelLoadError("TFLite model has no subgraphs")
    buffers = model.buffers or []
    external = {eb.id: eb for eb in (model.externalBuffers or []) if eb is not None}
    opcodes = model.operatorCodes or []

    tensors: list[Tensor] = []
    ops: list[Op] = []
    sub_meta: list[dict] = []
    for sg_index, sg in enumerate(subgraphs):
        if sg is None:
            raise ModelLoadError(f"TFLite subgraph {sg_index} is missing")
        offset = len(tensors)
        raw_tensors = sg.tensors or []
        tensors.extend(_convert_tensor(t, buffers, external) for t in raw_tensors)
        op_offset = len(ops)
        for raw_op in sg.operators or []:
            ops.append(
                _convert_op(raw_op, len(ops), sg_index, offset, len(raw_tensors), opcodes, tensors)
            )
        sub_meta.append(
            {
                "name": _text(sg.name),
                "tensor_offset": offset,
                "tensor_count": len(raw_tensors),
                "op_offset": op_offset,
                "op_count": len(ops) - op_offset,
                "inputs": _remap(sg.inputs, offset, len(raw_tensors)),
                "outputs": _remap(sg.outputs, offset, len(raw_tensors)),
            }
        )

    _check_subgraph_references(ops, len(subgraphs))
    return Graph(
        format="tflite",
        tensors=tuple(tensors),
        ops=tuple(ops),
        inputs=sub_meta[0]["inputs"],
        outputs=sub_meta[0]["outputs"],
        subgraph_count=len(subgraphs),
        metadata=_model_metadata(model, sub_meta),
    )


def _check_subgraph_references(ops: list[Op], count: int) -> None:
    """Control-flow options (WHILE, IF, CALL, CALL_ONCE, StableHLO) must name real subgraphs."""
    for op in ops:
        for key, value in op.options.items():
            if key != "subgraph" and not key.endswith(("subgraph_index", "subgraph_indices")):
                continue
            for index in value if isinstance(value, list) else [value]:
                if not isinstance(index, int) or not 0 <= index < count:
                    raise ModelLoadError(
                        f"TFLite operator {op.index} ({op.op}) refers to subgraph {index}, "
                        f"but the model has {count}"
                    )


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _ints(values: Sequence[int] | None) -> tuple[int, ...]:
    return tuple(int(v) for v in values) if values is not None else ()


def _remap(indices: Sequence[int] | None, offset: int, count: int) -> tuple[int, ...]:
    """Subgraph-local tensor indices -> indices into Graph.tensors (-1 stays -1)."""
    out = []
    for i in _ints(indices):
        if i == -1:  # kTfLiteOptionalTensor; LiteRT crashes on any other negative index
            out.append(-1)
        elif not 0 <= i < count:
            raise ModelLoadError(f"TFLite tensor index {i} out of range ({count} tensors)")
        else:
            out.append(offset + i)
    return tuple(out)


def _tensor_name(value: bytes | None) -> str:
    """Tensor names are UTF-8 in every writer; LiteRT and the quantizer decode them strictly."""
    try:
        return value.decode("utf-8") if isinstance(value, bytes) else _text(value)
    except UnicodeDecodeError as exc:
        raise ModelLoadError(f"TFLite tensor name {value[:40]!r} is not valid UTF-8") from exc


def _convert_tensor(t: Any, buffers: list, external: dict) -> Tensor:
    shape = _ints(t.shape)
    signature = _ints(t.shapeSignature) if t.shapeSignature is not None else None
    if not 0 <= t.buffer < max(len(buffers), 1):
        raise ModelLoadError(f"TFLite tensor '{_text(t.name)}' points to missing buffer {t.buffer}")
    size = 0
    if not t.isVariable:  # variables have (initial) buffers but change at run time
        size = _constant_size(t, buffers, external)
    return Tensor(
        name=_tensor_name(t.name),
        shape=shape,
        dtype=_tables()["tensor_type"].get(t.type, f"type_{t.type}"),
        shape_signature=signature,
        is_constant=size > 0,
        size_bytes=size,
        quantization=_convert_quantization(t.quantization),
    )


def _constant_size(t: Any, buffers: list, external: dict) -> int:
    """Bytes of the tensor's constant data; 0 means it is an activation.

    Buffer 0 is the reserved empty buffer. Models over 2 GB keep data after the flatbuffer
    (``Buffer.offset``/``size``); newer files may reference ``Model.external_buffers``.
    """
    if t.externalBuffer and t.externalBuffer in external:
        return int(external[t.externalBuffer].length)
    if t.buffer <= 0:
        return 0
    if t.buffer >= len(buffers):
        raise ModelLoadError(f"TFLite tensor '{_text(t.name)}' points to missing buffer {t.buffer}")
    buffer = buffers[t.buffer]
    if buffer is None:
        return 0
    if buffer.data is not None and len(buffer.data) > 0:
        return len(buffer.data)
    if buffer.offset > _MIN_EXTERNAL_OFFSET:
        return int(buffer.size)
    return 0


def _convert_quantization(q: Any) -> Quantization | None:
    """Scale/zero-point of a tensor; None when the tensor is not quantized.

    TFLite writes an empty QuantizationParameters table on most float tensors, and
    min/max-only tables for not-yet-quantized ones: neither counts as quantized.
    """
    if q is None or q.scale is None or len(q.scale) == 0:
        return None
    scale = tuple(float(s) for s in q.scale)
    zero_point = _ints(q.zeroPoint) or (0,) * len(scale)
    axis = int(q.quantizedDimension) if len(scale) > 1 else None
    return Quantization(scale=scale, zero_point=zero_point, axis=axis)


def _opcode(code: Any) -> tuple[str, int, str | None]:
    """(op name, version, custom code) of an OperatorCode."""
    # deprecated_builtin_code is an int8 that saturates at 127; real code is the max of both.
    builtin = max(int(code.deprecatedBuiltinCode), int(code.builtinCode))
    names = _tables()["operator"]
    name = names.get(builtin, f"BUILTIN_{builtin}")
    custom = _text(code.customCode) if name == "CUSTOM" else None
    return name, int(code.version), custom


# Operand rules LiteRT's kernels rely on without checking: a model that breaks one crashes
# the interpreter (SIGSEGV) instead of failing to load. Found by the fuzz suite and by a
# sweep of every builtin with 0-2 inputs and no options (benchmarks/fuzz.py).
# Leading inputs that must not be the optional-tensor marker (-1); other builtins need
# at least their first input.
_REQUIRED_INPUTS = {"FULLY_CONNECTED": 2, "CONV_2D": 2, "DEPTHWISE_CONV_2D": 2,
                    "TRANSPOSE_CONV": 3, "CONV_3D": 2, "CONV_3D_TRANSPOSE": 3}
_MIN_INPUTS = {"BATCH_MATMUL": 2}


def _check_operands(name: str, index: int, inputs: tuple[int, ...], outputs: tuple[int, ...],
                    options: dict) -> None:
    required = _REQUIRED_INPUTS.get(name, 0 if name == "CUSTOM" else 1)
    for position in range(min(required, len(inputs))):
        if inputs[position] == -1:
            raise ModelLoadError(
                f"TFLite operator {index} ({name}) omits its required input {position}"
            )
    if len(inputs) < _MIN_INPUTS.get(name, 0):
        raise ModelLoadError(
            f"TFLite operator {index} ({name}) has {len(inputs)} input(s), needs "
            f"{_MIN_INPUTS[name]}"
        )
    if name == "SPLIT" and options.get("num_splits") != len(outputs):
        raise ModelLoadError(
            f"TFLite operator {index} (SPLIT) declares {options.get('num_splits')} splits "
            f"but has {len(outputs)} output(s)"
        )


def _convert_op(
    raw: Any,
    index: int,
    subgraph: int,
    offset: int,
    count: int,
    opcodes: list,
    tensors: list[Tensor],
) -> Op:
    if raw is None:
        raise ModelLoadError(f"TFLite operator {index} is missing")
    if not 0 <= raw.opcodeIndex < len(opcodes) or opcodes[raw.opcodeIndex] is None:
        raise ModelLoadError(f"TFLite operator {index} has invalid opcode index {raw.opcodeIndex}")
    name, version, custom = _opcode(opcodes[raw.opcodeIndex])
    inputs = _remap(raw.inputs, offset, count)
    outputs = _remap(raw.outputs, offset, count)
    options = _options_dict(raw.builtinOptions)
    options.update(_options_dict(raw.builtinOptions2))
    _check_operands(name, index, inputs, outputs, options)
    return Op(
        index=index,
        op=name,
        version=version,
        inputs=inputs,
        outputs=outputs,
        options=options,
        custom_code=custom,
        macs=_macs(name, inputs, outputs, options, tensors),
        subgraph=subgraph,
    )


_WORD = re.compile(r"(.)([A-Z][a-z]+)")
_HUMP = re.compile(r"([a-z0-9])([A-Z])")


def _snake(name: str) -> str:
    """``fusedActivationFunction`` -> ``fused_activation_function``.

    Two passes so that one-letter words split too: ``dilationWFactor`` -> ``dilation_w_factor``
    (the schema's own field name), ``adjX`` -> ``adj_x``.
    """
    return _HUMP.sub(r"\1_\2", _WORD.sub(r"\1_\2", name)).lower()


def _options_dict(options: Any) -> dict:
    """Builtin options object (``Conv2DOptionsT`` ...) -> plain dict with enum names."""
    if options is None:
        return {}
    enums = _tables()["fields"]
    out = {}
    for key, value in vars(options).items():
        skey = _snake(key)
        value = _plain(value)
        if skey in enums and isinstance(value, int) and not isinstance(value, bool):
            value = enums[skey].get(value, value)
        out[skey] = value
    return out


def _plain(value: Any) -> Any:
    """numpy arrays/scalars, bytes and nested option objects -> plain Python values."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return _text(value)
    if hasattr(value, "tolist"):  # numpy array or scalar
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "__dict__"):  # nested generated table object
        return {_snake(k): _plain(v) for k, v in vars(value).items()}
    return value


# --------------------------------------------------------------------------
# MACs
# --------------------------------------------------------------------------


def _shape(tensors: list[Tensor], index: int) -> tuple[int, ...] | None:
    if index < 0 or index >= len(tensors):
        return None
    return tensors[index].shape


def _macs(
    name: str, inputs: tuple[int, ...], outputs: tuple[int, ...], options: dict, tensors: list
) -> int:
    """Multiply-accumulates of one op from its tensor shapes (0 if not a MAC op/unknown)."""
    if name not in MAC_OPS or not outputs:
        return 0
    out = _shape(tensors, outputs[0])
    if out is None:
        return 0
    out_elems = math.prod(out)
    if name == "TRANSPOSE_CONV":
        # inputs: (output_shape, weights [Cout, kh, kw, Cin], activation [N, H, W, Cin]);
        # every input element is scattered through kh*kw*Cout weights.
        weights, act = _shape(tensors, inputs[1]), _shape(tensors, inputs[2])
        if not weights or act is None or len(weights) != 4:
            return 0
        return math.prod(act) * weights[0] * weights[1] * weights[2]
    if len(inputs) < 2:
        return 0
    lhs, rhs = _shape(tensors, inputs[0]), _shape(tensors, inputs[1])
    if not lhs or not rhs:
        return 0
    if name == "CONV_2D" and len(rhs) == 4:
        # Filter [Cout, kh, kw, Cin/groups]: the last dim is already per-group.
        return out_elems * rhs[1] * rhs[2] * rhs[3]
    if name == "DEPTHWISE_CONV_2D" and len(rhs) == 4:
        return out_elems * rhs[1] * rhs[2]  # filter [1, kh, kw, Cout]
    if name == "CONV_3D" and len(rhs) == 5:
        return out_elems * rhs[0] * rhs[1] * rhs[2] * rhs[3]  # [kd, kh, kw, Cin, Cout]
    if name == "CONV_3D_TRANSPOSE":
        # inputs: (output_shape, filter [kd, kh, kw, Cout, Cin], activation)
        act = _shape(tensors, inputs[2]) if len(inputs) > 2 else None
        if act is None or len(rhs) != 5:
            return 0
        return math.prod(act) * rhs[0] * rhs[1] * rhs[2] * rhs[3]
    if name == "FULLY_CONNECTED":
        return out_elems * rhs[-1]  # weights [units, in_features]
    if name == "BATCH_MATMUL":
        k = lhs[-2] if options.get("adj_x") and len(lhs) >= 2 else lhs[-1]
        return out_elems * k
    return 0


# --------------------------------------------------------------------------
# Model-level metadata
# --------------------------------------------------------------------------


def _check_model_references(model: Any, sub_meta: list[dict]) -> None:
    """Metadata buffers and signature tensors must exist: the quantizer and LiteRT's
    signature runner index them without checking."""
    buffers = len(model.buffers or [])
    for entry in model.metadata or []:
        if entry is not None and not 0 <= entry.buffer < buffers:
            raise ModelLoadError(f"TFLite metadata '{_text(entry.name)}' points to missing "
                                 f"buffer {entry.buffer} ({buffers} buffers)")
    for sig in model.signatureDefs or []:
        if sig is None:
            continue
        if not 0 <= sig.subgraphIndex < len(sub_meta):
            raise ModelLoadError(f"TFLite signature '{_text(sig.signatureKey)}' refers to "
                                 f"subgraph {sig.subgraphIndex}, but the model has "
                                 f"{len(sub_meta)}")
        count = sub_meta[sig.subgraphIndex]["tensor_count"]
        for entry in [*(sig.inputs or []), *(sig.outputs or [])]:
            if entry is not None and not 0 <= entry.tensorIndex < count:
                raise ModelLoadError(f"TFLite signature '{_text(sig.signatureKey)}' names "
                                     f"tensor {entry.tensorIndex} ({count} tensors)")


def _model_metadata(model: Any, sub_meta: list[dict]) -> dict:
    _check_model_references(model, sub_meta)
    signatures = []
    for sig in model.signatureDefs or []:
        if sig is None:
            continue
        base = sub_meta[sig.subgraphIndex]["tensor_offset"]
        signatures.append(
            {
                "key": _text(sig.signatureKey),
                "subgraph": int(sig.subgraphIndex),
                "inputs": {_text(m.name): base + int(m.tensorIndex) for m in sig.inputs or []},
                "outputs": {_text(m.name): base + int(m.tensorIndex) for m in sig.outputs or []},
            }
        )
    return {
        "schema_version": int(model.version),
        "description": _text(model.description),
        "metadata_names": [_text(m.name) for m in model.metadata or [] if m is not None],
        "signatures": signatures,
        "subgraphs": sub_meta,
        "buffer_count": len(model.buffers or []),
    }
