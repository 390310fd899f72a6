"""Read an ONNX model into the format-neutral `edgeopt.graph.Graph`.

The model is loaded without its external data (only shapes and sizes are needed) and run
through ONNX shape inference so that activations get shapes. Choices worth knowing:

* Tensors are graph inputs, initializers, ``Constant`` node outputs and every value a node
  reads or writes. A dimension given by ``dim_param`` (or unknown) is -1 in
  ``shape_signature`` and 1 in ``shape``; a tensor of unknown rank has ``shape == ()`` and
  ``shape_signature is None``.
* Initializers and ``Constant`` outputs are constants; ``size_bytes`` is computed from
  dims and dtype when the data is external, so it is right without loading the data.
* Control-flow bodies (``If``/``Loop``/``Scan`` graph attributes) become subgraphs 1, 2, ...
  (breadth first); their ops are listed with that subgraph index and the graph attribute in
  ``Op.options`` holds the subgraph index (``{'then_branch': 1, 'else_branch': 2}``), like
  TFLite's ``then_subgraph_index``. Names a body takes from an enclosing graph resolve to
  the enclosing graph's tensor.
* ``Op.custom_code`` is the node's domain for ops outside the default ONNX domain
  (``'com.microsoft'``), else ``None``; ``Op.version`` is the opset of the node's domain.
* QDQ models: the quantized input of ``DequantizeLinear`` and the output of
  ``QuantizeLinear`` get `Quantization` from the constant scale / zero point (per-channel
  when the scale is a vector), so int8 weights count as parameters.
"""

from __future__ import annotations

import math
import os
from collections import ChainMap
from dataclasses import replace
from typing import Any

from edgeopt.errors import ModelLoadError
from edgeopt.graph import DTYPE_BITS, Graph, Op, Quantization, Tensor, check_declared_sizes

_DEFAULT_DOMAINS = ("", "ai.onnx")
# ONNX enum name -> IR dtype name where lower() is not enough.
_DTYPE_RENAME = {
    "FLOAT": "float32",
    "DOUBLE": "float64",
    "FLOAT8E4M3FN": "float8_e4m3fn",
    "FLOAT8E4M3FNUZ": "float8_e4m3fnuz",
    "FLOAT8E5M2": "float8_e5m2",
    "FLOAT8E5M2FNUZ": "float8_e5m2fnuz",
    "FLOAT8E8M0": "float8_e8m0",
    "FLOAT4E2M1": "float4_e2m1",
    "FLOAT6E2M3": "float6_e2m3",
    "FLOAT6E3M2": "float6_e3m2",
    "UNDEFINED": "unknown",
}
_DTYPE_BITS = DTYPE_BITS
# MAC ops: op_type -> (index of the data input, index of the weight input).
_MAC_INPUTS = {
    "Conv": (0, 1),
    "ConvInteger": (0, 1),
    "QLinearConv": (0, 3),
    "ConvTranspose": (0, 1),
    "Gemm": (0, 1),
    "MatMul": (0, 1),
    "MatMulInteger": (0, 1),
    "QLinearMatMul": (0, 3),
}
MAC_OPS = frozenset(_MAC_INPUTS)


def read_onnx(path_or_bytes: str | os.PathLike | bytes) -> Graph:
    """Parse an ONNX model (a path or the serialized bytes) into a `Graph`.

    External tensor data is not loaded. Raises `ModelLoadError` for a missing, empty or
    corrupt file.

    >>> g = read_onnx("samples/digits_cnn.onnx")  # doctest: +SKIP
    >>> g.total_macs(), g.param_count(), g.input_tensors()[0].shape_signature  # doctest: +SKIP
    (9733376, 93962, (-1, 1, 32, 32))
    """
    return _read(*_load(path_or_bytes))


