"""Rewrite a `.tflite` as apps ship it into the plain float32 graph that quantizers read.

MediaPipe, face-detection-lite and many apps ship "float" models whose weights are fp16
(or int8) constants behind DEQUANTIZE ops, sometimes stored sparse behind DENSIFY, with
no SignatureDef, tensor names repeated across subgraphs, or MediaPipe's custom op
Convolution2DTransposeBias. LiteRT runs them; ai-edge-quantizer and edgeopt's calibration
core do not (fp16 weights get activation scales, names must be unique, the custom op has
no kernel). `prepare_tflite` folds each DEQUANTIZE / DENSIFY of a constant into a float32
constant, drops the folded ops, writes the custom op as builtin TRANSPOSE_CONV with its
bias, gives repeated or empty tensor names unique ones, and adds a `serving_default`
signature when there is none. The result is checked against the original under LiteRT
before it is used: a rewrite that changed the outputs is an error, not a silent model.

    >>> prepared = prepare_tflite(Path("palm_detection_lite.tflite").read_bytes())  # doctest: +SKIP
    >>> prepared.notes  # doctest: +SKIP
    ('folded 113 fp16 DEQUANTIZE weights to float32', 'added a signature (serving_default)')
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeopt.errors import ConversionError, first_line
from edgeopt.graph import Graph
from edgeopt.tflite_edit import constant as _constant
from edgeopt.tflite_edit import opcode_index as _opcode_index
from edgeopt.tflite_edit import opcode_name as _opcode_name
from edgeopt.tflite_edit import pack as _pack
from edgeopt.tflite_edit import schema as _schema
from edgeopt.tflite_edit import set_constant as _set_constant
from edgeopt.tflite_edit import text as _text
from edgeopt.tflite_edit import type_name as _type_name
from edgeopt.tflite_edit import unpack as _unpack
from edgeopt.tflite_variance import two_pass_variances

_TRANSPOSE_CONV_BIAS = "Convolution2DTransposeBias"
# TfLitePadding (the C enum MediaPipe's custom options hold) -> schema Padding names.
_C_PADDING = {1: "SAME", 2: "VALID"}
# How close the prepared model's outputs must stay to the original's (fp32 rounding only).
_RTOL = 1e-3
_ATOL = 1e-4
# Against a dynamic-range original, which rounds activations to int8 as it runs.
_HYBRID_SQNR_DB = 20.0
# Against a fast variance computed in two passes: the original's own float32 cancellation
# is what differs (magika as a .tflite: 44 dB on the random check input, whose 0/1 bytes
# give its layer norms a large mean over a small spread); a wrong rewrite would be far off.
# Below this the model is read without the rewrite.
_VARIANCE_SQNR_DB = 30.0


@dataclass(frozen=True)
class PreparedTFLite:
    """The model to read instead of the file, and what was changed (empty: nothing)."""

    content: bytes
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.notes)


def prepare_tflite(content: bytes, variances: bool = True) -> PreparedTFLite:
    """Fold weights, rewrite the custom op, compute fast variances in two passes
    (edgeopt.tflite_variance), fix names, add a signature; verify the result.

    Raises `ConversionError` when the rewrite gives outputs that differ from the
    original's under LiteRT, `ModelLoadError` when the flatbuffer cannot be read. A model
    whose only departure comes from the two-pass variances is prepared without them."""
    model = _unpack(content, inline=True)
    if model is None:  # buffers stored after a flatbuffer too large to re-pack: as they are
        return PreparedTFLite(content)
    counts: Counter = Counter()
    for subgraph in model.subgraphs or []:
        _rewrite_transpose_conv_bias(model, subgraph, counts)
        _fold_constants(model, subgraph, counts)
        _dequantize_hybrid_weights(model, subgraph, counts)
        if variances and (rewritten := two_pass_variances(model, subgraph)):
            counts["two_pass_variance"] += rewritten
        _drop_unused_tensors(model, subgraph)
    _drop_unused_buffers(model)
    _drop_unused_opcodes(model)
    _unique_names(model, counts)
    _add_signature(model, counts)
    if not counts:
        return PreparedTFLite(content)
    prepared = _pack(model)
    # LiteRT runs int8 weights of float ops "hybrid", rounding the activations to int8 on
    # the fly: the float graph then agrees with the original only to that rounding.
    try:
        verified = _verify(content, prepared, exact=not counts["hybrid"],
                           variances=bool(counts["two_pass_variance"]))
    except ConversionError:
        if not counts["two_pass_variance"]:
            raise
        return prepare_tflite(content, variances=False)
    return PreparedTFLite(prepared, (*_notes(counts), verified))


# --------------------------------------------------------------------------- flatbuffer

# --------------------------------------------------------------------------- constants

def _dequantized(tensor: Any, values: np.ndarray) -> np.ndarray | None:
    """DEQUANTIZE of a constant: fp16 widened, int8/uint8/int16 by scale and zero point."""
    if values.dtype == np.float16:
        return values.astype(np.float32)
    q = tensor.quantization
    if q is None or q.scale is None or len(q.scale) == 0:
        return None
    scale = np.asarray(q.scale, np.float32)
    zero = np.asarray(q.zeroPoint if q.zeroPoint is not None else [0] * len(scale), np.float32)
    if len(scale) > 1:  # per-channel along quantizedDimension
        shape = [1] * values.ndim
        shape[int(q.quantizedDimension)] = len(scale)
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return ((values.astype(np.float32) - zero) * scale).astype(np.float32)


def _index_vector(vector: Any) -> np.ndarray:
    return np.asarray(vector.values if vector is not None else [], np.int64)


def densify(sparse: Any, values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The dense array a TFLite sparse tensor stores (the schema's SparsityParameters).

    Levels run in `traversal_order` over the dense dims then the block dims; a DENSE level
    visits every index, a SPARSE_CSR level the indices its segments list. The leaves, in
    that order, are the stored values."""
    order = [int(d) for d in sparse.traversalOrder]
    block_map = [int(d) for d in sparse.blockMap] if sparse.blockMap is not None else []
    levels = sparse.dimMetadata
    rank = len(shape)
    positions = np.zeros(1, np.int64)
    coords: list[np.ndarray] = []
    for level in levels:
        if level.format == 0:  # DENSE
            size = int(level.denseSize)
            coords = [np.repeat(c, size) for c in coords]
            coords.append(np.tile(np.arange(size), len(positions)))
            positions = (positions[:, None] * size + np.arange(size)).ravel()
        else:  # SPARSE_CSR
            segments = _index_vector(level.arraySegments)
            indices = _index_vector(level.arrayIndices)
            starts, ends = segments[positions], segments[positions + 1]
            counts = ends - starts
            coords = [np.repeat(c, counts) for c in coords]
            positions = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) \
                if len(starts) else np.zeros(0, np.int64)
            coords.append(indices[positions])
    if len(positions) != len(values):
        raise ConversionError(f"a sparse constant lists {len(values)} values but its index "
                              f"arrays address {len(positions)}; the model is corrupt")
    dense_index = [np.zeros(len(values), np.int64) for _ in range(rank)]
    for level, dim in enumerate(order[:rank]):
        dense_index[dim] = coords[level]
    for level in range(rank, len(order)):
        block = order[level] - rank
        dim = block_map[block]
        block_size = int(levels[level].denseSize)
        dense_index[dim] = dense_index[dim] * block_size + coords[level]
    dense = np.zeros(shape, values.dtype)
    dense[tuple(dense_index)] = values
    return dense


