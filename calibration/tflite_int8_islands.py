"""Close the float islands ai-edge-quantizer leaves around activations LiteRT runs in int8.

ai-edge-quantizer has no rule for PRELU, LEAKY_RELU, RELU6, RELU_0_TO_1 or RELU_N1_TO_1:
it writes `DEQUANTIZE -> op (float) -> QUANTIZE`, which runs on the CPU in float and keeps
an int8-only accelerator from taking the graph. LiteRT has int8 kernels for all of them
(`tflite/kernels/activations.cc`), so the island is rewritten as the int8 op itself: input
the DEQUANTIZE's int8 tensor, output the QUANTIZE's (scale and zero point from our ranges).
PRELU's alpha becomes an int8 constant with ONE scale and zero point: the kernel reads
`alpha->params` (per-tensor) only, and per-channel alpha scales are what LiteRT refused
("num_scales must be 1 ... Tensor 11 has invalid quantization parameters").
"""

from __future__ import annotations

import numpy as np

from edgeopt.calibration.tflite_buffers import pack_model, unpack_model

ACTIVATIONS = ("PRELU", "LEAKY_RELU", "RELU6", "RELU_0_TO_1", "RELU_N1_TO_1")
_INT8 = 9     # TensorType.INT8
_FLOAT32 = 0  # TensorType.FLOAT32


def _names():
    from ai_edge_litert import schema_py_generated as schema

    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def _op_name(model, op, names) -> str:
    code = model.operatorCodes[op.opcodeIndex]
    return names.get(max(int(code.builtinCode), int(code.deprecatedBuiltinCode)), "")


def _alpha_int8(model, graph, index: int) -> int | None:
    """A new per-tensor int8 copy of the float constant `index`; None if not constant."""
    from ai_edge_litert import schema_py_generated as schema

    tensor = graph.tensors[index]
    data = model.buffers[tensor.buffer].data if tensor.buffer > 0 else None
    if tensor.type != _FLOAT32 or data is None or len(data) == 0:
        return None
    alpha = np.frombuffer(np.asarray(data, np.uint8).tobytes(), np.float32)
    lo, hi = min(float(alpha.min()), 0.0), max(float(alpha.max()), 0.0)
    scale = (hi - lo) / 255.0 or 1.0
    zero_point = int(np.clip(round(-128 - lo / scale), -128, 127))
    codes = np.clip(np.rint(alpha / scale) + zero_point, -128, 127).astype(np.int8)
    buffer = schema.BufferT()
    buffer.data = codes.view(np.uint8)
    model.buffers.append(buffer)
    quant = schema.QuantizationParametersT()
    quant.scale, quant.zeroPoint, quant.quantizedDimension = [scale], [zero_point], 0
    new = schema.TensorT()
    new.shape, new.type, new.buffer = list(tensor.shape), _INT8, len(model.buffers) - 1
    new.name, new.quantization = (tensor.name or b"alpha") + b"_int8", quant
    graph.tensors.append(new)
    return len(graph.tensors) - 1


class _Graph:
    """Producers and consumers of subgraph 0, by tensor index."""

    def __init__(self, model, names):
        self.model, self.graph, self.names = model, model.subgraphs[0], names
        ops = self.graph.operators
        self.producer = {t: i for i, op in enumerate(ops) for t in op.outputs}
        self.consumers: dict[int, list[int]] = {}
        for i, op in enumerate(ops):
            for t in op.inputs:
                self.consumers.setdefault(int(t), []).append(i)
        self.outputs = {int(t) for t in self.graph.outputs}

    def kind(self, index: int | None) -> str:
        return "" if index is None else _op_name(self.model, self.graph.operators[index],
                                                 self.names)

    def name(self, tensor: int) -> str:
        return (self.graph.tensors[tensor].name or b"").decode()


def _fuse_one(g: _Graph, index: int, keep: set[str]) -> set[int] | None:
    """Rewrite one island in place; the indices of the ops it made redundant."""
    op = g.graph.operators[index]
    x, out = int(op.inputs[0]), int(op.outputs[0])
    deq, users = g.producer.get(x), g.consumers.get(out, [])
    if g.kind(deq) != "DEQUANTIZE" or len(users) != 1 or g.kind(users[0]) != "QUANTIZE" \
            or out in g.outputs:
        return None
    source = int(g.graph.operators[deq].inputs[0])
    target = int(g.graph.operators[users[0]].outputs[0])
    if g.graph.tensors[source].type != _INT8 or g.graph.tensors[target].type != _INT8 \
            or keep & {g.name(out), g.name(target)}:
        return None
    inputs = [source, *[int(t) for t in op.inputs[1:]]]
    if g.kind(index) == "PRELU":
        alpha = _alpha_int8(g.model, g.graph, inputs[1])
        if alpha is None:
            return None
        inputs[1] = alpha
    op.inputs, op.outputs = inputs, [target]
    redundant = {users[0]}
    if all(c == index for c in g.consumers.get(x, [])) and x not in g.outputs:
        redundant.add(deq)
    return redundant


def close_islands(model: bytes, keep: set[str] | frozenset[str] = frozenset()) -> bytes:
    """`model` with every closable island of ACTIVATIONS run in int8 (`keep`: op output
    names to leave float, after the runtime refused them)."""
    unpacked = unpack_model(model)
    names = _names()
    g = _Graph(unpacked, names)
    redundant: set[int] = set()
    for index in range(len(g.graph.operators)):
        if g.kind(index) in ACTIVATIONS and index not in redundant:
            removed = _fuse_one(g, index, set(keep))
            if removed is not None:
                redundant |= removed
    if not redundant:
        return model
    # op versions stay: LiteRT 2.x registers one PRELU version whose kernel takes int8
    g.graph.operators = [op for i, op in enumerate(g.graph.operators) if i not in redundant]
    return pack_model(unpacked, len(model))