def check_sizes(path_or_bytes: str | os.PathLike | bytes) -> Graph:
    """`read_onnx`, then refuse a model that would make a runtime allocate a tensor over
    `MAX_TENSOR_BYTES`, by its declared shapes or by the shapes inference computes.

    Declared output shapes can lie (a ConstantOfShape of [60000, 60000] declared [60000, 5]
    or with a negative dimension): inference runs again with them cleared, so that what the
    graph computes from its constants is what gets checked.
    """
    model, label = _load(path_or_bytes)
    graph = _read(model, label)
    check_declared_sizes(graph, label)
    _check_negative_dims(model, label)
    del model.graph.value_info[:]
    for value in model.graph.output:
        value.type.tensor_type.ClearField("shape")
    inferred, note = _infer_shapes(model)
    if note is None:
        values = [*inferred.graph.value_info, *inferred.graph.output]
        check_declared_sizes(Graph("onnx", tuple(_value_tensor(v) for v in values), (), (), (),
                                   1, {}), label)
    return graph


def _read(model: Any, label: str) -> Graph:
    model, inference_note = _infer_shapes(model)
    try:
        graph = _Builder(model).build()
    except ModelLoadError as exc:
        raise ModelLoadError(f"{label}: {exc}") from exc
    except (IndexError, KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise ModelLoadError(f"{label}: malformed ONNX model ({_describe(exc)})") from exc
    _check_defined_dtypes(graph, label)
    if inference_note:
        graph.metadata["shape_inference"] = inference_note
    return graph


def _value_tensor(value: Any) -> Tensor:
    dtype, shape, signature = _shape_from_type(value.type)
    return Tensor(value.name, shape, dtype, signature, False, 0, None)


def _check_negative_dims(model: Any, label: str) -> None:
    """ONNX dimensions are sizes: below -1 is corrupt. -1 is how exporters such as
    paddle2onnx write a dynamic dimension (PP-OCR's models do, on IO and value_info alike),
    and onnxruntime reads it as one."""
    g = model.graph
    for value in (*g.input, *g.output, *g.value_info):
        dims = value.type.tensor_type.shape.dim
        if any(d.HasField("dim_value") and d.dim_value < -1 for d in dims):
            shown = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]
            raise ModelLoadError(f"{label}: tensor '{value.name}' declares shape {shown}: "
                                 "a dimension is negative")


def _check_defined_dtypes(graph: Graph, label: str) -> None:
    """An element type ONNX does not define (``type_99``) on a constant or on the model's IO
    is corrupt data that numpy, onnxruntime and the quantizer each fail on differently."""
    io = {*graph.inputs, *graph.outputs}
    for index, tensor in enumerate(graph.tensors):
        if tensor.dtype.startswith("type_") and (tensor.is_constant or index in io):
            raise ModelLoadError(f"{label}: tensor '{tensor.name}' has element type "
                                 f"{tensor.dtype[5:]}, which ONNX does not define")


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def _load(source: str | os.PathLike | bytes) -> tuple[Any, str]:
    """Deserialize the ModelProto and reject what is clearly not an ONNX model."""
    import onnx

    if isinstance(source, (bytes, bytearray, memoryview)):
        label, data = "<bytes>", bytes(source)
    else:
        label = os.fspath(source)
        try:
            with open(label, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise ModelLoadError(
                f"{label}: cannot read model file ({exc.strerror or exc})"
            ) from exc
    if not data:
        raise ModelLoadError(f"{label}: empty file, not an ONNX model")
    try:
        # Parse the bytes ourselves: onnx.load() would pick a text/JSON parser from the file
        # extension, and external data is deliberately left on disk.
        model = onnx.ModelProto()
        model.ParseFromString(data)
    except Exception as exc:  # DecodeError, RuntimeWarning, ...: all mean a corrupt file
        raise ModelLoadError(f"{label}: not a valid ONNX protobuf ({_describe(exc)})") from exc
    # Protobuf parsing is lenient: random bytes can decode into a ModelProto with only
    # unknown fields. A real model always has an IR version and a graph.
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise ModelLoadError(f"{label}: not an ONNX model (no IR version or no graph)")
    return model, label


def _infer_shapes(model: Any) -> tuple[Any, str | None]:
    """Shape inference when it works; the raw model otherwise (shapes stay unknown)."""
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model), None
    except Exception as exc:  # noqa: BLE001 - inference is best effort, the graph is still valid
        return model, f"failed: {_describe(exc)}"


# --------------------------------------------------------------------------
# Type helpers
# --------------------------------------------------------------------------


