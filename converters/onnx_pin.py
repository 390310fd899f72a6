"""Inputs pinned to one value for the build (`--input-value NAME=VALUE`), and the control
flow that branches on an input's value.

silero-vad takes its sample rate `sr` as an input and branches on it (`If sr == 16000`:
the 8 kHz and 16 kHz networks). onnx2tf cannot convert an `If` that a runtime value
decides, and the shapes do not decide it (converters/onnx_fold). An app that runs the
VAD at 16 kHz always feeds 16000: pinned, the input becomes a constant of the graph, the
`If` folds into the branch it takes, and the artifact no longer has that input (the
manifest says the app must not feed it).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from edgeopt.errors import ConfigError
from edgeopt.model import ModelHandle, TensorSpec

FLAG = "--input-value"
# Ops whose output depends only on the shape of what they read, not its values.
_SHAPE_ONLY = {"Shape", "Size"}
_TRUE, _FALSE = {"true", "1"}, {"false", "0"}


def parse_input_value(text: str) -> tuple[str, str]:
    """`sr=16000` -> ('sr', '16000')."""
    name, sep, value = text.partition("=")
    if not sep or not name or not value.strip():
        raise ConfigError(f"{FLAG} '{text}': expected NAME=VALUE, e.g. sr=16000")
    return name, value.strip()


def _value(text: str, spec: TensorSpec, flag: str) -> np.ndarray:
    """The value as an array of the input's dtype and (static) shape."""
    dtype = np.dtype(spec.dtype)
    if any(d != 1 for d in spec.shape):
        raise ConfigError(f"{flag}: input '{spec.name}' has shape {list(spec.shape)}; only "
                          "an input that holds one value (a scalar, such as a sample rate) "
                          "can be pinned")
    kind = {"i": "an integer", "u": "an unsigned integer", "f": "a number", "b": "true or false"}
    try:
        if dtype.kind == "b":
            if text.lower() not in _TRUE | _FALSE:
                raise ValueError(text)
            number: object = text.lower() in _TRUE
        elif dtype.kind in "iu":
            number = int(text)
            if not np.iinfo(dtype).min <= number <= np.iinfo(dtype).max:
                raise ValueError(text)
        elif dtype.kind == "f":
            number = float(text)
        else:
            raise ConfigError(f"{flag}: input '{spec.name}' is of type {spec.dtype}, which "
                              "cannot be pinned")
    except ValueError:
        raise ConfigError(f"{flag}: input '{spec.name}' is {spec.dtype}; '{text}' is not "
                          f"{kind.get(dtype.kind, 'a value of that type')}") from None
    return np.full(spec.shape, number, dtype)


def held_inputs(handle: ModelHandle,
                texts: tuple[str, ...]) -> tuple[ModelHandle, dict[str, np.ndarray]]:
    """The handle without the pinned inputs (data need not hold them) and their values.
    Raises ConfigError for an unknown name, a value of the wrong type, a non-ONNX model."""
    if not texts:
        return handle, {}
    if handle.format != "onnx":
        raise ConfigError(f"{FLAG} pins an input of an .onnx model (got {handle.format}); "
                          "export the model with that value fixed instead")
    by_name = {spec.name: spec for spec in handle.inputs}
    values: dict[str, np.ndarray] = {}
    for text in texts:
        name, value = parse_input_value(text)
        spec = by_name.get(name)
        if spec is None:
            raise ConfigError(f"{FLAG} names '{name}', but the model's inputs are "
                              f"{', '.join(by_name)}")
        if name in values:
            raise ConfigError(f"{FLAG} gives input '{name}' twice")
        values[name] = _value(value, spec, f"{FLAG} {text}")
    if len(values) == len(by_name):
        raise ConfigError(f"{FLAG} pins every input of the model; leave at least one fed")
    kept = tuple(s for s in handle.inputs if s.name not in values)
    return replace(handle, inputs=kept), values


def pin(model, values: dict[str, np.ndarray]) -> None:
    """Turn the graph inputs named in `values` into initializers holding them (in place)."""
    from onnx import numpy_helper

    kept = [i for i in model.graph.input if i.name not in values]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    for init in list(model.graph.initializer):  # an input with a default value
        if init.name in values:
            model.graph.initializer.remove(init)
    for name, value in values.items():
        model.graph.initializer.append(numpy_helper.from_array(value, name))


def value_decided_ifs(model) -> list[tuple[str, list[str]]]:
    """(node name, graph inputs) for each main-graph `If` whose condition depends on the
    value of a graph input (not only on its shape)."""
    feeds = {i.name for i in model.graph.input} - {t.name for t in model.graph.initializer}
    producer = {out: node for node in model.graph.node for out in node.output}
    found = []
    for node in model.graph.node:
        if node.op_type != "If":
            continue
        reached, seen, todo = set(), set(), [node.input[0]]
        while todo:
            tensor = todo.pop()
            if tensor in seen:
                continue
            seen.add(tensor)
            if tensor in feeds:
                reached.add(tensor)
            source = producer.get(tensor)
            if source is not None and source.op_type not in _SHAPE_ONLY:
                todo.extend(t for t in source.input if t)
        if reached:
            found.append((node.name or "?", sorted(reached)))
    return found


def value_if_message(found: list[tuple[str, list[str]]]) -> str:
    """The user message for `If` nodes onnx2tf cannot convert because a value decides them."""
    node, inputs = found[0]
    names = ", ".join(f"'{n}'" for n in inputs)
    hint = " ".join(f"{FLAG} {n}=VALUE" for n in inputs)
    return (f"ONNX If node {node} branches on the value of input {names}, which onnx2tf "
            f"cannot convert; options: pin the input for the build with {hint} (the value "
            "your app always feeds, e.g. the sample rate; the artifact then has no such "
            "input), or build with --format onnx to keep the model in onnxruntime")
