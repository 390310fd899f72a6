"""Write small single-subgraph `.tflite` models directly, without TensorFlow.

The micro-benchmarks of `edgeopt devices calibrate` are one op each; building them through
the TFLite converter would take seconds per model, writing the flatbuffer takes
milliseconds. Uses the schema that ships with ai-edge-litert.

    >>> g = GraphWriter("int8")
    >>> x = g.activation((1, 8, 8, 4))
    >>> y = g.activation((1, 8, 8, 4))
    >>> g.op("RELU", [x], [y])
    >>> len(g.build([x], [y])) > 0
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

TENSOR_TYPES = {"float32": "FLOAT32", "int8": "INT8", "int32": "INT32", "uint8": "UINT8"}


def _schema():
    from ai_edge_litert import schema_py_generated as schema

    return schema


@dataclass
class GraphWriter:
    """Collects tensors, buffers and ops of one subgraph; ``dtype`` is the activations'."""

    dtype: str
    tensors: list = field(default_factory=list)
    buffers: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    codes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.buffers.append(_schema().BufferT())  # buffer 0: the empty sentinel

    def tensor(self, shape, dtype: str, data: np.ndarray | None = None,
               scale: Any = None, zero_point: Any = 0, axis: int = 0) -> int:
        """Add a tensor (constant when ``data`` is given); returns its index."""
        s = _schema()
        t = s.TensorT()
        t.shape = list(shape)
        t.type = getattr(s.TensorType, TENSOR_TYPES[dtype])
        t.name = f"t{len(self.tensors)}"
        t.buffer = 0
        if data is not None:
            buffer = s.BufferT()
            buffer.data = np.ascontiguousarray(data).view(np.uint8).ravel()
            self.buffers.append(buffer)
            t.buffer = len(self.buffers) - 1
        if scale is not None:
            scales = np.atleast_1d(np.asarray(scale, dtype=np.float32))
            q = s.QuantizationParametersT()
            q.scale = scales.tolist()
            q.zeroPoint = np.broadcast_to(np.asarray(zero_point, np.int64), scales.shape).tolist()
            q.quantizedDimension = axis
            t.quantization = q
        self.tensors.append(t)
        return len(self.tensors) - 1

    def activation(self, shape, scale: float = 0.05, zero_point: int = 0) -> int:
        """A run-time tensor in the writer's dtype (quantized when int8)."""
        if self.dtype == "float32":
            return self.tensor(shape, "float32")
        return self.tensor(shape, "int8", scale=scale, zero_point=zero_point)

    def op(self, name: str, inputs: list[int], outputs: list[int], options: Any = None,
           version: int = 1) -> None:
        s = _schema()
        code = getattr(s.BuiltinOperator, name)
        if (code, version) not in self.codes:
            entry = s.OperatorCodeT()
            entry.builtinCode = code
            entry.deprecatedBuiltinCode = min(code, 127)
            entry.version = version
            self.codes[(code, version)] = (len(self.codes), entry)
        operator = s.OperatorT()
        operator.opcodeIndex = self.codes[(code, version)][0]
        operator.inputs, operator.outputs = list(inputs), list(outputs)
        if options is not None:
            option_name = type(options).__name__[:-1]  # Conv2DOptionsT -> Conv2DOptions
            operator.builtinOptionsType = getattr(s.BuiltinOptions, option_name)
            operator.builtinOptions = options
        self.ops.append(operator)

    def build(self, inputs: list[int], outputs: list[int]) -> bytes:
        """The finished .tflite flatbuffer."""
        import flatbuffers

        s = _schema()
        subgraph = s.SubGraphT()
        subgraph.tensors, subgraph.operators = self.tensors, self.ops
        subgraph.inputs, subgraph.outputs = list(inputs), list(outputs)
        subgraph.name = "main"
        model = s.ModelT()
        model.version = 3
        model.operatorCodes = [entry for _, entry in sorted(self.codes.values(),
                                                            key=lambda e: e[0])]
        model.subgraphs, model.buffers = [subgraph], self.buffers
        model.description = "edgeopt micro-benchmark"
        builder = flatbuffers.Builder(1024)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())


def options(name: str, **values: Any) -> Any:
    """A builtin options object (``options("Conv2DOptions", strideW=2)``)."""
    obj = getattr(_schema(), f"{name}T")()
    for key, value in values.items():
        setattr(obj, key, value)
    return obj
