"""An int8 SPLIT keeps every part int8, the parts nothing reads too.

ai-edge-quantizer leaves an output that no op reads in float32 (an LSTM cell's unused
gate slice after onnx2tf unrolls it), so the SPLIT has int8 and float parts, which
XNNPACK refuses at load ("failed to delegate SPLIT node #58"). A part of a SPLIT holds
values of its input, so it takes the input's type, scale and zero point.
"""

from __future__ import annotations

import copy

from edgeopt.calibration.tflite_buffers import pack_model, unpack_model

PARTS = ("SPLIT", "SPLIT_V", "UNPACK")
_DATA_INPUT = {"SPLIT": 1, "SPLIT_V": 0, "UNPACK": 0}
_FLOAT32 = 0


def _names() -> dict[int, str]:
    from ai_edge_litert import schema_py_generated as schema

    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def _unread_float_parts(graph, op, data) -> list[int]:
    read = {i for other in graph.operators for i in other.inputs} | set(graph.outputs)
    return [i for i in op.outputs
            if i not in read and graph.tensors[i].type == _FLOAT32
            and graph.tensors[data].type != _FLOAT32]


def integer_parts(model: bytes) -> bytes:
    """`model` with each unread float part of an integer SPLIT/SPLIT_V/UNPACK made like
    the split input (unchanged bytes when there is none)."""
    unpacked = unpack_model(model)
    names = _names()
    changed = False
    for graph in unpacked.subgraphs:
        for op in graph.operators:
            code = unpacked.operatorCodes[op.opcodeIndex]
            kind = names.get(max(int(code.builtinCode), int(code.deprecatedBuiltinCode)), "")
            if kind not in PARTS or len(op.inputs) <= _DATA_INPUT[kind]:
                continue
            data = op.inputs[_DATA_INPUT[kind]]
            for index in _unread_float_parts(graph, op, data):
                graph.tensors[index].type = graph.tensors[data].type
                graph.tensors[index].quantization = copy.deepcopy(
                    graph.tensors[data].quantization)
                changed = True
    return pack_model(unpacked, len(model)) if changed else model
