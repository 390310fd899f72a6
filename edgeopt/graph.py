"""Format-neutral graph IR shared by inspect, delegate placement and the latency estimator.

The readers (`edgeopt.tflite_reader.read_tflite`, `edgeopt.onnx_reader.read_onnx`) turn a
model file into a `Graph`; later stages only ever look at these dataclasses, never at the
flatbuffer or protobuf. The module is deliberately stdlib-only so that importing it costs
nothing.

Conventions:

* Tensors of every subgraph live in one flat `Graph.tensors` tuple; `Op.inputs`/`Op.outputs`
  index into it and use -1 for an omitted optional input. Subgraph 0 is the main graph.
  ``Graph.metadata["subgraphs"]`` lists, per subgraph, its name, ``tensor_offset``/
  ``tensor_count``, ``op_offset``/``op_count`` and its inputs/outputs (global indices).
* `Op.index` is the op's position in `Graph.ops` (global); the position inside its own
  subgraph (TFLite's node index) is ``op.index - metadata["subgraphs"][op.subgraph]["op_offset"]``.
* `Op.macs` counts multiply-accumulates of the MAC-heavy ops only (convolutions, fully
  connected / Gemm, (batch) matmul); element-wise ops, pooling, etc. have ``macs == 0``.
  Dynamic dimensions are counted as 1 (TFLite stores 1 in ``shape`` for them).
* "Parameters" are constant tensors that hold learned values: floating-point constants and
  quantized constants (int8 weights, int32 biases with a scale). Integer constants without
  quantization parameters -- reshape shapes, axes, paddings, permutations, gather indices,
  zero points -- and ONNX Q/DQ scales are plumbing, not parameters.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from edgeopt.errors import ModelLoadError

# dtype names are lower-case numpy-style: 'float32', 'int8', 'float8_e4m3fn', 'int4', ...
FLOAT_PREFIXES = ("float", "bfloat")
# ONNX ops whose scale / zero-point inputs (by position) are quantization metadata, not
# parameters: TFLite keeps those in the tensor's quantization table, ONNX in tensors.
QPARAM_INPUTS = {
    "QuantizeLinear": (1, 2),
    "DequantizeLinear": (1, 2),
    "DynamicQuantizeLinear": (),
    "QLinearConv": (1, 2, 4, 5, 6, 7),
    "QLinearMatMul": (1, 2, 4, 5, 6, 7),
    "ConvInteger": (2, 3),
    "MatMulInteger": (2, 3),
}


DTYPE_BITS = {
    "bool": 8, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32,
    "int64": 64, "uint64": 64, "float16": 16, "bfloat16": 16, "float32": 32, "float64": 64,
    "complex64": 64, "complex128": 128, "int4": 4, "uint4": 4, "float4_e2m1": 4, "int2": 2,
    "uint2": 2, "float6_e2m3": 6, "float6_e3m2": 6,
}  # fmt: skip
# No device edgeopt targets holds a single tensor this large; a file that declares one is
# corrupt, and a runtime asked to allocate it would take the host's memory first.
MAX_TENSOR_BYTES = 2 << 30


@dataclass(frozen=True)
class Quantization:
    """Affine quantization ``real = scale * (q - zero_point)``.

    ``axis`` is the quantized (channel) dimension for per-channel parameters and ``None`` for
    per-tensor parameters.

    >>> Quantization(scale=(0.1, 0.2), zero_point=(0, 0), axis=0).per_channel
    True
    """

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None

    @property
    def per_channel(self) -> bool:
        """True when there is more than one scale (one per output channel)."""
        return len(self.scale) > 1


@dataclass(frozen=True)
class Tensor:
    """One tensor (activation or constant) of the model.

    ``shape`` is static (dynamic dims are 1); ``shape_signature`` keeps -1 for dynamic dims
    and is ``None`` when the file carries no signature (TFLite) or the rank is unknown (ONNX).
    ``size_bytes`` is the size of the constant data, 0 for activations.

    >>> Tensor("w", (8, 3, 3, 3), "float32", None, True, 864, None).elements
    216
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    shape_signature: tuple[int, ...] | None
    is_constant: bool
    size_bytes: int
    quantization: Quantization | None

    @property
    def elements(self) -> int:
        """Number of elements of ``shape`` (1 for a scalar)."""
        return math.prod(self.shape)

    @property
    def declared_bytes(self) -> int:
        """Bytes the shape and dtype call for (unknown dtypes count a byte an element)."""
        return math.ceil(self.elements * DTYPE_BITS.get(self.dtype, 8) / 8)

    @property
    def is_dynamic(self) -> bool:
        """True when some dimension is only known at run time."""
        return self.shape_signature is not None and any(d < 0 for d in self.shape_signature)