def _fold_constants(model: Any, subgraph: Any, counts: Counter) -> None:
    """Replace DEQUANTIZE/DENSIFY of constants by their result; the ops are dropped."""
    outputs = {int(i) for i in subgraph.outputs}
    kept = []
    for op in subgraph.operators or []:
        name, _ = _opcode_name(model, op)
        folded = None
        if name in ("DEQUANTIZE", "DENSIFY") and len(op.inputs) == 1 and len(op.outputs) == 1 \
                and int(op.outputs[0]) not in outputs:
            folded = _fold_one(model, subgraph, op, name)
        if folded is None:
            kept.append(op)
        else:
            counts[folded] += 1
    subgraph.operators = kept


def _fold_one(model: Any, subgraph: Any, op: Any, name: str) -> str | None:
    source, target = subgraph.tensors[op.inputs[0]], subgraph.tensors[op.outputs[0]]
    values = _constant(model, source)
    if values is None:
        return None
    if name == "DENSIFY":
        if source.sparsity is None:
            return None
        shape = tuple(int(d) for d in target.shape)
        _set_constant(model, target, densify(source.sparsity, values, shape))
        return "sparse DENSIFY"
    if _type_name(target.type) != "FLOAT32":
        return None
    result = _dequantized(source, values)
    if result is None:
        return None
    kind = "fp16" if values.dtype == np.float16 else f"{values.dtype.name}-weight-only"
    _set_constant(model, target, result)
    return f"{kind} DEQUANTIZE"


