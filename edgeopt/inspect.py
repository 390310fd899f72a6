"""`edgeopt inspect`: what a model is, from its graph: IO, ops, parameters, MACs, size.

    >>> record = inspect_model("samples/digits_cnn.onnx")
    >>> record["format"], record["macs"] > 0
    ('onnx', True)

Keras and SavedModel inputs are read through their float `.tflite` conversion, which is
the graph a device would run.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from edgeopt.graph import Graph
from edgeopt.model import ModelHandle, load_model


def graph_of(handle: ModelHandle) -> tuple[Graph, str]:
    """The graph and what it was read from."""
    if handle.format == "tflite":
        from edgeopt.tflite_reader import read_tflite

        return read_tflite(handle.path), "the .tflite flatbuffer"
    if handle.format == "onnx":
        from edgeopt.onnx_reader import read_onnx

        return read_onnx(handle.path), "the ONNX graph"
    from edgeopt.converters.float_tflite import to_float_tflite
    from edgeopt.tflite_reader import read_tflite

    with tempfile.TemporaryDirectory(prefix="edgeopt-inspect-") as tmp:
        conversion = to_float_tflite(handle, Path(tmp))
    return read_tflite(conversion.tflite), f"its float .tflite conversion ({conversion.converter})"


def inspect_model(path: str) -> dict:
    handle = load_model(path)
    graph, read_from = graph_of(handle)
    return {
        "model": str(handle.path), "format": handle.format, "size_bytes": handle.size_bytes,
        "inputs": [s.to_json() for s in handle.inputs],
        "outputs": [s.to_json() for s in handle.outputs],
        "graph_read_from": read_from,
        "ops": len(graph.ops), "subgraphs": graph.subgraph_count,
        "op_histogram": graph.op_histogram(),
        "parameters": graph.param_count(), "parameter_bytes": graph.param_bytes(),
        "macs": graph.total_macs(),
    }


def _human(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "" else f"{n:.2f}{unit}"
        n /= 1000
    return str(n)


def render_inspection(record: dict) -> str:
    lines = [f"{record['model']}  ({record['format']}, {record['size_bytes']:,} bytes)"]
    for role in ("inputs", "outputs"):
        for t in record[role]:
            quant, q = "", t["quantization"]
            if q:
                quant = f"  scale {q['scale']:.6g} zp {q['zero_point']}"
            lines.append(f"  {role[:-1]:<6} {t['name']}  {t['shape']}  {t['dtype']}{quant}")
    lines.append(f"  parameters {record['parameters']:,} ({record['parameter_bytes']:,} bytes), "
                 f"MACs {_human(record['macs'])}, {record['ops']} ops in "
                 f"{record['subgraphs']} subgraph(s), read from {record['graph_read_from']}")
    width = max((len(op) for op in record["op_histogram"]), default=0)
    lines += [f"    {op.ljust(width)}  {count}" for op, count in record["op_histogram"].items()]
    return "\n".join(lines)