def _dtype(elem_type: int) -> str:
    import onnx

    try:
        name = onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"type_{elem_type}"
    return _DTYPE_RENAME.get(name, name.lower())


def _shape_from_type(type_proto: Any) -> tuple[str, tuple[int, ...], tuple[int, ...] | None]:
    """(dtype, static shape, signature) of a TypeProto; unknown rank -> ((), None)."""
    kind = type_proto.WhichOneof("value")
    if kind != "tensor_type":
        return (kind or "unknown").replace("_type", ""), (), None
    tt = type_proto.tensor_type
    dtype = _dtype(tt.elem_type)
    if not tt.HasField("shape"):
        return dtype, (), None
    signature = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
    return dtype, tuple(d if d >= 0 else 1 for d in signature), signature


def _tensor_proto_size(t: Any, dtype: str) -> int:
    """Bytes of a TensorProto's data without loading external data."""
    elements = math.prod(t.dims)
    if t.raw_data:
        return len(t.raw_data)
    if dtype == "string":
        return sum(len(s) for s in t.string_data)
    return math.ceil(elements * _DTYPE_BITS.get(dtype, 8) / 8)


# TensorProto field that holds the values of each element type when raw_data is unused,
# and its entries per element (a complex number takes two); other types use int32_data.
_TYPED_FIELDS = {1: ("float_data", 1), 14: ("float_data", 2), 11: ("double_data", 1),
                 15: ("double_data", 2), 7: ("int64_data", 1), 12: ("uint64_data", 1),
                 13: ("uint64_data", 1), 8: ("string_data", 1)}


def _check_constant_data(name: str, t: Any, dtype: str) -> None:
    """The stored values must fill the declared shape: numpy and onnxruntime fail on the
    mismatch later, each in its own way (a reshape error, a native exception)."""
    from onnx import TensorProto

    if t.data_location == TensorProto.EXTERNAL or dtype.startswith("type_"):
        return
    elements = math.prod(t.dims)
    bits = _DTYPE_BITS.get(dtype, 8)
    if t.raw_data and dtype != "string":
        have, need, unit = len(t.raw_data), math.ceil(elements * bits / 8), "bytes"
    else:
        field, per_element = _TYPED_FIELDS.get(t.data_type, ("int32_data", 1))
        have, unit = len(getattr(t, field)), "values"
        # 4- and 2-bit types pack a byte's worth of elements into each int32_data entry
        need = math.ceil(elements * bits / 8) if bits < 8 else elements * per_element
    if have != need:
        raise ModelLoadError(f"constant '{name}' stores {have} {unit} for shape "
                             f"{[int(d) for d in t.dims]} of {dtype}, which needs {need}")


def _constant_tensor(name: str, t: Any) -> Tensor:
    dtype = _dtype(t.data_type)
    shape = tuple(int(d) for d in t.dims)
    _check_constant_data(name, t, dtype)
    return Tensor(
        name=name,
        shape=shape,
        dtype=dtype,
        shape_signature=shape,
        is_constant=True,
        size_bytes=_tensor_proto_size(t, dtype),
        quantization=None,
    )


def _constant_node_value(node: Any) -> Any | None:
    """The value of a ``Constant`` node as a TensorProto (None for sparse values)."""
    from onnx import TensorProto, helper

    for attr in node.attribute:
        if attr.name == "value":
            return attr.t
        scalar_types = {
            "value_float": TensorProto.FLOAT,
            "value_floats": TensorProto.FLOAT,
            "value_int": TensorProto.INT64,
            "value_ints": TensorProto.INT64,
        }
        if attr.name in scalar_types:
            value = helper.get_attribute_value(attr)
            dims = [len(value)] if isinstance(value, list) else []
            vals = value if isinstance(value, list) else [value]
            return helper.make_tensor("", scalar_types[attr.name], dims, vals)
        if attr.name in ("value_string", "value_strings"):
            value = helper.get_attribute_value(attr)
            dims = [len(value)] if isinstance(value, list) else []
            vals = value if isinstance(value, list) else [value]
            return helper.make_tensor("", TensorProto.STRING, dims, vals)
    return None