# Float ops that LiteRT runs "hybrid" (dynamic range) when their weight input is int8:
# (activation input, weight input).
_HYBRID_INPUTS = {"CONV_2D": (0, 1), "DEPTHWISE_CONV_2D": (0, 1), "FULLY_CONNECTED": (0, 1),
                  "BATCH_MATMUL": (0, 1), "TRANSPOSE_CONV": (2, 1)}


def _dequantize_hybrid_weights(model: Any, subgraph: Any, counts: Counter) -> None:
    """A dynamic-range model's int8 weights (fed straight to a float op) become float32
    constants holding the same values: the float graph the quantizers start from."""
    done: dict[int, int] = {}
    for op in subgraph.operators or []:
        slots = _HYBRID_INPUTS.get(_opcode_name(model, op)[0])
        if slots is None or len(op.inputs) <= max(slots) or min(op.inputs[s] for s in slots) < 0:
            continue
        activation, position = slots
        weight_index = int(op.inputs[position])
        weight = subgraph.tensors[weight_index]
        if _type_name(subgraph.tensors[op.inputs[activation]].type) != "FLOAT32" \
                or _type_name(weight.type) not in ("INT8", "UINT8", "INT16"):
            continue
        if weight_index not in done:
            values = _constant(model, weight)
            result = _dequantized(weight, values) if values is not None else None
            if result is None:
                continue
            done[weight_index] = _float_copy(model, subgraph, weight, result)
            counts["hybrid"] += 1
        inputs = [int(i) for i in op.inputs]
        inputs[position] = done[weight_index]
        op.inputs = inputs


def _float_copy(model: Any, subgraph: Any, tensor: Any, values: np.ndarray) -> int:
    """A new float32 constant tensor beside `tensor`, same name and shape; returns its index."""
    schema = _schema()
    copy = schema.TensorT()
    copy.name, copy.shape, copy.type = tensor.name, tensor.shape, schema.TensorType.FLOAT32
    copy.shapeSignature = tensor.shapeSignature
    _set_constant(model, copy, values)
    subgraph.tensors.append(copy)
    return len(subgraph.tensors) - 1


# --------------------------------------------------------------------------- custom op

def _rewrite_transpose_conv_bias(model: Any, subgraph: Any, counts: Counter) -> None:
    """MediaPipe's Convolution2DTransposeBias(input, weights, bias) -> builtin TRANSPOSE_CONV
    (output_shape, weights, input, bias) with the same padding and strides."""
    for op in subgraph.operators or []:
        if _opcode_name(model, op) != ("CUSTOM", _TRANSPOSE_CONV_BIAS):
            continue
        options = bytes(op.customOptions) if op.customOptions is not None else b""
        if len(op.inputs) != 3 or len(op.outputs) != 1 or len(options) < 12:
            raise ConversionError(
                f"custom op {_TRANSPOSE_CONV_BIAS} with {len(op.inputs)} inputs and "
                f"{len(options)} bytes of options (expected 3 inputs: input, weights, bias, and "
                "12 bytes: padding, stride_w, stride_h); edgeopt cannot rewrite it")
        padding, stride_w, stride_h = struct.unpack("<iii", options[:12])
        if padding not in _C_PADDING:
            raise ConversionError(f"custom op {_TRANSPOSE_CONV_BIAS}: padding code {padding} is "
                                  "neither SAME (1) nor VALID (2); edgeopt cannot rewrite it")
        _to_transpose_conv(model, subgraph, op, _C_PADDING[padding], stride_w, stride_h)
        counts["transpose_conv_bias"] += 1


def _to_transpose_conv(model: Any, subgraph: Any, op: Any, padding: str, stride_w: int,
                       stride_h: int) -> None:
    schema = _schema()
    out_shape = np.asarray(subgraph.tensors[op.outputs[0]].shape, np.int32)
    tensor = schema.TensorT()
    tensor.name = f"{_text(subgraph.tensors[op.outputs[0]].name)}/output_shape".encode()
    tensor.shape, tensor.type = [len(out_shape)], schema.TensorType.INT32
    _set_constant(model, tensor, out_shape)
    subgraph.tensors.append(tensor)
    source, weights, bias = (int(i) for i in op.inputs)
    op.inputs = [len(subgraph.tensors) - 1, weights, source, bias]
    options = schema.TransposeConvOptionsT()
    options.padding = getattr(schema.Padding, padding)
    options.strideW, options.strideH = stride_w, stride_h
    op.builtinOptionsType = schema.BuiltinOptions.TransposeConvOptions
    op.builtinOptions = options
    op.customOptions, op.customOptionsFormat = None, 0
    op.opcodeIndex = _opcode_index(model, "TRANSPOSE_CONV", 3)  # v3: with a bias input