@dataclass(frozen=True)
class Op:
    """One operator.

    ``op`` is the TFLite builtin name in upper snake case ('CONV_2D', 'CUSTOM', ...) or the ONNX
    ``op_type`` as written ('Conv'). ``custom_code`` is the TFLite custom code ('FlexConv2D')
    or the ONNX domain of non-standard ops ('com.microsoft'), else ``None``. ``options`` holds
    builtin options / ONNX attributes as plain Python values; treat it as read-only.

    >>> Op(0, "ADD", 1, (0, 1), (2,), {"fused_activation_function": "NONE"}, None, 0, 0).op
    'ADD'
    """

    index: int
    op: str
    version: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    # hash=False: a dict is unhashable, yet an Op should still be usable as a dict key.
    options: dict = field(default_factory=dict, hash=False)
    custom_code: str | None = None
    macs: int = 0
    subgraph: int = 0

    @property
    def is_custom(self) -> bool:
        """True for TFLite custom ops (including Flex/TF-Select ops) and non-ONNX domains."""
        return self.custom_code is not None


@dataclass(frozen=True)
class Graph:
    """A whole model: all subgraphs' tensors and ops, plus the main subgraph's inputs/outputs.

    >>> g = Graph("tflite", (), (), (), (), 1, {})
    >>> g.total_macs(), g.op_histogram()
    (0, {})
    """

    format: str
    tensors: tuple[Tensor, ...]
    ops: tuple[Op, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    subgraph_count: int
    metadata: dict = field(default_factory=dict, hash=False)

    def tensor(self, index: int) -> Tensor:
        """Tensor at ``index``; -1 (an omitted optional input) raises IndexError.

        >>> Graph("onnx", (), (), (), (), 1, {}).tensor(-1)
        Traceback (most recent call last):
        ...
        IndexError: tensor index -1 out of range (0 tensors)
        """
        # Negative indices would silently wrap around to the last tensor.
        if not 0 <= index < len(self.tensors):
            raise IndexError(f"tensor index {index} out of range ({len(self.tensors)} tensors)")
        return self.tensors[index]

    def input_tensors(self) -> tuple[Tensor, ...]:
        """The main subgraph's input tensors, in model order."""
        return tuple(self.tensors[i] for i in self.inputs)

    def output_tensors(self) -> tuple[Tensor, ...]:
        """The main subgraph's output tensors, in model order."""
        return tuple(self.tensors[i] for i in self.outputs)

    def op_histogram(self) -> dict[str, int]:
        """Op name -> count over all subgraphs, most frequent first (ties by name).

        >>> ops = (Op(0, "ADD", 1, (), ()), Op(1, "MUL", 1, (), ()), Op(2, "MUL", 1, (), ()))
        >>> Graph("tflite", (), ops, (), (), 1, {}).op_histogram()
        {'MUL': 2, 'ADD': 1}
        """
        counts = Counter(op.op for op in self.ops)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def parameter_indices(self) -> tuple[int, ...]:
        """Indices of the parameter tensors: float or quantized constants (see module doc).

        ONNX scale / zero-point constants feeding Q/DQ-style ops are excluded: they are
        quantization metadata, which TFLite stores outside of tensors.
        """
        qparams = {
            op.inputs[i]
            for op in self.ops
            for i in QPARAM_INPUTS.get(op.op, ())
            if i < len(op.inputs)
        }
        return tuple(
            i
            for i, t in enumerate(self.tensors)
            if t.is_constant
            and i not in qparams
            and (t.dtype.startswith(FLOAT_PREFIXES) or t.quantization is not None)
        )

    def param_count(self) -> int:
        """Elements of all parameter tensors, see `parameter_indices`."""
        return sum(self.tensors[i].elements for i in self.parameter_indices())

    def param_bytes(self) -> int:
        """Stored bytes of all parameter tensors (a tensor sharing a buffer counts each time)."""
        return sum(self.tensors[i].size_bytes for i in self.parameter_indices())

    def constant_bytes(self) -> int:
        """Stored bytes of every constant tensor, parameters and plumbing constants alike."""
        return sum(t.size_bytes for t in self.tensors if t.is_constant)

    def total_macs(self) -> int:
        """Sum of `Op.macs` over all ops of all subgraphs."""
        return sum(op.macs for op in self.ops)

    def ops_in_subgraph(self, subgraph: int = 0) -> tuple[Op, ...]:
        """Ops of one subgraph (0 is the main graph), in execution order."""
        return tuple(op for op in self.ops if op.subgraph == subgraph)


def check_declared_sizes(graph: Graph, label: str, limit: int = MAX_TENSOR_BYTES) -> None:
    """Refuse a model whose shapes declare a tensor over `limit` bytes, before a runtime
    allocates it: a corrupt dimension must end in an error, not in the host's memory."""
    for tensor in graph.tensors:
        if tensor.declared_bytes > limit:
            raise ModelLoadError(
                f"{label}: tensor '{tensor.name}' has shape {list(tensor.shape)} "
                f"({tensor.dtype}, {tensor.declared_bytes / 2**30:.1f} GiB), over the "
                f"{limit / 2**30:.0f} GiB a tensor may take; the file is corrupt or not an "
                "edge model"
            )