def _plain_attribute(attr: Any, subgraph_ids: list[int]) -> Any:
    """Attribute -> plain Python value; graph attributes -> their subgraph index."""
    from onnx import AttributeProto, helper

    if attr.type == AttributeProto.GRAPH:
        return subgraph_ids[0]
    if attr.type == AttributeProto.GRAPHS:
        return list(subgraph_ids)
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list):
        return [v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v for v in value]
    if attr.type in (AttributeProto.TENSOR, AttributeProto.SPARSE_TENSOR):
        return _summarize_tensor(attr.t if attr.type == AttributeProto.TENSOR else None)
    if attr.type in (AttributeProto.TENSORS, AttributeProto.SPARSE_TENSORS):
        return [_summarize_tensor(t) for t in attr.tensors]
    if attr.type in (AttributeProto.TYPE_PROTO, AttributeProto.TYPE_PROTOS):
        return str(value)
    return value


def _summarize_tensor(t: Any | None) -> Any:
    """Small tensors become lists (e.g. ConstantOfShape's fill value); large ones a summary."""
    if t is None:
        return {"sparse": True}
    from onnx import numpy_helper

    summary = {"dtype": _dtype(t.data_type), "shape": [int(d) for d in t.dims]}
    if math.prod(t.dims) > 64:
        return summary
    try:
        return numpy_helper.to_array(t).tolist()
    except Exception:  # noqa: BLE001 - external or odd data: the summary still helps
        return summary


# --------------------------------------------------------------------------
# Builder
# --------------------------------------------------------------------------