# --------------------------------------------------------------------------- tidying

def _referenced(subgraph: Any) -> set[int]:
    used = {int(i) for i in [*subgraph.inputs, *subgraph.outputs]}
    for op in subgraph.operators or []:
        for vector in (op.inputs, op.outputs, op.intermediates):
            used.update(int(i) for i in (vector if vector is not None else []))
    used.discard(-1)
    return used


def _drop_unused_tensors(model: Any, subgraph: Any) -> None:
    """Tensors no op, input, output or signature names (the folded sources) go."""
    index = (model.subgraphs or []).index(subgraph)
    signatures = [s for s in model.signatureDefs or [] if s.subgraphIndex == index]
    used = _referenced(subgraph)
    for signature in signatures:
        used.update(int(m.tensorIndex) for m in [*(signature.inputs or []),
                                                 *(signature.outputs or [])])
    if len(used) == len(subgraph.tensors):
        return
    remap = {old: new for new, old in enumerate(sorted(used))}
    remap[-1] = -1
    subgraph.tensors = [subgraph.tensors[i] for i in sorted(used)]
    subgraph.inputs = [remap[int(i)] for i in subgraph.inputs]
    subgraph.outputs = [remap[int(i)] for i in subgraph.outputs]
    for op in subgraph.operators or []:
        op.inputs = [remap[int(i)] for i in op.inputs]
        op.outputs = [remap[int(i)] for i in op.outputs]
        if op.intermediates is not None:
            op.intermediates = [remap[int(i)] for i in op.intermediates]
    for signature in signatures:
        for entry in [*(signature.inputs or []), *(signature.outputs or [])]:
            entry.tensorIndex = remap[int(entry.tensorIndex)]


def _drop_unused_buffers(model: Any) -> None:
    """Empty the data of buffers nothing points to any more (indices stay as they are)."""
    used = {t.buffer for sg in model.subgraphs or [] for t in sg.tensors or []}
    used.update(m.buffer for m in model.metadata or [])
    used.update(int(b) for b in (model.metadataBuffer if model.metadataBuffer is not None
                                 else []))
    for index, buffer in enumerate(model.buffers or []):
        if index not in used and buffer is not None and buffer.data is not None:
            model.buffers[index] = _schema().BufferT()


def _drop_unused_opcodes(model: Any) -> None:
    """Operator codes no op uses go: a leftover custom code must not stop LiteRT loading."""
    ops = [op for sg in model.subgraphs or [] for op in sg.operators or []]
    used = sorted({op.opcodeIndex for op in ops})
    if len(used) == len(model.operatorCodes):
        return
    remap = {old: new for new, old in enumerate(used)}
    model.operatorCodes = [model.operatorCodes[i] for i in used]
    for op in ops:
        op.opcodeIndex = remap[op.opcodeIndex]


def _unique_names(model: Any, counts: Counter) -> None:
    """ai-edge-quantizer keys tensors by name across all subgraphs: repeated or empty names
    get a suffix; the first holder (subgraph 0 first) keeps its name."""
    seen: set[str] = set()
    for sg_index, subgraph in enumerate(model.subgraphs or []):
        for index, tensor in enumerate(subgraph.tensors or []):
            name = _text(tensor.name)
            if name and name not in seen:
                seen.add(name)
                continue
            base = name or f"tensor_{sg_index}_{index}"
            candidate, k = base, 1
            while candidate in seen:
                candidate, k = f"{base}_{k}", k + 1
            tensor.name = candidate.encode()
            seen.add(candidate)
            counts["renamed" if name else "named"] += 1


def _add_signature(model: Any, counts: Counter) -> None:
    """A `serving_default` signature over subgraph 0, its entries named after the tensors."""
    if model.signatureDefs:
        return
    schema = _schema()
    subgraph = model.subgraphs[0]

    def entries(indices) -> list:
        out = []
        for i in indices:
            entry = schema.TensorMapT()
            entry.name, entry.tensorIndex = subgraph.tensors[int(i)].name, int(i)
            out.append(entry)
        return out

    signature = schema.SignatureDefT()
    signature.signatureKey, signature.subgraphIndex = b"serving_default", 0
    signature.inputs, signature.outputs = entries(subgraph.inputs), entries(subgraph.outputs)
    model.signatureDefs = [signature]
    counts["signature"] += 1


