"""Seeded mutators for the loader fuzz suite: `.tflite`, `.onnx`, `.keras` and `.npz`.

Every mutator is ``f(data: bytes, rng: random.Random) -> bytes`` and is deterministic for a
given ``rng`` state, so a failure found by a long run can be replayed from its seed.

    >>> mutant = mutate("tflite", seed_bytes, random.Random(7))     # doctest: +SKIP
    >>> mutant.mutation, len(mutant.data)                           # doctest: +SKIP
    ('tflite.vector_length', 18532)

Structure-aware mutators know each format's layout:

* flatbuffers: a walker finds the uoffset fields, vtables, vector lengths and the scalar
  fields that index other tables (tensor buffer, opcode index, op inputs, shapes, dtypes)
  and overwrites one of them with an edge value; object-API mutations re-pack a model whose
  structure is sound but whose meaning is not (dtype swaps, huge shapes, op cycles).
* ONNX: protobuf-level edits (huge or negative dims, dtype swaps, node cycles, dangling
  inputs, truncated raw data, huge ConstantOfShape, external data outside the folder).
* `.keras`: zip members truncated or dropped, `config.json` values swapped, weights files
  replaced by garbage, a wrong model's weights, or an HDF5 dataset declaring a huge shape.
* `.npz`: wrong dtypes, pickled object arrays, shape mismatches, bad labels, NaN, `.npy`
  headers that declare huge shapes or are garbled.

Plus format-blind byte mutations (bit flips, truncation, interesting 32-bit values).
"""

from __future__ import annotations

import io
import json
import random
import struct
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Mutator = Callable[[bytes, random.Random], bytes]

INT32_EDGES = (0, 1, -1, 2, 0x7FFFFFFF, -0x80000000, 0x7FFFFFFE, 0xFFFF, 0x10000, 0x40000000)


@dataclass(frozen=True)
class Mutant:
    """One fuzz input: the bytes and the name of the mutation that made them."""

    data: bytes
    mutation: str


# --------------------------------------------------------------------------
# Format-blind byte mutations
# --------------------------------------------------------------------------


def bit_flips(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4, 16))):
        pos = rng.randrange(len(out))
        out[pos] ^= 1 << rng.randrange(8)
    return bytes(out)


