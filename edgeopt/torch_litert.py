"""The second PyTorch route (`--torch-route litert`): litert-torch straight to a float .tflite.

The checked program edgeopt rebuilt (edgeopt.torch_program; never torch.export.load on the
user's file) goes to `litert_torch.convert`; the .tflite it writes has its input and output
tensors named as the program's (the ONNX route's names), then is checked against the
PyTorch program itself, per output, on the program's sample and seeded normal inputs, and
is loaded as any float .tflite is. The layout stays as litert-torch writes it: NCHW inputs
and outputs, with the transposes inside the graph (no `input_layout_changes`).

    >>> tflite_path, origin = convert_pt2(Path("model.pt2"), Path(tmp))  # doctest: +SKIP
    >>> origin.record()["route"]
    'litert'
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

from edgeopt.errors import ConversionError, ModelLoadError, first_line
from edgeopt.tflite_edit import pack, unpack
from edgeopt.torch_onnx import TorchOrigin, compare_outputs, example_args, parity_samples
from edgeopt.torch_program import import_torch, load_program, program_inputs, run_program

ROUTE = "litert"
INSTALL_HINT = ("--torch-route litert needs litert-torch, which is not installed: "
                "pip install 'edgeopt[torch]' (it brings litert-torch 0.10)")
_PROGRESS = "LITERT_TORCH_SHOW_PROGRESS"
LAYOUT_NOTE = ("litert-torch keeps the PyTorch layout: NCHW inputs and outputs, the "
               "transposes to NHWC inside the graph")


@contextlib.contextmanager
def _quiet():
    """litert-torch draws its progress with rich on sys.stdout and logs through handlers
    made on the real sys.stderr (torchao's "Failed to load" kernels at import, "converted
    in training mode" for an exported program, which has no train/eval); none of it may
    reach the user's terminal or a --json stdout. Its progress is switched off for the call
    only (an environment variable it reads)."""
    before = os.environ.get(_PROGRESS)
    os.environ[_PROGRESS] = "n"
    level = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(
                io.StringIO()):
            yield
    finally:
        logging.disable(level)
        if before is None:
            os.environ.pop(_PROGRESS, None)
        else:
            os.environ[_PROGRESS] = before


def import_litert_torch():
    """litert_torch, or the one error that says what to install."""
    if importlib.util.find_spec("litert_torch") is None:
        raise ModelLoadError(INSTALL_HINT)
    try:
        with _quiet():
            import litert_torch
    except ImportError as exc:
        raise ModelLoadError(f"{INSTALL_HINT} ({first_line(exc)})") from None
    return litert_torch


def converter_name() -> str:
    try:
        return f"litert_torch.convert (litert-torch {version('litert-torch')})"
    except PackageNotFoundError:
        return "litert_torch.convert"


def _convert(program, label: str) -> bytes:
    litert_torch = import_litert_torch()
    try:
        with _quiet():
            edge = litert_torch.convert(program.module(), example_args(program))
            return bytes(edge.model_content())
    except Exception as exc:  # litert-torch raises its own and MLIR's error types per op
        raise ConversionError(f"{label}: litert-torch cannot convert the program: "
                              f"{type(exc).__name__}: {first_line(exc)}") from None


def output_names(program) -> list[str]:
    """The program's user outputs, as the ONNX exporter names them."""
    return [str(n) for n in program.graph_signature.user_outputs]


def module_path(location: str) -> str | None:
    """`features.1.0` from a litert-torch tensor name, an MLIR location per fused op
    (`Net/torch.nn.modules.container.Sequential_features/...conv.Conv2d_0;1`, joined by
    `;;`, the first op's last: a convolution with a fused ReLU is named by the convolution,
    as the ONNX route names it); None for the root module's own ops and other names."""
    segments = location.split(";;")[-1].rsplit(";", 1)[0].split("/")
    if len(segments) < 2 or ";" in segments[0]:
        return None
    attrs = []
    for segment in segments[1:]:
        kind = segment.rsplit(".", 1)[-1].lstrip("_")  # Class_attr (a private _Class too)
        if "_" not in kind:
            return None
        attrs.append(kind.split("_", 1)[1])
    return ".".join(attrs)


def _name_by_module(graph, kept: set[int]) -> int:
    """Name the tensors the ops compute by module path, how many. A module's last tensor
    takes the plain path (`features.0.0`: its output, what the layer report shows), the
    ones before it `features.0.0/1`, ... (litert-torch's layout transposes, say)."""
    produced = [t for op in graph.operators for t in op.outputs if t >= 0 and t not in kept]
    taken = {_text(t.name) for t in graph.tensors}
    named = 0
    for index in reversed(dict.fromkeys(produced)):
        tensor = graph.tensors[index]
        path = module_path(_text(tensor.name))
        if path is None:
            continue
        name = next(c for c in [path, *(f"{path}/{k}" for k in range(1, len(taken) + 2))]
                    if c not in taken)
        taken.add(name)
        tensor.name = name
        named += 1
    return named


def _text(value: bytes | str | None) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value or ""


def name_like_program(tflite: bytes, inputs: list[str], outputs: list[str]
                      ) -> tuple[bytes, int]:
    """The .tflite with its graph inputs and outputs (tensors and signature keys) named as
    the program's, in the program's order, and its other activations by module path (the
    layer report then says `features.3.conv.0`); and how many got a module path.
    ConversionError when the input or output counts differ."""
    model = unpack(tflite)
    if model is None:
        return tflite, 0
    graph = model.subgraphs[0]
    if len(graph.inputs) != len(inputs) or len(graph.outputs) != len(outputs):
        raise ConversionError(f"litert-torch wrote a .tflite with {len(graph.inputs)} inputs "
                              f"and {len(graph.outputs)} outputs; the program has "
                              f"{len(inputs)} and {len(outputs)}")
    named = {**dict(zip(graph.inputs, inputs)), **dict(zip(graph.outputs, outputs))}
    for index, name in named.items():
        graph.tensors[index].name = name
    for signature in model.signatureDefs or []:
        for tensor_map in [*(signature.inputs or []), *(signature.outputs or [])]:
            if tensor_map.tensorIndex in named:
                tensor_map.name = named[tensor_map.tensorIndex]
    count = _name_by_module(graph, set(named))
    return pack(model), count


def _run_tflite(tflite: bytes, feeds: dict[str, np.ndarray], names: list[str]
                ) -> list[np.ndarray]:
    """Each sample through LiteRT, outputs in the graph's order."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=tflite)
    interpreter.allocate_tensors()
    inputs, outputs = interpreter.get_input_details(), interpreter.get_output_details()
    rows: list[list[np.ndarray]] = []
    for i in range(len(feeds[names[0]])):
        for detail, name in zip(inputs, names):
            interpreter.set_tensor(detail["index"], feeds[name][i:i + 1].astype(
                detail["dtype"]))
        interpreter.invoke()
        rows.append([interpreter.get_tensor(d["index"]).copy() for d in outputs])
    return [np.concatenate(parts) for parts in zip(*rows)]


def check_tflite(program, tflite: bytes, label: str) -> tuple[dict, ...]:
    """Per output, the litert-torch .tflite against the PyTorch program on sample inputs."""
    feeds = parity_samples(program)
    names = program_inputs(program)
    reference = run_program(program, feeds, names)
    candidate = _run_tflite(tflite, feeds, names)
    return compare_outputs(reference, candidate, output_names(program), label,
                           "the litert-torch .tflite")


def convert_pt2(path: Path, folder: Path) -> tuple[Path, TorchOrigin]:
    """`folder/<stem>.tflite` converted by litert-torch from the checked program, and where
    it came from."""
    import_litert_torch()  # before the program is rebuilt: the missing package is the error
    program = load_program(path)
    torch = import_torch()
    content, named = name_like_program(_convert(program, str(path)), program_inputs(program),
                                       output_names(program))
    outputs = check_tflite(program, content, str(path))
    tflite_path = folder / f"{path.stem or 'model'}.tflite"
    tflite_path.write_bytes(content)
    return tflite_path, TorchOrigin(path, program, torch.__version__, outputs, named,
                                    route=ROUTE, exporter=converter_name(), layout=LAYOUT_NOTE)