def _notes(counts: Counter) -> list[str]:
    notes = []
    for kind in sorted(k for k in counts if k.endswith(("DEQUANTIZE", "DENSIFY"))):
        noun = "weights" if kind.endswith("DEQUANTIZE") else "weights (stored sparse)"
        target = "float32" if kind.endswith("DEQUANTIZE") else "dense"
        notes.append(f"folded {counts[kind]} {kind} {noun} to {target} constants")
    if counts["hybrid"]:
        notes.append(f"dequantized {counts['hybrid']} int8 weights of a dynamic-range model to "
                     "float32 constants (they keep their int8 rounding)")
    if counts["transpose_conv_bias"]:
        notes.append(f"rewrote {counts['transpose_conv_bias']} MediaPipe custom op(s) "
                     f"{_TRANSPOSE_CONV_BIAS} as builtin TRANSPOSE_CONV with bias")
    if counts["renamed"] or counts["named"]:
        notes.append(f"renamed {counts['renamed']} repeated and named {counts['named']} unnamed "
                     "tensor(s) so that every tensor name is unique")
    if counts["two_pass_variance"]:
        notes.append(f"computed {counts['two_pass_variance']} variance(s) written E[x²] − E[x]² "
                     "in two passes, E[(x − E[x])²]: the same value, without the cancellation "
                     "that turns the difference into rounding noise on int8 grids")
    if counts["signature"]:
        notes.append("added a signature (serving_default, named after the tensors)")
    return notes


# --------------------------------------------------------------------------- verification

# sizes tried for dynamic dimensions when a model does not prepare at its placeholder shape
# (openWakeWord's melspectrogram declares [-1, -1] with a [1, 1] its CONV_2D cannot take)
_TRIAL_SIZES = (16, 64, 256, 1024, 4096)


