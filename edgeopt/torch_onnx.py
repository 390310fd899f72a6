"""Export a checked PyTorch program to ONNX, the route every later stage already takes.

`torch.onnx.export(program, dynamo=True)` writes the graph as standard ONNX ops; edgeopt
then names each node by the PyTorch module that made it (`features.3.conv.0`, from the
exporter's `name_scopes` metadata; a BatchNorm folded into its Conv names the block that
holds both), drops the metadata that carries the exporting machine's source paths, and
checks the ONNX model against the PyTorch program itself, per output, before any stage
sees it. The .onnx then goes through edgeopt.model's ONNX checks like any user file.

    >>> onnx_path, origin = export_pt2(Path("model.pt2"), Path(tmp))   # doctest: +SKIP
    >>> origin.record()["parity"]["cosine"] > 0.9999
    True
"""

from __future__ import annotations

import ast
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgeopt.errors import ConversionError, ModelLoadError, first_line
from edgeopt.torch_program import import_torch, load_program, program_inputs, run_program
from edgeopt.validate import cosine_similarity

OPSET = 18  # what onnx2tf and onnxruntime's quantizers take without surprises
PARITY_SAMPLES = 4
BROKEN_COSINE = 0.9  # as converters/parity.py: below it the export computes something else
WARN_COSINE = 0.9999
_SCOPES = "pkg.torch.onnx.name_scopes"
_FUSED_BN = "FuseBatchNormIntoConv"


EXPORTER = f"torch.onnx.export (dynamo=True, opset {OPSET})"


@dataclass(frozen=True)
class TorchOrigin:
    """Where a handle came from: a PyTorch program, exported by edgeopt to ONNX (route
    `onnx`) or converted by litert-torch to a float .tflite (route `litert`)."""

    pt2: Path
    program: object = field(repr=False, compare=False)
    torch_version: str
    outputs: tuple[dict, ...]
    named_layers: int
    # ONNX tensors named by their module path, what a .tflite's tensors are renamed to
    module_tensors: frozenset[str] = frozenset()
    route: str = "onnx"
    exporter: str = EXPORTER
    layout: str | None = None  # the litert route keeps NCHW: said in the record

    def record(self) -> dict:
        """manifest conversion.torch_export."""
        worst = min(self.outputs, key=lambda o: o["cosine"])
        return {"route": self.route, "exporter": self.exporter,
                "torch_version": self.torch_version,
                "parity": {"samples": worst["samples"],
                           "max_abs": max(o["max_abs"] for o in self.outputs),
                           "cosine": worst["cosine"], "warning": worst["cosine"] < WARN_COSINE},
                "outputs": list(self.outputs), "named_layers": self.named_layers,
                **({"layout": self.layout} if self.layout else {})}


