"""Ops a full-integer artifact still runs in float, read from the written file itself.

"w8a8" promises integer kernels throughout. A quantizer with no int8 rule for an op
(ai-edge-quantizer and PRELU, RELU_0_TO_1, ...) leaves it in float between a DEQUANTIZE
and a QUANTIZE, and the model still loads and runs: only the file says so. Every such op
is listed in the manifest (`quantization.float_ops`), the report and the build summary;
`--require-full-integer` turns the list into an error, and an int8-only device is told
which op it cannot run.

    >>> float_ops(quantized_tflite_bytes, "tflite", "ai-edge-quantizer")  # doctest: +SKIP
    [{'op': 'PRELU', 'node': 'p_re_lu/add', 'reason': 'ai-edge-quantizer has no int8 ...'}]
"""

from __future__ import annotations

from edgeopt.errors import ConversionError
from edgeopt.tflite_reader import read_tflite

FULL_INTEGER_SCHEMES = ("w8a8", "w4a8", "w8a16")
_FLOAT = ("float32", "float16")
# conversions at the edges of an island, and ops that read only a tensor's shape
_CONVERSIONS = ("QUANTIZE", "DEQUANTIZE", "SHAPE", "RANK")
_ONNX_FLOAT = (1, 10)  # TensorProto.FLOAT, FLOAT16
_ONNX_QDQ = ("QuantizeLinear", "DequantizeLinear", "Constant", "Shape", "Size")


def _reason(op: str, writer: str, between: bool) -> str:
    where = "between DEQUANTIZE and QUANTIZE" if between else "on float tensors"
    return f"{writer} has no int8 rule for {op}: it runs in float {where}"


def tflite_float_ops(content: bytes, writer: str, reasons: dict[str, str]) -> list[dict]:
    """Ops of a `.tflite` that read or write a float activation (QUANTIZE/DEQUANTIZE, the
    conversions at the edges of an island, are not counted)."""
    graph = read_tflite(content)
    producers = {i: op.op for op in graph.ops for i in op.outputs}
    found = []
    for op in graph.ops:
        if op.op in _CONVERSIONS:
            continue
        inputs = [graph.tensor(i) for i in op.inputs if i >= 0]
        tensors = [t for t in inputs if not t.is_constant] + [graph.tensor(i) for i in op.outputs]
        if any(t.dtype in _FLOAT for t in tensors):
            between = any(producers.get(i) == "DEQUANTIZE" for i in op.inputs)
            node = graph.tensor(op.outputs[0]).name if op.outputs else f"#{op.index}"
            reason = reasons.get(node) or _reason(op.op, writer, between)
            found.append({"op": op.op, "node": node, "reason": reason})
    return found


def _onnx_float_names(model) -> set[str]:
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    infos = [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
    return {v.name for v in infos if v.type.tensor_type.elem_type in _ONNX_FLOAT}


def onnx_float_ops(content: bytes, writer: str, reasons: dict[str, str]) -> list[dict]:
    """Nodes of a QDQ `.onnx` whose float inputs do not come from a DequantizeLinear or
    whose float outputs reach anything but a QuantizeLinear."""
    import onnx

    model = onnx.load_from_string(content)
    floats = _onnx_float_names(model)
    constants = {t.name for t in model.graph.initializer}
    outputs = {o.name for o in model.graph.output}
    made_by = {out: node.op_type for node in model.graph.node for out in node.output}
    used_by: dict[str, list[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            used_by.setdefault(name, []).append(node.op_type)
    found = []
    for node in model.graph.node:
        if node.op_type in _ONNX_QDQ:
            continue
        loose_in = [n for n in node.input if n in floats and n not in constants
                    and made_by.get(n) != "DequantizeLinear"]
        loose_out = [n for n in node.output if n in floats and (n in outputs or any(
            user != "QuantizeLinear" for user in used_by.get(n, [])))]
        if loose_in or loose_out:
            between = any(made_by.get(n) == "DequantizeLinear" for n in node.input)
            name = node.name or node.output[0]
            found.append({"op": node.op_type, "node": name, "reason": reasons.get(name)
                          or _reason(node.op_type, writer, between)})
    return found


WRITERS = {"tflite": "ai-edge-quantizer", "onnx": "onnxruntime.quantization"}
READERS = {"tflite": tflite_float_ops, "onnx": onnx_float_ops}


def float_ops(content: bytes, fmt: str, writer: str,
              reasons: dict[str, str] | None = None) -> list[dict]:
    """`[{op, node, reason}]` for every op the artifact runs in float; `reasons` (by node)
    says why for the ops the writer kept float on purpose."""
    return READERS[fmt](content, writer, reasons or {})


def describe(ops: list[dict], limit: int = 4) -> str:
    """'3 op(s): PRELU 'a', PRELU 'b', ...' for notes and errors."""
    shown = ", ".join(f"{o['op']} '{o['node']}'" for o in ops[:limit])
    return f"{len(ops)} op(s) in float ({shown}{', ...' if len(ops) > limit else ''})"


def float_ops_note(ops: list[dict], scheme: str) -> str:
    first = ops[0]
    return (f"{scheme} is not full integer: {describe(ops)}; {first['reason']} (all listed "
            "in manifest quantization.float_ops)")


def device_note(ops: list[dict], device: str, kind: str) -> str:
    """What an int8-only accelerator does with the float ops."""
    ops_named = sorted({o["op"] for o in ops})
    return (f"{device} ({kind}) runs int8 only: {', '.join(ops_named)} cannot run on it and "
            f"split the graph ({describe(ops)} fall back to the CPU)")


def require_full_integer(ops: list[dict], scheme: str) -> None:
    """--require-full-integer: one error naming the float ops."""
    if ops:
        raise ConversionError(f"--require-full-integer: the {scheme} model is not full "
                              f"integer: {describe(ops)}; {ops[0]['reason']}")
