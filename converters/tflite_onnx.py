"""A .tflite, Keras or SavedModel source -> float ONNX, for `build --format onnx`.

One route for all three: the float `.tflite` edgeopt already makes (batch 1, dynamic
dimensions fixed, fp16/sparse weights folded; `to_float_tflite`), then tf2onnx's TFLite
reader. The ONNX graph gets the source's input and output names, in the source's output
order, so onnxruntime is fed and read exactly as the source is. The build checks it
against the source in the source's own runtime (LiteRT, Keras, TensorFlow) before the
ONNX quantizer sees it.

    >>> conversion = to_float_onnx(handle, workdir, samples)
    >>> conversion.onnx[:2]
    b'\\x08\\x08'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeopt.converters.float_tflite import to_float_tflite
from edgeopt.errors import ConfigError, ConversionError, first_line
from edgeopt.model import ModelHandle, tflite_interpreter
from edgeopt.quiet import captured_prints
from edgeopt.runtime import match_input_names, match_outputs, signature_output_keys
from edgeopt.tf_env import quiet_tensorflow
from edgeopt.tflite_prepare import given_scheme
from edgeopt.tflite_reader import read_tflite

# tf2onnx's own preferred opset; edgeopt's ONNX quantizer lifts what needs more.
OPSET = 15
# TFLite ops that keep state between invokes (a streaming model): an ONNX graph has no
# variables, so the state would have to become inputs and outputs the app carries.
STATE_OPS = {"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"}


@dataclass(frozen=True)
class OnnxConversion:
    onnx: bytes
    converter: str
    float_tflite_bytes: int
    batch_fixed: bool
    preparation: tuple[str, ...]  # what edgeopt changed in a .tflite source (fp16 folded...)


def to_float_onnx(handle: ModelHandle, workdir: Path,
                  samples: dict[str, np.ndarray] | None = None,
                  keras_model=None) -> OnnxConversion:
    """Convert a .tflite/Keras/SavedModel `handle` to a float ONNX model with the source's
    IO names and order. Bad inputs raise one-line errors:

    - "the .tflite is already quantized (w8a8); ... build it with --format tflite"
    - "the .tflite keeps state between invokes (VAR_HANDLE, ...): ... --format tflite"
    - "tf2onnx could not convert the float .tflite: ..."
    """
    conv = to_float_tflite(handle, workdir, samples, keras_model)
    _check_convertible(conv.tflite)
    _check_layouts(conv.input_perms, conv.output_perms)
    model = _tf2onnx(conv.tflite, workdir / "float.tflite")
    _rename_io(model, *_source_names(handle, conv.tflite))
    name = f"{conv.converter} + tf2onnx {_version('tf2onnx')}" if conv.tf_source else \
        f"tf2onnx {_version('tf2onnx')} (from the .tflite)"
    return OnnxConversion(model.SerializeToString(), name, len(conv.tflite),
                          bool(conv.tf_source and conv.tf_source.batch_fixed), handle.preparation)


def _check_convertible(tflite: bytes) -> None:
    """Refuse what a float ONNX graph cannot say: integer models, state between invokes."""
    graph = read_tflite(tflite)
    given = given_scheme(graph)
    if given is not None:
        raise ConfigError(f"the .tflite is already quantized ({given}: integer weights and "
                          "activations); edgeopt does not dequantize it into a float ONNX "
                          "graph: build it with --format tflite (shipped as given), or give "
                          "the float model for --format onnx")
    found = sorted({op.op for op in graph.ops} & STATE_OPS)
    if found:
        raise ConfigError(f"the .tflite keeps state between invokes ({', '.join(found)}: a "
                          "streaming model); an ONNX graph has no variables: build it with "
                          "--format tflite")


def _check_layouts(input_perms: dict, output_perms: tuple) -> None:
    """The TFLite converter keeps a TensorFlow model's layout (only onnx2tf moves axes);
    the ONNX graph is fed in the source's layout, so a move here would be a wrong model."""
    if input_perms or any(p is not None for p in output_perms):
        raise ConversionError("the float .tflite changed the layout of the model's inputs "
                              "or outputs; edgeopt cannot make an ONNX model of the "
                              "source's layout from it")