def example_args(program) -> tuple:
    """The program's own sample inputs, else zeros of its placeholder shapes."""
    torch = import_torch()
    if program.example_inputs is not None:
        args, kwargs = program.example_inputs
        if not kwargs:
            return tuple(args)
    names = program_inputs(program)
    values = {n.name: n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder"}
    return tuple(torch.zeros(tuple(int(d) for d in values[n].shape), dtype=values[n].dtype)
                 for n in names)


def _module_path(node) -> str | None:
    props = {p.key: p.value for p in node.metadata_props}
    try:
        scopes = ast.literal_eval(props.get(_SCOPES, "[]"))
    except (ValueError, SyntaxError):
        return None
    if not isinstance(scopes, list) or len(scopes) < 2 or not scopes[-2]:
        return None
    path = str(scopes[-2])
    if _FUSED_BN in props.get("pkg.onnxscript.rewriter.rule_name", "") and "." in path:
        path = path.rsplit(".", 1)[0]
    return path


def _unique(path: str, op_type: str, taken: set[str]) -> str:
    candidates = [path, f"{path}/{op_type}"]
    candidates += [f"{path}/{op_type}_{k}" for k in range(1, len(taken) + 2)]
    return next(c for c in candidates if c not in taken)


def _rename_tensors(graph, renamed: dict[str, str]) -> set[str]:
    """Give each renamed node's output tensors its name (the calibration core's layer
    report names a layer by its output tensor); graph inputs and outputs keep theirs.
    The new tensor names."""
    kept = {v.name for v in [*graph.input, *graph.output]} | {t.name for t in graph.initializer}
    values: dict[str, str] = {}
    for node in graph.node:
        if node.name not in renamed:
            continue
        outputs = [o for o in node.output if o and o not in kept]
        for i, old in enumerate(outputs):
            values[old] = node.name if len(outputs) == 1 else f"{node.name}/out{i}"
    for node in graph.node:
        node.input[:] = [values.get(n, n) for n in node.input]
        node.output[:] = [values.get(n, n) for n in node.output]
    for info in graph.value_info:
        info.name = values.get(info.name, info.name)
    return set(values.values())


def name_by_module(model) -> tuple[int, frozenset[str]]:
    """Rename nodes (and their output tensors) after their PyTorch module paths: how many
    got one, and the renamed tensors. Clears the exporter's metadata."""
    graph = model.graph
    taken = {n.name for n in graph.node} | {v.name for v in [*graph.input, *graph.output]}
    taken |= {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output}
    renamed: dict[str, str] = {}
    for node in graph.node:
        path = _module_path(node)
        del node.metadata_props[:]
        if path is None:
            continue
        name = _unique(path, node.op_type, taken)
        taken.add(name)
        renamed[name] = node.name
        node.name = name
    tensors: set[str] = set()
    if not any(a.g.node or a.graphs for n in graph.node for a in n.attribute):
        tensors = _rename_tensors(graph, renamed)  # a subgraph refers to outer names
    return len(renamed), frozenset(tensors)


# torch.onnx warns once per torchvision op it skips when torchvision is absent (the torch
# extra does not bring it): four lines on stderr before edgeopt's own output, about ops the
# allowlist refuses anyway.
_REGISTRATION_LOGGER = "torch.onnx._internal.exporter._registration"


def _export(program, path: Path):
    torch = import_torch()
    logging.getLogger(_REGISTRATION_LOGGER).setLevel(logging.ERROR)
    try:
        exported = torch.onnx.export(program, example_args(program), dynamo=True,
                                     opset_version=OPSET, optimize=True, verbose=False)
    except ImportError as exc:
        raise ModelLoadError(f"the ONNX exporter needs onnxscript ({first_line(exc)}): "
                             "pip install 'edgeopt[torch]'") from None
    except Exception as exc:  # the exporter raises its own error types per failing op
        raise ConversionError(f"{path}: torch.onnx.export cannot export the program: "
                              f"{type(exc).__name__}: {first_line(exc)}") from None
    model = exported.model_proto
    return model, *name_by_module(model)


def parity_samples(program, seed: int = 0) -> dict[str, np.ndarray]:
    """The sample inputs and a few seeded normal ones, one sample per row."""
    rng = np.random.default_rng(seed)
    args = example_args(program)
    feeds = {}
    for name, arg in zip(program_inputs(program), args):
        example = arg.detach().cpu().numpy()
        if np.issubdtype(example.dtype, np.floating):
            extra = rng.standard_normal((PARITY_SAMPLES - 1, *example.shape)).astype(example.dtype)
            feeds[name] = np.concatenate([example[None], extra]).reshape(-1, *example.shape[1:])
        else:
            feeds[name] = np.repeat(example[None], PARITY_SAMPLES, 0).reshape(
                -1, *example.shape[1:])
    return feeds


def compare_outputs(reference: list[np.ndarray], candidate: list[np.ndarray],
                    output_names: list[str], label: str, what: str) -> tuple[dict, ...]:
    """Per output, `what` (the ONNX export, the litert-torch .tflite) against the PyTorch
    program's outputs; ConversionError when one computes something else."""
    records = []
    for name, ref, cand in zip(output_names, reference, candidate):
        if ref.shape != cand.shape:
            raise ConversionError(f"{label}: {what} gives output '{name}' of shape "
                                  f"{list(cand.shape)}, the PyTorch program {list(ref.shape)}")
        diff = float(np.max(np.abs(ref.astype(np.float64) - cand))) if ref.size else 0.0
        cosine = cosine_similarity(ref, cand)
        if cosine < BROKEN_COSINE:
            raise ConversionError(f"{label}: {what} changed output '{name}' (cosine "
                                  f"{cosine:.3f} against the PyTorch program, max abs "
                                  f"{diff:.3g})")
        records.append({"name": name, "samples": len(ref), "max_abs": diff, "cosine": cosine})
    return tuple(records)


def check_export(program, onnx_bytes: bytes, output_names: list[str], label: str
                 ) -> tuple[dict, ...]:
    """Per output, the ONNX export against the PyTorch program on sample inputs."""
    import onnxruntime as ort

    feeds = parity_samples(program)
    reference = run_program(program, feeds)
    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    batch = len(next(iter(feeds.values())))
    step = session.get_inputs()[0].shape[0]
    step = step if isinstance(step, int) and step > 0 else batch
    parts = [session.run(None, {k: v[i:i + step] for k, v in feeds.items()})
             for i in range(0, batch, step)]
    candidate = [np.concatenate(p) for p in zip(*parts)]
    return compare_outputs(reference, candidate, output_names, label, "the ONNX export")


def export_pt2(path: Path, folder: Path) -> tuple[Path, TorchOrigin]:
    """`folder/<stem>.onnx` exported from the checked program, and where it came from."""
    program = load_program(path)
    torch = import_torch()
    model, named, tensors = _export(program, path)
    content = model.SerializeToString()
    outputs = check_export(program, content, [o.name for o in model.graph.output], str(path))
    onnx_path = folder / f"{path.stem or 'model'}.onnx"
    onnx_path.write_bytes(content)
    return onnx_path, TorchOrigin(path, program, torch.__version__, outputs, named, tensors)