def _interpreter(content: bytes, shapes: list[list[int]] | None = None):
    """`content` in LiteRT with tensors allocated, at `shapes` when given."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=content)
    for detail, shape in zip(interpreter.get_input_details(), shapes or []):
        interpreter.resize_tensor_input(detail["index"], shape)
    interpreter.allocate_tensors()
    return interpreter


def _trial_shapes(interpreter, size: int) -> list[list[int]]:
    return [[1 if axis == 0 and d < 0 else size if d < 0 else int(d)
             for axis, d in enumerate(detail.get("shape_signature", detail["shape"]))]
            for detail in interpreter.get_input_details()]


def _runnable(content: bytes):
    """`content` allocated at its placeholder shape, or, for dynamic inputs that do not
    prepare there, at the first trial size that does; and the input shapes used."""
    from ai_edge_litert.interpreter import Interpreter

    try:
        return _interpreter(content), None
    except (ValueError, RuntimeError) as first:
        probe = Interpreter(model_content=content)
        if not any(int(d) < 0 for detail in probe.get_input_details()
                   for d in detail.get("shape_signature", ())):
            raise
        for size in _TRIAL_SIZES:
            shapes = _trial_shapes(probe, size)
            try:
                return _interpreter(content, shapes), shapes
            except (ValueError, RuntimeError):
                continue
        raise first


def _sample(detail: dict, rng: np.random.Generator) -> np.ndarray:
    shape = [max(int(d), 1) for d in detail["shape"]]
    dtype = np.dtype(detail["dtype"])
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype == np.bool_:
        return np.zeros(shape, dtype)
    return rng.integers(0, 2, shape).astype(dtype)


def _outputs(interpreter, feeds: list[np.ndarray]) -> list[np.ndarray]:
    for detail, value in zip(interpreter.get_input_details(), feeds):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()]


def _verify(original: bytes, prepared: bytes, exact: bool = True,
            variances: bool = False) -> str:
    """Run both models on one seeded random input; the outputs must agree (to fp32 rounding;
    when not `exact` to _HYBRID_SQNR_DB; with two-pass `variances` to _VARIANCE_SQNR_DB,
    since the fast form's own float32 cancellation is what changes). Returns the note
    saying how it was checked."""
    try:
        after, shapes = _runnable(prepared)
    except (ValueError, RuntimeError) as exc:
        raise ConversionError(f"the float graph edgeopt made of the .tflite does not load in "
                              f"LiteRT: {first_line(exc)}") from exc
    try:
        before = _interpreter(original, shapes)
    except (ValueError, RuntimeError):
        before = None  # a custom op without a kernel here: only the shapes can be compared
    rng = np.random.default_rng(0)
    feeds = [_sample(d, rng) for d in after.get_input_details()]
    try:
        new = _outputs(after, feeds)
    except (ValueError, RuntimeError) as exc:
        raise ConversionError(f"the float graph edgeopt made of the .tflite fails in LiteRT: "
                              f"{first_line(exc)}") from exc
    if before is None:
        return _check_shapes(original, new)
    old = _outputs(before, feeds)
    if not exact:
        return _check_close(old, new, _HYBRID_SQNR_DB, "to its int8 activation rounding")
    if variances:
        return _check_close(old, new, _VARIANCE_SQNR_DB,
                            "to the float32 rounding of its fast variances")
    for index, (a, b) in enumerate(zip(old, new)):
        scale = float(np.max(np.abs(a))) if a.size else 0.0
        if a.shape != b.shape or not np.allclose(a, b, rtol=_RTOL, atol=_ATOL * max(scale, 1.0)):
            diff = float(np.max(np.abs(a.astype(np.float64) - b))) if a.shape == b.shape \
                else float("nan")
            raise ConversionError(f"the float graph edgeopt made of the .tflite changes output "
                                  f"{index} (max difference {diff:.3g}, shape {list(b.shape)}); "
                                  "quantize the original float model instead")
    return "checked: the rewritten model gives the original's outputs under LiteRT"


def _sqnr_db(reference: np.ndarray, other: np.ndarray) -> float:
    signal = float(np.sum(np.square(reference, dtype=np.float64)))
    noise = float(np.sum(np.square(reference.astype(np.float64) - other)))
    return float("inf") if noise == 0 else 10 * np.log10(max(signal, 1e-30) / noise)


def _check_close(old: list[np.ndarray], new: list[np.ndarray], floor_db: float,
                 within: str) -> str:
    worst = min((_sqnr_db(a, b) for a, b in zip(old, new) if a.shape == b.shape),
                default=float("-inf"))
    if worst < floor_db or any(a.shape != b.shape for a, b in zip(old, new)):
        raise ConversionError(f"the float graph edgeopt made of the .tflite departs from it "
                              f"(output SQNR {worst:.1f} dB, under {floor_db:.0f} dB); "
                              "quantize the original float model instead")
    return (f"checked: the float graph agrees with the original under LiteRT {within} "
            f"(output SQNR {worst:.1f} dB on a random input)")


def _check_shapes(original: bytes, outputs: list[np.ndarray]) -> str:
    model = _schema().ModelT.InitFromObj(_schema().Model.GetRootAs(original, 0))
    subgraph = model.subgraphs[0]
    declared = [tuple(int(d) for d in subgraph.tensors[i].shape) for i in subgraph.outputs]
    got = [tuple(o.shape) for o in outputs]
    if declared != got:
        raise ConversionError(f"the float graph edgeopt made of the .tflite gives output "
                              f"shapes {got}, the file declares {declared}")
    return ("checked: output shapes match the file's (LiteRT cannot run the original's "
            "custom op, so its values could not be compared)")


# --------------------------------------------------------------------------- quantized input

_WEIGHT_OPS = {"CONV_2D": (0, 1), "DEPTHWISE_CONV_2D": (0, 1), "FULLY_CONNECTED": (0, 1),
               "BATCH_MATMUL": (0, 1), "TRANSPOSE_CONV": (2, 1), "CONV_3D": (0, 1)}
_BITS = {"int4": 4, "int8": 8, "uint8": 8, "int16": 16}


def given_scheme(graph: Graph) -> str | None:
    """The scheme an already integer model was quantized to ('w8a8', 'w8a16'...), read from
    its weight ops' weights and activations; None for a float model."""
    found = set()
    for op in graph.ops:
        slots = _WEIGHT_OPS.get(op.op)
        if slots is None or len(op.inputs) <= max(slots) or min(op.inputs[s] for s in slots) < 0:
            continue
        activation, weight = (graph.tensor(op.inputs[s]) for s in slots)
        if weight.dtype in _BITS and weight.quantization is not None \
                and activation.dtype in _BITS:
            found.add(f"w{_BITS[weight.dtype]}a{_BITS[activation.dtype]}")
    return "+".join(sorted(found)) or None