def truncate(data: bytes, rng: random.Random) -> bytes:
    cut = rng.choice((rng.randrange(len(data)), len(data) // 2, len(data) - 1, 16, 9))
    return data[:max(0, min(cut, len(data) - 1))]


def interesting_int32(data: bytes, rng: random.Random) -> bytes:
    """An aligned 32-bit word set to an edge value: hits offsets and lengths by chance."""
    out = bytearray(data)
    pos = rng.randrange(0, max(1, len(out) - 4)) & ~3
    struct.pack_into("<I", out, pos, _edge_int32(rng, len(data)))
    return bytes(out)


def chunk_ops(data: bytes, rng: random.Random) -> bytes:
    """Delete, duplicate or overwrite a chunk with random bytes."""
    a = rng.randrange(len(data))
    b = min(len(data), a + rng.choice((1, 4, 16, 64, 512)))
    kind = rng.randrange(3)
    if kind == 0:
        return data[:a] + data[b:]
    if kind == 1:
        return data[:b] + data[a:b] + data[b:]
    return data[:a] + rng.randbytes(b - a) + data[b:]


def append_junk(data: bytes, rng: random.Random) -> bytes:
    return data + rng.randbytes(rng.choice((1, 7, 100, 4096)))


BYTE_MUTATORS: dict[str, Mutator] = {
    "bit_flips": bit_flips, "truncate": truncate, "interesting_int32": interesting_int32,
    "chunk_ops": chunk_ops, "append_junk": append_junk,
}


def _edge_int32(rng: random.Random, size: int) -> int:
    value = rng.choice((*INT32_EDGES, size, size + 4, size - 4, size * 2, rng.getrandbits(32)))
    return value & 0xFFFFFFFF


# --------------------------------------------------------------------------
# Flatbuffers (.tflite)
# --------------------------------------------------------------------------

# Slots of the TFLite schema tables the walker follows (schema.fbs field order).
# kind: 'tables' vector of tables, 'table' one table, 'ints' vector of int32,
# 'bytes' vector of uint8, 'string', or a struct format for a scalar ('<I', '<b', ...).
_TFLITE_SLOTS: dict[str, dict[int, tuple[str, str | None]]] = {
    "Model": {0: ("<I", None), 1: ("tables", "OperatorCode"), 2: ("tables", "SubGraph"),
              3: ("string", None), 4: ("tables", "Buffer"), 5: ("ints", None),
              6: ("tables", "Metadata"), 7: ("tables", "SignatureDef")},
    "SubGraph": {0: ("tables", "Tensor"), 1: ("ints", "io"), 2: ("ints", "io"),
                 3: ("tables", "Operator"), 4: ("string", None)},
    "Tensor": {0: ("ints", "shape"), 1: ("<b", "dtype"), 2: ("<I", "buffer"),
               3: ("string", None), 4: ("table", "Quantization"), 5: ("<B", None),
               7: ("ints", "shape")},
    "Operator": {0: ("<I", "opcode"), 1: ("ints", "io"), 2: ("ints", "io"),
                 3: ("<B", "options_type"), 4: ("table", "Options"), 5: ("bytes", None),
                 8: ("ints", "io")},
    "OperatorCode": {0: ("<b", "builtin"), 1: ("string", None), 2: ("<i", None),
                     3: ("<i", "builtin")},
    "Buffer": {0: ("bytes", "data"), 1: ("<Q", "buffer_offset"), 2: ("<Q", "buffer_size")},
    "Quantization": {0: ("floats", None), 1: ("floats", None), 2: ("floats", "scale"),
                     3: ("longs", None), 6: ("<i", "axis")},
    "Metadata": {0: ("string", None), 1: ("<I", "buffer")},
    "SignatureDef": {0: ("tables", "TensorMap"), 1: ("tables", "TensorMap"),
                     2: ("string", None), 4: ("<I", "subgraph")},
    "TensorMap": {0: ("string", None), 1: ("<I", "tensor")},
    "Options": {},
}


@dataclass(frozen=True)
class Site:
    """A place in the flatbuffer a mutation can hit: byte position, width, what it is."""

    kind: str
    pos: int
    width: int
    role: str | None = None


class _Walker:
    """Collects `Site`s by following the TFLite schema from the root table."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.sites: list[Site] = []
        self.seen: set[int] = set()

    def u32(self, pos: int) -> int:
        return struct.unpack_from("<I", self.buf, pos)[0]

    def ok(self, pos: int, width: int = 4) -> bool:
        return 0 <= pos and pos + width <= len(self.buf)

    def walk(self) -> list[Site]:
        self.sites.append(Site("root_uoffset", 0, 4))
        self.table(self.u32(0), "Model")
        return self.sites

    def table(self, pos: int, name: str) -> None:
        if pos in self.seen or not self.ok(pos) or len(self.seen) > 5000:
            return
        self.seen.add(pos)
        self.sites.append(Site("soffset", pos, 4, name))
        vtable = pos - struct.unpack_from("<i", self.buf, pos)[0]
        if not self.ok(vtable, 4):
            return
        vt_size = struct.unpack_from("<H", self.buf, vtable)[0]
        self.sites += [Site("vtable_size", vtable, 2, name), Site("vtable_size", vtable + 2, 2)]
        for slot, (kind, role) in _TFLITE_SLOTS.get(name, {}).items():
            entry = vtable + 4 + 2 * slot
            if 4 + 2 * slot >= vt_size or not self.ok(entry, 2):
                continue
            self.sites.append(Site("vtable_entry", entry, 2, name))
            field_offset = struct.unpack_from("<H", self.buf, entry)[0]
            if field_offset:
                self.field(pos + field_offset, kind, role)

    def field(self, pos: int, kind: str, role: str | None) -> None:
        if kind.startswith("<"):
            width = struct.calcsize(kind)
            if self.ok(pos, width):
                self.sites.append(Site("scalar", pos, width, role))
            return
        if not self.ok(pos):
            return
        self.sites.append(Site("uoffset", pos, 4, kind))
        target = pos + self.u32(pos)
        if not self.ok(target):
            return
        if kind == "table":
            self.table(target, role or "")
            return
        self.sites.append(Site("vector_length", target, 4, role or kind))
        count = self.u32(target)
        width = {"ints": 4, "floats": 4, "longs": 8, "tables": 4}.get(kind, 1)
        for i in range(min(count, 64)):
            elem = target + 4 + width * i
            if not self.ok(elem, width):
                break
            if kind == "tables":
                self.sites.append(Site("uoffset", elem, 4, role))
                self.table(elem + self.u32(elem), role or "")
            elif kind in ("ints", "longs") and role:
                self.sites.append(Site("element", elem, width, role))


def flatbuffer_sites(buf: bytes) -> list[Site]:
    """Every site the walker reaches in a TFLite flatbuffer (a sound file gives hundreds)."""
    return _Walker(buf).walk()


def _overwrite(buf: bytes, site: Site, value: int) -> bytes:
    fmt = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[site.width]
    out = bytearray(buf)
    struct.pack_into(fmt, out, site.pos, value & ((1 << (8 * site.width)) - 1))
    return bytes(out)


def _pick(buf: bytes, rng: random.Random, kinds: tuple[str, ...],
          roles: tuple[str | None, ...] | None = None) -> Site | None:
    sites = [s for s in flatbuffer_sites(buf) if s.kind in kinds
             and (roles is None or s.role in roles)]
    return rng.choice(sites) if sites else None


def _site_mutator(kinds: tuple[str, ...], roles=None, values=None) -> Mutator:
    def mutate_site(buf: bytes, rng: random.Random) -> bytes:
        site = _pick(buf, rng, kinds, roles)
        if site is None:
            return bit_flips(buf, rng)
        old = int.from_bytes(buf[site.pos:site.pos + site.width], "little")
        value = rng.choice(values) if values else _edge_int32(rng, len(buf))
        if rng.random() < 0.2:  # small relative shift: lands inside the file, misaligned
            value = old + rng.choice((-8, -4, -2, -1, 1, 2, 4, 8))
        mask = (1 << (8 * site.width)) - 1
        return _overwrite(buf, site, value if value & mask != old else old ^ 1)

    return mutate_site


def _shape_values() -> tuple[int, ...]:
    return (0, -1, -2, -0x80000000, 0x7FFFFFFF, 1 << 20, 1 << 16, 3, 1000003)


def _tflite_object(buf: bytes):
    from ai_edge_litert import schema_py_generated as schema

    return schema.ModelT.InitFromPackedBuf(buf, 0)


def _tflite_pack(model) -> bytes:
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _semantic(edit: Callable[[object, random.Random], None]) -> Mutator:
    """Unpack, change meaning through the object API, re-pack: a structurally sound file."""
    def mutate_model(buf: bytes, rng: random.Random) -> bytes:
        model = _tflite_object(buf)
        edit(model, rng)
        return _tflite_pack(model)

    mutate_model.__name__ = edit.__name__
    return mutate_model


def _main_ops(model) -> list:
    return [op for op in model.subgraphs[0].operators or []]


def _edit_dtype_swap(model, rng: random.Random) -> None:
    tensor = rng.choice(model.subgraphs[0].tensors)
    tensor.type = rng.choice((0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 15, 16, 17, 18, 127, -1))


def _edit_huge_shape(model, rng: random.Random) -> None:
    tensor = rng.choice(model.subgraphs[0].tensors)
    shape = list(tensor.shape if tensor.shape is not None else [1])
    shape[rng.randrange(len(shape))] = rng.choice((1 << 20, 1 << 30, 0x7FFFFFFF, 46341))
    tensor.shape = shape


def _edit_negative_shape(model, rng: random.Random) -> None:
    tensor = rng.choice(model.subgraphs[0].tensors)
    shape = list(tensor.shape if tensor.shape is not None else [1])
    shape[rng.randrange(len(shape))] = rng.choice((-1, -5, 0))
    tensor.shape = shape


def _edit_op_cycle(model, rng: random.Random) -> None:
    """An op reads its own output, or a later op's output feeds an earlier op."""
    ops = _main_ops(model)
    first = rng.choice(ops)
    if rng.random() < 0.5 or len(ops) < 2:
        first.inputs = [first.outputs[0], *list(first.inputs)[1:]]
        return
    i, j = sorted(rng.sample(range(len(ops)), 2))
    ops[i].inputs = [ops[j].outputs[0], *list(ops[i].inputs)[1:]]


def _edit_buffer_mismatch(model, rng: random.Random) -> None:
    """A constant's buffer swapped for another's, or its data cut short."""
    with_data = [i for i, b in enumerate(model.buffers) if b.data is not None and len(b.data)]
    if not with_data:
        return
    index = rng.choice(with_data)
    data = model.buffers[index].data
    model.buffers[index].data = data[:rng.randrange(len(data))] if rng.random() < 0.5 else \
        np.concatenate([data, data])


def _edit_opcode_swap(model, rng: random.Random) -> None:
    code = rng.choice(model.operatorCodes)
    code.builtinCode = rng.choice((0, 3, 4, 9, 22, 25, 32, 97, 126, 150, 200, 1000))
    code.deprecatedBuiltinCode = min(code.builtinCode, 127)


def _edit_io_index(model, rng: random.Random) -> None:
    op = rng.choice(_main_ops(model))
    inputs = list(op.inputs)
    inputs[rng.randrange(len(inputs))] = rng.choice((-1, -2, len(model.subgraphs[0].tensors),
                                                     10 ** 6))
    op.inputs = inputs


def _edit_subgraph_io(model, rng: random.Random) -> None:
    sub = model.subgraphs[0]
    sub.inputs = rng.choice(([], [len(sub.tensors)], [0, 0], list(sub.outputs)))


def _edit_options_swap(model, rng: random.Random) -> None:
    """Another op's builtin options on an op (schema-valid, meaningless)."""
    ops = _main_ops(model)
    a, b = rng.choice(ops), rng.choice(ops)
    a.builtinOptionsType, a.builtinOptions = b.builtinOptionsType, b.builtinOptions
    if rng.random() < 0.5:
        a.builtinOptionsType, a.builtinOptions = 0, None


def _edit_quantization(model, rng: random.Random) -> None:
    from ai_edge_litert import schema_py_generated as schema

    tensor = rng.choice(model.subgraphs[0].tensors)
    q = schema.QuantizationParametersT()
    q.scale = rng.choice(([0.0], [float("nan")], [-1.0], [1.0] * 3, [1e-45]))
    q.zeroPoint = rng.choice(([0], [300], [-1000], []))
    q.quantizedDimension = rng.choice((0, 3, 7, -1))
    tensor.quantization = q


def _edit_drop(model, rng: random.Random) -> None:
    """Remove an operator code, a buffer or a tensor that others still refer to."""
    target = rng.choice(("operatorCodes", "buffers", "tensors"))
    items = model.subgraphs[0].tensors if target == "tensors" else getattr(model, target)
    if len(items) > 1:
        del items[rng.randrange(len(items))]


def op_sweep(seed: bytes):
    """(label, model) for every builtin operator in place of the seed's last op, with 0, 1
    and 2 inputs and no options: finds the kernels that crash instead of failing to prepare.
    """
    from ai_edge_litert import schema_py_generated as schema

    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    for code, name in sorted(names.items()):
        for count in (0, 1, 2):
            model = _tflite_object(seed)
            op = model.subgraphs[0].operators[-1]
            opcode = schema.OperatorCodeT()
            opcode.builtinCode, opcode.deprecatedBuiltinCode = code, min(code, 127)
            opcode.version = 1
            model.operatorCodes.append(opcode)
            first = int(op.inputs[0])
            op.opcodeIndex, op.inputs = len(model.operatorCodes) - 1, [first] * count
            op.builtinOptionsType, op.builtinOptions = 0, None
            yield f"{name}/{count}", _tflite_pack(model)


TFLITE_MUTATORS: dict[str, Mutator] = {
    "uoffset": _site_mutator(("uoffset", "root_uoffset")),
    "vtable": _site_mutator(("soffset", "vtable_size", "vtable_entry")),
    "vector_length": _site_mutator(("vector_length",)),
    "buffer_size": _site_mutator(("vector_length", "scalar"),
                                 ("data", "buffer_offset", "buffer_size")),
    "index_field": _site_mutator(("scalar", "element"),
                                 ("buffer", "opcode", "io", "tensor", "subgraph")),
    "shape_element": _site_mutator(("element",), ("shape",), _shape_values()),
    "dtype_byte": _site_mutator(("scalar",), ("dtype", "builtin", "options_type"),
                                (0, 1, 2, 9, 17, 18, 100, 127, 128, 255)),
    "dtype_swap": _semantic(_edit_dtype_swap),
    "huge_shape": _semantic(_edit_huge_shape),
    "negative_shape": _semantic(_edit_negative_shape),
    "op_cycle": _semantic(_edit_op_cycle),
    "buffer_mismatch": _semantic(_edit_buffer_mismatch),
    "opcode_swap": _semantic(_edit_opcode_swap),
    "io_index": _semantic(_edit_io_index),
    "subgraph_io": _semantic(_edit_subgraph_io),
    "options_swap": _semantic(_edit_options_swap),
    "quantization": _semantic(_edit_quantization),
    "drop": _semantic(_edit_drop),
}


# --------------------------------------------------------------------------
# ONNX
# --------------------------------------------------------------------------


def _onnx_edit(edit: Callable[[object, random.Random], None]) -> Mutator:
    def mutate_model(data: bytes, rng: random.Random) -> bytes:
        import onnx

        model = onnx.ModelProto()
        model.ParseFromString(data)
        edit(model, rng)
        return model.SerializeToString()

    mutate_model.__name__ = edit.__name__
    return mutate_model


def _value_infos(model) -> list:
    g = model.graph
    return [*g.input, *g.output, *g.value_info]


def _onnx_dims(model, rng: random.Random, values: tuple[int, ...]) -> None:
    candidates = [vi.type.tensor_type.shape for vi in _value_infos(model)
                  if vi.type.tensor_type.shape.dim]
    if rng.random() < 0.5 and model.graph.initializer:
        tensor = rng.choice(model.graph.initializer)
        if tensor.dims:
            tensor.dims[rng.randrange(len(tensor.dims))] = rng.choice(values)
            return
    if candidates:
        dim = rng.choice(rng.choice(candidates).dim)
        dim.dim_value = rng.choice(values)


def _edit_onnx_huge_dims(model, rng: random.Random) -> None:
    _onnx_dims(model, rng, (1 << 31, 1 << 40, (1 << 63) - 1, 1 << 20, 65537))


def _edit_onnx_negative_dims(model, rng: random.Random) -> None:
    _onnx_dims(model, rng, (-1, -7, -(1 << 62), 0))


def _edit_onnx_dtype_swap(model, rng: random.Random) -> None:
    types = (0, 2, 3, 6, 7, 8, 9, 10, 11, 14, 16, 17, 21, 23, 99)
    if rng.random() < 0.5 and model.graph.initializer:
        rng.choice(model.graph.initializer).data_type = rng.choice(types)
    else:
        rng.choice(_value_infos(model)).type.tensor_type.elem_type = rng.choice(types)


def _edit_onnx_cycle(model, rng: random.Random) -> None:
    """A node reads its own output, or an early node reads a later node's output."""
    nodes = model.graph.node
    i = rng.randrange(len(nodes))
    j = rng.randrange(i, len(nodes))
    if nodes[j].output and nodes[i].input:
        nodes[i].input[0] = nodes[j].output[0]


def _edit_onnx_dangling(model, rng: random.Random) -> None:
    node = rng.choice(model.graph.node)
    if node.input:
        node.input[rng.randrange(len(node.input))] = rng.choice(("nowhere", "", "input "))


def _edit_onnx_drop(model, rng: random.Random) -> None:
    g = model.graph
    field = rng.choice(("node", "initializer", "input", "output", "opset_import"))
    items = getattr(model if field == "opset_import" else g, field)
    if len(items):
        del items[rng.randrange(len(items))]


def _edit_onnx_op_type(model, rng: random.Random) -> None:
    node = rng.choice(model.graph.node)
    node.op_type = rng.choice(("Conv", "Gemm", "Reshape", "Loop", "If", "NoSuchOp",
                               "ConstantOfShape", "Softmax", ""))
    if rng.random() < 0.3:
        node.domain = rng.choice(("com.microsoft", "ai.onnx.ml", "evil"))


def _edit_onnx_attribute(model, rng: random.Random) -> None:
    nodes = [n for n in model.graph.node if n.attribute]
    if not nodes:
        return
    attr = rng.choice(rng.choice(nodes).attribute)
    if attr.ints:
        attr.ints[rng.randrange(len(attr.ints))] = rng.choice((-1, 0, 1 << 40, -(1 << 62)))
    else:
        attr.i = rng.choice((-1, 0, 1 << 40, 7))
        attr.f = rng.choice((float("nan"), float("inf"), -1.0))


def _edit_onnx_versions(model, rng: random.Random) -> None:
    if rng.random() < 0.5:
        model.ir_version = rng.choice((1, 2, 3, 11, 99, 1 << 40))
    elif model.opset_import:
        model.opset_import[0].version = rng.choice((0, 1, 5, 30, 1000, -1))


def _edit_onnx_raw_data(model, rng: random.Random) -> None:
    inits = [t for t in model.graph.initializer if t.raw_data]
    if inits:
        tensor = rng.choice(inits)
        tensor.raw_data = tensor.raw_data[:rng.randrange(len(tensor.raw_data))]


def _edit_onnx_external(model, rng: random.Random) -> None:
    """Initializer data said to live in another file: outside the folder, missing, huge."""
    from onnx import TensorProto

    tensor = rng.choice(model.graph.initializer)
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    location = rng.choice(("../../../../etc/passwd", "/etc/passwd", "missing.bin", "."))
    for key, value in (("location", location), ("offset", str(rng.choice((0, 1 << 40)))),
                       ("length", str(rng.choice((16, 1 << 40))))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def _edit_onnx_constant_of_shape(model, rng: random.Random) -> None:
    """A huge tensor made at run time: ConstantOfShape feeding an extra graph output."""
    from onnx import TensorProto, helper, numpy_helper

    dims = rng.choice(([1 << 16, 1 << 16], [1 << 31, 4], [1 << 40], [-1, 8], [60000, 60000]))
    shape = numpy_helper.from_array(np.array(dims, np.int64), "fuzz_shape")
    model.graph.initializer.append(shape)
    model.graph.node.append(helper.make_node("ConstantOfShape", ["fuzz_shape"], ["fuzz_big"]))
    declared = [d if d > 0 else "n" for d in dims]
    model.graph.output.append(helper.make_tensor_value_info("fuzz_big", TensorProto.FLOAT,
                                                            declared))


def _edit_onnx_loop(model, rng: random.Random) -> None:
    """A Loop whose trip count never runs out, its output made a graph output: a model
    that runs forever. Its condition is a constant (converters fold the whole Loop) or
    computed from the model's input (only a runtime meets it)."""
    from onnx import TensorProto, helper, numpy_helper

    cond = "fuzz_cond"
    if rng.random() < 0.5:
        cond = "fuzz_cond_live"
        model.graph.node.extend([
            helper.make_node("ReduceMax", [model.graph.input[0].name], ["fuzz_max"],
                             keepdims=0),
            helper.make_node("IsNaN", ["fuzz_max"], ["fuzz_nan"]),
            helper.make_node("Not", ["fuzz_nan"], [cond])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["carried_in"], ["carried_out"])],
        "fuzz_body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("carried_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("carried_out", TensorProto.FLOAT, [1])])
    trips = rng.choice((1 << 62, 1 << 40, 10 ** 9))
    model.graph.initializer.extend([
        numpy_helper.from_array(np.array(trips, np.int64), "fuzz_trips"),
        numpy_helper.from_array(np.array(True), "fuzz_cond"),
        numpy_helper.from_array(np.zeros(1, np.float32), "fuzz_init")])
    model.graph.node.append(helper.make_node("Loop", ["fuzz_trips", cond, "fuzz_init"],
                                             ["fuzz_loop"], body=body))
    model.graph.output.append(helper.make_tensor_value_info("fuzz_loop", TensorProto.FLOAT,
                                                            [1]))


ONNX_MUTATORS: dict[str, Mutator] = {
    "huge_dims": _onnx_edit(_edit_onnx_huge_dims),
    "negative_dims": _onnx_edit(_edit_onnx_negative_dims),
    "dtype_swap": _onnx_edit(_edit_onnx_dtype_swap),
    "node_cycle": _onnx_edit(_edit_onnx_cycle),
    "dangling_input": _onnx_edit(_edit_onnx_dangling),
    "drop": _onnx_edit(_edit_onnx_drop),
    "op_type": _onnx_edit(_edit_onnx_op_type),
    "attribute": _onnx_edit(_edit_onnx_attribute),
    "versions": _onnx_edit(_edit_onnx_versions),
    "raw_data": _onnx_edit(_edit_onnx_raw_data),
    "external_data": _onnx_edit(_edit_onnx_external),
    "constant_of_shape": _onnx_edit(_edit_onnx_constant_of_shape),
    "endless_loop": _onnx_edit(_edit_onnx_loop),
}


# --------------------------------------------------------------------------
# Zip archives (.keras, .npz)
# --------------------------------------------------------------------------


def _members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _zip(members: dict[str, bytes], compress: bool = False) -> bytes:
    buffer = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def _member_edit(pick: Callable[[str], bool], edit: Mutator) -> Mutator:
    """Apply a byte-level `edit` to one member, then re-zip with correct CRCs."""
    def mutate_member(data: bytes, rng: random.Random) -> bytes:
        members = _members(data)
        names = [n for n in members if pick(n)] or list(members)
        name = rng.choice(names)
        members[name] = edit(members[name], rng) if members[name] else b"\x00"
        return _zip(members)

    return mutate_member


def _drop_member(data: bytes, rng: random.Random) -> bytes:
    members = _members(data)
    del members[rng.choice(list(members))]
    return _zip(members)


def _stored_bytes_corrupt(data: bytes, rng: random.Random) -> bytes:
    """Flip bytes inside a stored member: the CRC no longer matches."""
    out = bytearray(_zip(_members(data)))
    for _ in range(rng.choice((1, 3))):
        out[rng.randrange(30, max(31, len(out) - 100))] ^= 0xFF
    return bytes(out)


# -- .keras --------------------------------------------------------------------------


def _json_leaves(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _json_leaves(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _json_leaves(value, (*path, i))
    yield path


def _json_set(root, path, value) -> None:
    node = root
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _json_drop(root, path) -> None:
    node = root
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]


_JSON_VALUES = (None, -1, 0, 1 << 40, -(1 << 40), 1e308, "", "float128", "Lambda",
                "os.system", [], {}, [None], [1 << 31, 1 << 31, 1 << 31], True, "x" * 300)


def _keras_config_value(data: bytes, rng: random.Random) -> bytes:
    """A `config.json` value replaced, or a key deleted, keeping the JSON valid."""
    root = json.loads(data)
    paths = [p for p in _json_leaves(root) if p]
    for _ in range(rng.choice((1, 1, 3))):
        path = rng.choice(paths)
        try:
            if rng.random() < 0.25:
                _json_drop(root, path)
            else:
                _json_set(root, path, rng.choice(_JSON_VALUES))
        except (KeyError, IndexError, TypeError):
            continue
        paths = [p for p in _json_leaves(root) if p]
    return json.dumps(root).encode()


def _keras_config_targeted(data: bytes, rng: random.Random) -> bytes:
    """Edits a Keras model reader cares about: class names, shapes, dtypes, graph links."""
    root = json.loads(data)
    layers = root.get("config", {}).get("layers", [])
    if not layers:
        return _keras_config_value(data, rng)
    layer = rng.choice(layers)
    kind = rng.randrange(5)
    if kind == 0:
        layer["class_name"] = rng.choice(("Lambda", "NoSuchLayer", "TFOpLambda", "Functional"))
        layer["module"] = rng.choice(("builtins", "os", "keras.layers", "subprocess"))
    elif kind == 1:
        cfg = layer.setdefault("config", {})
        cfg["batch_shape"] = rng.choice(([None, 1 << 31, 1 << 31, 3], [None, -5, 16, 3],
                                         [None], "shape", [None, 16, 16, 3, 3, 3]))
    elif kind == 2:
        layer.setdefault("config", {})["dtype"] = rng.choice(("float128", "string",
                                                              {"class_name": "Nope"}, 5))
    elif kind == 3:  # graph cycle: a layer fed by itself or by the last layer
        target = rng.choice((layer["name"] if "name" in layer else "x", layers[-1].get("name")))
        for node in layer.get("inbound_nodes", []):
            for arg in node.get("args", []):
                if isinstance(arg, dict) and "config" in arg:
                    arg["config"]["keras_history"] = [target, 0, 0]
    else:
        cfg = layer.setdefault("config", {})
        for key in ("filters", "units", "kernel_size", "strides", "pool_size"):
            if key in cfg:
                cfg[key] = rng.choice((0, -1, 1 << 31, [0, 0], [1 << 20, 1 << 20]))
    return json.dumps(root).encode()


def _garbage_json(data: bytes, rng: random.Random) -> bytes:
    return rng.choice((b"", b"{", b"[]", b"null", b"\xff\xfe", data[: len(data) // 2],
                       b'{"class_name": "Sequential"}', b"1" * 5000))


def _keras_weights_garbage(data: bytes, rng: random.Random) -> bytes:
    return rng.choice((rng.randbytes(len(data)), data[: rng.randrange(len(data))], b"",
                       b"\x89HDF\r\n\x1a\n" + rng.randbytes(200)))


def _h5_edit(data: bytes, rng: random.Random) -> bytes:
    """A weights file whose datasets have other shapes/dtypes, or declare a huge shape."""
    import h5py

    buffer = io.BytesIO(data)
    with h5py.File(buffer, "r+") as f:
        datasets: list[str] = []
        f.visititems(lambda name, obj: datasets.append(name)
                     if isinstance(obj, h5py.Dataset) else None)
        if not datasets:
            return data
        name = rng.choice(datasets)
        old = f[name]
        shape, dtype = old.shape, old.dtype
        del f[name]
        kind = rng.randrange(3)
        if kind == 0:  # declared huge, chunked, never written: tiny on disk
            f.create_dataset(name, shape=(1 << 20, 1 << 20), dtype="f4", chunks=(1, 1024))
        elif kind == 1:
            f.create_dataset(name, data=np.zeros(tuple(d + 1 for d in shape) or (2,), "f4"))
        else:
            f.create_dataset(name, data=np.zeros(shape, rng.choice(("S4", "i8", "c8", "u1")))
                             if dtype.kind == "f" else np.zeros(shape, "f4"))
    return buffer.getvalue()


def _keras_zip_bomb(data: bytes, rng: random.Random) -> bytes:
    """`config.json` padded with whitespace: small compressed, large once read."""
    members = _members(data)
    members["config.json"] = members["config.json"] + b" " * (rng.choice((16, 128)) << 20)
    return _zip(members, compress=True)


def _keras_extra_member(data: bytes, rng: random.Random) -> bytes:
    members = _members(data)
    name = rng.choice(("../evil.txt", "/abs.txt", "assets/../../x", "config.json/"))
    members[name] = b"x"
    return _zip(members)


KERAS_MUTATORS: dict[str, Mutator] = {
    "zip_bytes": lambda d, r: BYTE_MUTATORS[r.choice(list(BYTE_MUTATORS))](d, r),
    "stored_crc": _stored_bytes_corrupt,
    "drop_member": _drop_member,
    "config_value": _member_edit(lambda n: n == "config.json", _keras_config_value),
    "config_targeted": _member_edit(lambda n: n == "config.json", _keras_config_targeted),
    "config_garbage": _member_edit(lambda n: n == "config.json", _garbage_json),
    "metadata_garbage": _member_edit(lambda n: n == "metadata.json", _garbage_json),
    "weights_garbage": _member_edit(lambda n: n.endswith(".h5"), _keras_weights_garbage),
    "weights_h5": _member_edit(lambda n: n.endswith(".h5"), _h5_edit),
    "weights_bytes": _member_edit(lambda n: n.endswith(".h5"), bit_flips),
    "zip_bomb": _keras_zip_bomb,
    "extra_member": _keras_extra_member,
}


# -- .npz ----------------------------------------------------------------------------


def _npz(arrays: dict[str, np.ndarray], allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    members = {}
    for name, array in arrays.items():
        one = io.BytesIO()
        np.lib.format.write_array(one, np.asanyarray(array), allow_pickle=allow_pickle)
        members[f"{name}.npy"] = one.getvalue()
    buffer.write(_zip(members))
    return buffer.getvalue()


def _arrays(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


def _npz_edit(edit: Callable[[dict, random.Random], bool | None]) -> Mutator:
    """Edit the arrays dict; `edit` returns True when the result needs pickling."""
    def mutate_arrays(data: bytes, rng: random.Random) -> bytes:
        arrays = _arrays(data)
        pickle = bool(edit(arrays, rng))
        return _npz(arrays, allow_pickle=pickle)

    mutate_arrays.__name__ = edit.__name__
    return mutate_arrays


def _data_key(arrays: dict, rng: random.Random) -> str:
    keys = [k for k in arrays if k != "labels"] or list(arrays)
    return rng.choice(keys)


def _edit_npz_dtype(arrays: dict, rng: random.Random) -> None:
    key = rng.choice(list(arrays))
    dtype = rng.choice(("int8", "uint8", "int64", "float16", "float64", "complex64", "bool",
                        "U3", "S2", "datetime64[s]", "V4"))
    with warnings.catch_warnings():  # NaN to int, complex to real: the point, not a warning
        warnings.simplefilter("ignore")
        arrays[key] = arrays[key].astype(dtype) if dtype != "V4" else \
            np.zeros(arrays[key].shape, dtype)


def _edit_npz_object(arrays: dict, rng: random.Random) -> bool:
    """An object array: saving it pickles, and loading it must be refused."""
    key = rng.choice(list(arrays))
    array = np.empty(len(arrays[key]), dtype=object)
    for i in range(len(array)):
        array[i] = arrays[key][i]
    arrays[key] = array
    return True


def _edit_npz_shape(arrays: dict, rng: random.Random) -> None:
    key = _data_key(arrays, rng)
    a = arrays[key]
    choice = rng.randrange(6)
    if choice == 0:
        arrays[key] = a[:0]
    elif choice == 1:
        arrays[key] = a.reshape(len(a), -1)
    elif choice == 2:
        arrays[key] = a[..., :1] if a.ndim > 1 else a[:1]
    elif choice == 3:
        arrays[key] = a[None]
    elif choice == 4:
        arrays[key] = np.float32(1.0)
    else:
        arrays[key] = np.concatenate([a, a], axis=-1)


def _edit_npz_labels(arrays: dict, rng: random.Random) -> None:
    count = len(next(iter(arrays.values())))
    arrays["labels"] = rng.choice((np.zeros(count, np.float32), np.zeros((count, 2), np.int64),
                                   np.zeros(count + 3, np.int64), np.full(count, -5, np.int64),
                                   np.full(count, 1 << 62, np.int64), np.zeros(0, np.int64)))


def _edit_npz_values(arrays: dict, rng: random.Random) -> None:
    key = _data_key(arrays, rng)
    a = np.array(arrays[key], copy=True)
    if a.dtype.kind == "f" and a.size:
        a.reshape(-1)[rng.randrange(a.size)] = rng.choice((np.nan, np.inf, -np.inf, 1e38))
    arrays[key] = a


def _edit_npz_keys(arrays: dict, rng: random.Random) -> None:
    key = rng.choice(list(arrays))
    new = rng.choice(("", "wrong_name", "labels", "a/b", key + "_x"))
    arrays[new] = arrays.pop(key)
    if rng.random() < 0.5:
        arrays["extra"] = np.zeros(3, np.float32)


def _npy_header_edit(data: bytes, rng: random.Random) -> bytes:
    """Rewrite one `.npy` header: a huge declared shape, a bad dtype, a garbled dict."""
    members = _members(data)
    name = rng.choice(list(members))
    blob = members[name]
    header_len = struct.unpack_from("<H", blob, 8)[0]
    header = blob[10:10 + header_len].decode("latin1")
    body = blob[10 + header_len:]
    new = rng.choice((
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 16, 16, 3), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4000000000,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 16), }",
        "{'descr': '|O', 'fortran_order': False, 'shape': (4,), }",
        "{'descr': '<f4', 'fortran_order': True, 'shape': (64, 16, 16, 3), }",
        "{'descr': 'bogus', 'fortran_order': False, 'shape': (2,), }",
        "{'descr': [('a', '<f4'), ('b', '<i8')], 'fortran_order': False, 'shape': (64,), }",
        "{'descr': '<f4', 'shape': (2,)}", "__import__('os')", "{" * 500,
        header.replace("'shape': (", "'shape': (0, "),
    ))
    padded = new + " " * ((64 - (10 + len(new) + 1) % 64) % 64) + "\n"
    members[name] = blob[:8] + struct.pack("<H", len(padded)) + padded.encode("latin1") + body
    return _zip(members)


def _npy_huge_header(data: bytes, rng: random.Random) -> bytes:
    """A v2 `.npy` header that declares a 4 GiB header length."""
    members = _members(data)
    name = rng.choice(list(members))
    blob = members[name]
    members[name] = b"\x93NUMPY\x02\x00" + struct.pack("<I", rng.choice((0xFFFFFFFF, 1 << 30))) \
        + blob[10:]
    return _zip(members)


NPZ_MUTATORS: dict[str, Mutator] = {
    "zip_bytes": lambda d, r: BYTE_MUTATORS[r.choice(list(BYTE_MUTATORS))](d, r),
    "stored_crc": _stored_bytes_corrupt,
    "drop_member": _drop_member,
    "wrong_dtype": _npz_edit(_edit_npz_dtype),
    "object_array": _npz_edit(_edit_npz_object),
    "shape_mismatch": _npz_edit(_edit_npz_shape),
    "bad_labels": _npz_edit(_edit_npz_labels),
    "nan_inf": _npz_edit(_edit_npz_values),
    "keys": _npz_edit(_edit_npz_keys),
    "npy_header": _npy_header_edit,
    "huge_header": _npy_huge_header,
    "member_bytes": _member_edit(lambda n: n.endswith(".npy"), bit_flips),
}


FORMAT_MUTATORS: dict[str, dict[str, Mutator]] = {
    "tflite": TFLITE_MUTATORS, "onnx": ONNX_MUTATORS, "keras": KERAS_MUTATORS,
    "npz": NPZ_MUTATORS,
}
SUFFIX = {"tflite": ".tflite", "onnx": ".onnx", "keras": ".keras", "npz": ".npz"}


def mutate(fmt: str, seed: bytes, rng: random.Random) -> Mutant:
    """One mutant of `seed`: a structure-aware mutation most of the time, else a byte one.

    A quarter of the mutants get a second edit of the same family on top. A mutator that
    cannot apply to this input (its own parser fails on it) falls back to bit flips, so
    every call returns new bytes.
    """
    table = FORMAT_MUTATORS[fmt]
    if fmt in ("tflite", "onnx") and rng.random() < 0.2:
        name, family = rng.choice(list(BYTE_MUTATORS)), "bytes"
        mutator = BYTE_MUTATORS[name]
    else:
        name, family = rng.choice(list(table)), fmt
        mutator = table[name]
    data, name = _apply(mutator, name, seed, rng)
    if rng.random() < 0.25:  # stacked: a second edit of the same family on top
        second = rng.choice(list(table))
        data, extra = _apply(table[second], second, data, rng)
        name = f"{name}&{extra}"
    return Mutant(data, f"{family}.{name}")


def _apply(mutator: Mutator, name: str, data: bytes, rng: random.Random) -> tuple[bytes, str]:
    try:
        mutated = mutator(data, rng)
    except Exception:  # noqa: BLE001 - the mutator's own parser refused: still fuzz
        return bit_flips(data, rng), f"{name}+bit_flips"
    if mutated == data:  # an edit that happened to write what was there
        return bit_flips(data, rng), f"{name}+bit_flips"
    return mutated, name
