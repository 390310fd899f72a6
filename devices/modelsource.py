"""The model `edgeopt estimate` costs: a .tflite as it is, anything else converted to float.

A float model estimated for a device whose profile precision is int8 is costed as the
full-int8 model `edgeopt build` would ship (`assume_int8`), and the estimate says so.

    >>> source = load_estimate_model("model.keras", "int8")   # doctest: +SKIP
    >>> source.precision_note                                  # doctest: +SKIP
    'precision: int8 assumed (model.keras is float32; edgeopt build quantizes it ...)'
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from edgeopt.choices import EstimatePrecision, values
from edgeopt.converters.float_tflite import to_float_tflite
from edgeopt.data import DataSpec, load_data
from edgeopt.devices.opcost import compute_dtype
from edgeopt.graph import Graph, Quantization
from edgeopt.model import load_model, with_input_shapes
from edgeopt.quiet import library_output_to_log
from edgeopt.runtime import make_runner, run_dataset
from edgeopt.tflite_reader import read_tflite

PRECISIONS = values(EstimatePrecision)


@dataclass(frozen=True)
class EstimateModel:
    path: Path
    graph: Graph
    tflite: bytes | None
    precision_note: str = ""


def is_float(graph: Graph) -> bool:
    return any(compute_dtype(graph, op).startswith("float") for op in graph.ops_in_subgraph(0)
               if op.op not in ("QUANTIZE", "DEQUANTIZE"))


def assume_int8(graph: Graph) -> Graph:
    """The graph as full-int8 quantization would make it: float tensors become int8
    (constants a quarter of their size) with a placeholder scale."""
    placeholder = Quantization((1.0,), (0,))
    tensors = tuple(
        replace(t, dtype="int8", size_bytes=t.size_bytes // 4,
                quantization=t.quantization or placeholder)
        if t.dtype == "float32" else t
        for t in graph.tensors)
    return replace(graph, tensors=tensors)


def load_estimate_model(path: str | Path, device_precision: str,
                        precision: str = "auto",
                        input_shapes: tuple[str, ...] = ()) -> EstimateModel:
    """Read (or convert) ``path``; ``precision`` auto = the file's own for .tflite, the
    device's for other formats; int8 = always as full int8; model = as the file is."""
    path = Path(path)
    if path.suffix == ".tflite":
        load_model(path)  # the checks inspect makes: a corrupt file is refused, not estimated
        tflite = path.read_bytes()
        graph = read_tflite(path)
    else:
        tflite = _convert(path, input_shapes)
        graph = read_tflite(tflite)
    wanted = precision == "int8" or (precision == "auto" and path.suffix != ".tflite"
                                     and device_precision == "int8")
    if wanted and is_float(graph):
        note = (f"precision: int8 assumed ({path.name} is float; `edgeopt build` quantizes "
                "it to full int8 for this device)")
        return EstimateModel(path, assume_int8(graph), None, note)
    return EstimateModel(path, graph, tflite, f"precision: as in {path.name}")


def _convert(path: Path, input_shapes: tuple[str, ...] = ()) -> bytes:
    with tempfile.TemporaryDirectory(prefix="edgeopt-estimate-") as workdir, \
            library_output_to_log():
        handle = with_input_shapes(load_model(path), input_shapes)
        # onnx2tf checks its conversion on sample images; the estimate needs no real ones
        samples = load_data(DataSpec("random"), handle.inputs, hold_out=False)[0].arrays
        if handle.format == "onnx":  # run once under edgeopt's deadline: onnx2tf has none
            run_dataset(make_runner(handle), {k: v[:1] for k, v in samples.items()})
        return to_float_tflite(handle, Path(workdir), samples).tflite
