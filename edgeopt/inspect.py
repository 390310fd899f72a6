"""`edgeopt inspect`: what a model is, from its graph: IO, ops, parameters, MACs, size.

    >>> record = inspect_model("samples/digits_cnn.onnx")
    >>> record["format"], record["macs"] > 0
    ('onnx', True)

Keras and SavedModel inputs are read through their float `.tflite` conversion, which is
the graph a device would run. With ``--device``, an .onnx input is also placed as an .onnx
artifact runs: on the onnxruntime execution provider of the device's delegate
(``onnx_placement``; `build --format onnx` ships that).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from edgeopt.converters.float_tflite import to_float_tflite
from edgeopt.converters.onnx_adapt import adapt_onnx
from edgeopt.converters.onnx_pin import held_inputs
from edgeopt.delegates import place_for_device
from edgeopt.delegates.onnx_placement import place_onnx_for_device
from edgeopt.delegates.onnx_shapes import dynamic_inputs, with_fixed_inputs
from edgeopt.devices.profile import all_profiles, load_profile
from edgeopt.graph import Graph
from edgeopt.model import ModelHandle, load_model, with_input_shapes
from edgeopt.onnx_reader import read_onnx
from edgeopt.tflite_reader import read_tflite


def _tflite_bytes(handle: ModelHandle) -> bytes:
    """The .tflite a device would run: the file itself, or the float conversion."""
    if handle.format == "tflite":
        return handle.tflite_bytes()
    with tempfile.TemporaryDirectory(prefix="edgeopt-inspect-") as tmp:
        return to_float_tflite(handle, Path(tmp)).tflite


def placement_record(handle: ModelHandle, device: str) -> dict:
    """Per-op placement on one device, or one summary line per device for `all`; for an
    .onnx input, its placement on onnxruntime's execution provider too."""
    tflite = _tflite_bytes(handle)
    onnx = _onnx_as_built(handle) if handle.format == "onnx" and handle.torch is None else None
    if device == "all":
        lines = []
        for profile in all_profiles():
            placement = place_for_device(tflite, profile)
            line = {"device": profile.name, "summary": placement.summary_line(),
                    **placement.manifest_json()}
            if onnx:
                line["onnx_summary"] = place_onnx_for_device(onnx, profile).summary_line()
            lines.append(line)
        return {"devices": lines}
    profile = load_profile(device)
    placement = place_for_device(tflite, profile)
    record = {"device": device, "placement": placement.to_json(),
              "summary": placement.summary_line()}
    if onnx:
        on_ort = place_onnx_for_device(onnx, profile)
        record["onnx_placement"] = {"summary": on_ort.summary_line(), **on_ort.to_json()}
    return record


def _onnx_as_built(handle: ModelHandle) -> bytes:
    """The .onnx as `build --format onnx` places it: dynamic input dimensions at the
    --input-shape sizes, 1 where none is given."""
    content = Path(handle.path).read_bytes()
    if not dynamic_inputs(content):
        return content
    return with_fixed_inputs(content, {s.name: s.shape for s in handle.inputs
                                       if all(d > 0 for d in s.shape)})


def graph_of(handle: ModelHandle) -> tuple[Graph, str]:
    """The graph and what it was read from."""
    if handle.format == "tflite":
        if handle.prepared is not None:
            return (read_tflite(handle.prepared),
                    f"the .tflite flatbuffer, as prepared ({'; '.join(handle.preparation)})")
        return read_tflite(handle.path), "the .tflite flatbuffer"
    if handle.format == "onnx":
        return read_onnx(handle.path), "the ONNX graph"
    with tempfile.TemporaryDirectory(prefix="edgeopt-inspect-") as tmp:
        conversion = to_float_tflite(handle, Path(tmp))
    return read_tflite(conversion.tflite), f"its float .tflite conversion ({conversion.converter})"


def inspect_model(path: str, device: str | None = None,
                  input_shapes: tuple[str, ...] = (),
                  input_values: tuple[str, ...] = (), torch_route: str = "onnx") -> dict:
    """The inspection record; `input_shapes` (--input-shape) fix dynamic dimensions,
    `input_values` (--input-value) pin inputs, `torch_route` (--torch-route) says how a
    .pt2 becomes the model inspected."""
    handle, values = held_inputs(with_input_shapes(load_model(path, torch_route),
                                                   input_shapes), input_values)
    if values or device:  # the model a build would convert: pinned, dequantized
        handle = adapt_onnx(handle, values, None)
    graph, read_from = graph_of(handle)
    placement = placement_record(handle, device) if device else {}
    # A .pt2 is read as its ONNX export (or litert-torch .tflite): name the user's file,
    # and say so.
    shown = handle.torch.pt2 if handle.torch is not None else Path(path)
    if handle.torch is not None:
        read_from = f"{read_from} {_FROM_PYTORCH[handle.torch.route]}"
    return {
        "model": str(shown), "format": "pt2" if handle.torch else handle.format,
        "size_bytes": shown.stat().st_size if handle.torch or handle.adaptation
        else handle.size_bytes,
        "inputs": [s.to_json() for s in handle.inputs],
        "outputs": [s.to_json() for s in handle.outputs],
        "graph_read_from": read_from,
        "ops": len(graph.ops), "subgraphs": graph.subgraph_count,
        "op_histogram": graph.op_histogram(),
        "parameters": graph.param_count(), "parameter_bytes": graph.param_bytes(),
        "macs": graph.total_macs(),
        **({"onnx_rewrite": handle.adaptation} if handle.adaptation else {}),
        **placement,
    }


_FROM_PYTORCH = {"onnx": "exported from PyTorch",
                 "litert": "converted from PyTorch by litert-torch"}


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
    lines += [f"  rewritten first: {note}" for note in record.get("onnx_rewrite", {}).get(
        "notes", [])]
    if "devices" in record:
        lines.append("  placement per device:")
        for line in record["devices"]:
            lines.append(f"    {line['summary']}")
            if "onnx_summary" in line:
                lines.append(f"      as .onnx: {line['onnx_summary']}")
    if "placement" in record:
        lines += _placement_lines(record)
    if "onnx_placement" in record:
        lines += _onnx_lines(record["onnx_placement"])
    return "\n".join(lines)


def _onnx_lines(onnx: dict) -> list[str]:
    """The .onnx artifact's placement on onnxruntime's execution provider."""
    ops = onnx.get("ops", [])
    lines = [f"  as .onnx on onnxruntime: {onnx['summary']}"]
    width = max((len(op["op"]) for op in ops), default=0)
    for op in ops:
        reason = f"  {op['reason']}" if op.get("reason") else ""
        lines.append(f"    {op['index']:>4}  {op['op'].ljust(width)}  {op['unit']:<8}{reason}")
    return lines


def _placement_lines(record: dict) -> list[str]:
    ops = record["placement"]["ops"]
    lines = [f"  placement: {record['summary']}"]
    width = max((len(op["op"]) for op in ops), default=0)
    for op in ops:
        reason = f"  {op['reason']}" if op["reason"] else ""
        lines.append(f"    {op['index']:>4}  {op['op'].ljust(width)}  {op['unit']:<8}{reason}")
        if op["rewrite"]:
            lines.append(f"    {'':>4}  {'':<{width}}  {'':<8}fix: {op['rewrite']}")
    return lines