def _tf2onnx(tflite: bytes, path: Path):
    """tf2onnx's TFLite route, with every op converted (no leftover TFLite ops)."""
    quiet_tensorflow()
    import tensorflow as tf
    from tf2onnx import convert
    from tf2onnx import logging as tf2onnx_logging

    tf2onnx_logging.set_level(tf2onnx_logging.ERROR)
    path.write_bytes(tflite)
    try:
        with captured_prints(), tf.device("/cpu:0"):
            # from_tflite passes continue_on_error=True, which leaves an op it cannot
            # convert in the graph; the common path with False names it instead.
            model, _ = convert._convert_common(None, tflite_path=str(path), name="model",
                                               opset=OPSET, continue_on_error=False)
    except Exception as exc:  # tf2onnx raises ValueError, KeyError, IndexError...
        raise ConversionError(f"tf2onnx could not convert the float .tflite: "
                              f"{first_line(exc) or type(exc).__name__}") from exc
    return model


def _source_names(handle: ModelHandle, tflite: bytes) -> tuple[dict[str, str], list[str]]:
    """.tflite tensor name -> source name, for inputs and outputs (tf2onnx keeps the tensor
    names; the TFLite converter reorders outputs, matched as the .tflite route matches
    them), and the .tflite output tensor of each source output, in the source's order."""
    interpreter = tflite_interpreter(tflite)
    ins, outs = interpreter.get_input_details(), interpreter.get_output_details()
    tensors = [d["name"] for d in ins]
    names = dict(zip(tensors, match_input_names([s.name for s in handle.inputs], tensors)))
    order = match_outputs(handle.outputs, signature_output_keys(interpreter, outs),
                          [tuple(int(x) for x in d["shape"]) for d in outs],
                          [d["name"] for d in outs])
    names.update({outs[j]["name"]: spec.name for spec, j in zip(handle.outputs, order)})
    return names, [outs[j]["name"] for j in order]


def _rename_io(model, names: dict[str, str], output_order: list[str]) -> None:
    """Give the graph's inputs and outputs the source's names and order the outputs as
    the source's (`output_order`: the tensor names, source order)."""
    graph = model.graph
    io = [v.name for v in (*graph.input, *graph.output)]
    missing = [n for n in io if n not in names]
    if missing or len(graph.output) != len(output_order):
        raise ConversionError(f"tf2onnx's graph IO {io} does not match the .tflite's "
                              f"{sorted(names)}")
    by_name = {o.name: o for o in graph.output}
    ordered = [by_name[n] for n in output_order]
    copies = [type(o)() for o in ordered]
    for copy, value in zip(copies, ordered):
        copy.CopyFrom(value)
    del graph.output[:]
    graph.output.extend(copies)
    renames = {k: v for k, v in names.items() if k != v and k in io}
    clash = (_tensor_names(graph) - set(renames)) & set(renames.values())
    if clash:
        raise ConversionError(f"cannot name the ONNX model's IO as the source's: "
                              f"{sorted(clash)[0]!r} is already a tensor of the graph")
    _apply_renames(graph, renames)


def _subgraphs(graph):
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield attr.g
            yield from attr.graphs


def _tensor_names(graph) -> set[str]:
    names = {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
    names |= {t.name for t in graph.initializer}
    for node in graph.node:
        names |= set(node.input) | set(node.output)
    for sub in _subgraphs(graph):
        names |= _tensor_names(sub)
    return names


def _apply_renames(graph, renames: dict[str, str]) -> None:
    """Rename tensors everywhere they appear (subgraphs read outer names too)."""
    if not renames:
        return
    for value in (*graph.input, *graph.output, *graph.value_info, *graph.initializer):
        value.name = renames.get(value.name, value.name)
    for node in graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]
    for sub in _subgraphs(graph):
        _apply_renames(sub, renames)


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)