class _Builder:
    """Walks the main graph, then queued control-flow bodies (breadth first)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.opsets = {
            ("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import
        }
        self.tensors: list[Tensor] = []
        self.ops: list[Op] = []
        self.sub_meta: list[dict] = []
        # (GraphProto, enclosing scope, enclosing constants) of subgraphs not yet walked.
        self.queue: list[tuple[Any, ChainMap, ChainMap]] = []

    def build(self) -> Graph:
        self.queue.append((self.model.graph, ChainMap(), ChainMap()))
        self.sub_meta.append({})
        walked = 0
        while walked < len(self.queue):
            graph, scope, consts = self.queue[walked]
            self._walk(walked, graph, scope, consts)
            walked += 1
        main = self.sub_meta[0]
        return Graph(
            format="onnx",
            tensors=tuple(self.tensors),
            ops=tuple(self.ops),
            inputs=main["inputs"],
            outputs=main["outputs"],
            subgraph_count=len(self.sub_meta),
            metadata=self._metadata(),
        )

    # -- one graph --------------------------------------------------------

    def _walk(self, sg: int, graph: Any, outer: ChainMap, outer_consts: ChainMap) -> None:
        scope = outer.new_child()
        consts = outer_consts.new_child()  # name -> TensorProto of constant values
        infos = {vi.name: vi.type for vi in (*graph.input, *graph.output, *graph.value_info)}
        tensor_offset, op_offset = len(self.tensors), len(self.ops)

        for init in graph.initializer:
            consts[init.name] = init
        inputs = tuple(
            self._define(scope, vi.name, infos) for vi in graph.input if vi.name not in consts
        )
        for init in graph.initializer:
            scope[init.name] = self._add(_constant_tensor(init.name, init))
        for node in graph.node:
            self._add_node(sg, node, scope, consts, infos)
        outputs = tuple(self._ref(scope, vi.name, infos) for vi in graph.output)
        self._attach_quantization(sg, consts)

        self.sub_meta[sg] = {
            "name": graph.name,
            "tensor_offset": tensor_offset,
            "tensor_count": len(self.tensors) - tensor_offset,
            "op_offset": op_offset,
            "op_count": len(self.ops) - op_offset,
            "inputs": inputs,
            "outputs": outputs,
        }

    def _add(self, tensor: Tensor) -> int:
        self.tensors.append(tensor)
        return len(self.tensors) - 1

    def _define(self, scope: ChainMap, name: str, infos: dict) -> int:
        """Create a local tensor for a value defined in this graph (input or node output)."""
        if name in infos:
            dtype, shape, signature = _shape_from_type(infos[name])
        else:
            dtype, shape, signature = "unknown", (), None
        index = self._add(Tensor(name, shape, dtype, signature, False, 0, None))
        scope.maps[0][name] = index
        return index

    def _ref(self, scope: ChainMap, name: str, infos: dict) -> int:
        """Index of a value read here: local, else from an enclosing graph, else new."""
        if not name:
            return -1  # omitted optional input
        if name in scope:
            return scope[name]
        return self._define(scope, name, infos)

    def _add_node(self, sg: int, node: Any, scope: ChainMap, consts: ChainMap, infos: dict) -> None:
        if node.op_type == "Loop" and node.domain in _DEFAULT_DOMAINS:
            _check_constant_loop(node, consts)
        inputs = tuple(self._ref(scope, n, infos) for n in node.input)
        options = {}
        for attr in node.attribute:
            options[attr.name] = _plain_attribute(attr, self._queue_bodies(attr, scope, consts))
        outputs = []
        value = _constant_node_value(node) if node.op_type == "Constant" else None
        for name in node.output:
            if not name:
                outputs.append(-1)
            elif value is not None:
                consts[name] = value
                outputs.append(self._add(_constant_tensor(name, value)))
                scope.maps[0][name] = outputs[-1]
            else:
                outputs.append(self._define(scope, name, infos))
        domain = "" if node.domain in _DEFAULT_DOMAINS else node.domain
        self.ops.append(
            Op(
                index=len(self.ops),
                op=node.op_type,
                version=self.opsets.get(domain, 0),
                inputs=inputs,
                outputs=tuple(outputs),
                options=options,
                custom_code=domain or None,
                macs=self._macs(node.op_type, inputs, tuple(outputs), options),
                subgraph=sg,
            )
        )

    def _queue_bodies(self, attr: Any, scope: ChainMap, consts: ChainMap) -> list[int]:
        """Reserve subgraph indices for graph attributes; they are walked after this graph."""
        from onnx import AttributeProto

        if attr.type == AttributeProto.GRAPH:
            bodies = [attr.g]
        elif attr.type == AttributeProto.GRAPHS:
            bodies = list(attr.graphs)
        else:
            return []
        ids = []
        for body in bodies:
            ids.append(len(self.sub_meta))
            self.sub_meta.append({})
            # The body sees every name of the enclosing graph, including later ones (the
            # ChainMap is live), which matches ONNX scoping for well-formed models.
            self.queue.append((body, scope, consts))
        return ids

    # -- MACs ---------------------------------------------------------------

    def _shape(self, index: int) -> tuple[int, ...] | None:
        if index < 0:
            return None
        t = self.tensors[index]
        # Unknown rank (shape () with no signature) is not a scalar: treat as unknown.
        return None if t.shape_signature is None and not t.is_constant else t.shape

    def _macs(
        self, op_type: str, inputs: tuple[int, ...], outputs: tuple[int, ...], options: dict
    ) -> int:
        """Multiply-accumulates from tensor shapes; 0 for other ops or unknown shapes."""
        spec = _MAC_INPUTS.get(op_type)
        if spec is None or len(inputs) <= max(spec):
            return 0
        a, w = self._shape(inputs[spec[0]]), self._shape(inputs[spec[1]])
        if not a or not w:
            return 0
        if op_type == "Gemm":
            if len(a) != 2 or len(w) != 2:
                return 0
            m, k = (a[1], a[0]) if options.get("transA") else a
            n = w[0] if options.get("transB") else w[1]
            return m * n * k
        if op_type in ("MatMul", "MatMulInteger", "QLinearMatMul"):
            return _matmul_macs(a, w)
        if op_type == "ConvTranspose":
            # W [C, M/group, k...]: each input element is scattered through M/group * k...
            return math.prod(a) * math.prod(w[1:])
        # Conv: W [M, C/group, k...], so each output element costs C/group * k... MACs.
        # The output's spatial size comes from shape inference; unknown -> 0.
        out = self._shape(outputs[0]) if outputs else None
        return math.prod(out) * math.prod(w[1:]) if out else 0

    # -- quantization -------------------------------------------------------

    def _attach_quantization(self, sg: int, consts: ChainMap) -> None:
        """Give Q/DQ-quantized tensors of subgraph ``sg`` their scale and zero point."""
        for op in self.ops:
            if op.subgraph != sg or op.op not in ("QuantizeLinear", "DequantizeLinear"):
                continue
            if len(op.inputs) < 2 or op.inputs[1] < 0:
                continue
            target = op.inputs[0] if op.op == "DequantizeLinear" else op.outputs[0]
            zp_index = op.inputs[2] if len(op.inputs) > 2 else -1
            quant = self._quantization(op.inputs[1], zp_index, op.options.get("axis", 1), consts)
            if quant is not None and target >= 0:
                self.tensors[target] = replace(self.tensors[target], quantization=quant)

    def _quantization(
        self, scale_index: int, zp_index: int, axis: int, consts: ChainMap
    ) -> Quantization | None:
        from onnx import numpy_helper

        scale_proto = consts.get(self.tensors[scale_index].name)
        if scale_proto is None:
            return None  # scale computed at run time (dynamic quantization)
        zp_proto = consts.get(self.tensors[zp_index].name) if zp_index >= 0 else None
        try:
            scale = numpy_helper.to_array(scale_proto).reshape(-1)
            zp = numpy_helper.to_array(zp_proto).reshape(-1) if zp_proto is not None else None
        except Exception:  # noqa: BLE001 - external data not loaded: no values to report
            return None
        zero_point = tuple(int(z) for z in zp) if zp is not None else (0,) * len(scale)
        return Quantization(
            scale=tuple(float(s) for s in scale),
            zero_point=zero_point,
            axis=int(axis) if len(scale) > 1 else None,
        )

    # -- metadata -----------------------------------------------------------

    def _metadata(self) -> dict:
        m = self.model
        return {
            "ir_version": int(m.ir_version),
            "producer_name": m.producer_name,
            "producer_version": m.producer_version,
            "opset": {(d or "ai.onnx"): v for d, v in self.opsets.items()},
            "graph_name": m.graph.name,
            "metadata_props": {p.key: p.value for p in m.metadata_props},
            "subgraphs": self.sub_meta,
        }


# Iterations a Loop on constant inputs may run: converters fold such a Loop by running it.
MAX_CONSTANT_LOOP_TRIPS = 1_000_000


def _check_constant_loop(node: Any, consts: ChainMap) -> None:
    """A Loop whose inputs are all constants is computed at conversion time (onnxslim's
    constant folding runs it in onnxruntime, with no way to stop it): refuse one that would
    run for hours, or forever when it has no trip count and a constant true condition."""
    from onnx import numpy_helper

    names = [n for n in node.input if n]
    if not names or any(n not in consts for n in names):
        return
    trip, cond = (list(node.input) + ["", ""])[:2]
    try:
        trips = int(numpy_helper.to_array(consts[trip]).reshape(-1)[0]) if trip else None
        always = bool(numpy_helper.to_array(consts[cond]).reshape(-1)[0]) if cond else True
    except (ValueError, IndexError, TypeError, KeyError):
        return  # unreadable values: the checker or the runtime says what is wrong
    if (trips is None and always) or (trips is not None and trips > MAX_CONSTANT_LOOP_TRIPS):
        count = "endless" if trips is None else f"{trips:,}"
        name = node.name or f"making '{node.output[0] if node.output else ''}'"
        raise ModelLoadError(f"Loop node {name} runs {count} iterations on constant "
                             "inputs; converting the model would run them all (more than "
                             f"{MAX_CONSTANT_LOOP_TRIPS:,} are refused)")


def _matmul_macs(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """numpy-matmul semantics: 1-D operands are promoted, batch dims broadcast."""
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    m, k, n = a2[-2], a2[-1], b2[-1]
    batch_a, batch_b = a2[:-2], b2[:-2]
    rank = max(len(batch_a), len(batch_b))
    batch_a = (1,) * (rank - len(batch_a)) + batch_a
    batch_b = (1,) * (rank - len(batch_b)) + batch_b
    batch = math.prod(max(x, y) for x, y in zip(batch_a, batch_b))
    return batch * m * n * k
