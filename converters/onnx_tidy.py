"""Rewrites of an ONNX graph that keep its meaning and spare onnx2tf its known mistakes.

onnx2tf turns channels-first tensors channels-last and re-maps each op's axes; some op
forms lose their way in that re-mapping. Each rewrite here replaces one such form with an
equal, simpler one, in the main graph and in every If/Loop/Scan body.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

# Slice ends at or beyond this run to the end of the axis (exporters write INT64_MAX,
# tf2onnx INT32_MAX)
_TO_END = 2**31 - 1


def _bodies(graph):
    """The graph and every subgraph inside it."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for body in [attr.g] if attr.HasField("g") else list(attr.graphs):
                yield from _bodies(body)


class Constants(Mapping):
    """The graph's constant tensors by name (its initializers, then Constant nodes' values),
    each made a numpy array the first time it is read: a rewrite that looks at a few
    scalars does not copy every weight of the model."""

    def __init__(self, graph) -> None:
        self._protos = {t.name: t for t in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant" and node.attribute and \
                    node.attribute[0].name == "value":
                self._protos[node.output[0]] = node.attribute[0].t
        self._arrays: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._arrays:
            from onnx import numpy_helper

            self._arrays[name] = numpy_helper.to_array(self._protos[name])
        return self._arrays[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._protos)

    def __len__(self) -> int:
        return len(self._protos)


def constants(graph) -> Constants:
    """The graph's constant tensors by name: its initializers and Constant nodes' values."""
    return Constants(graph)


def _slice_parts(node, values: Mapping[str, np.ndarray]) -> list[np.ndarray] | None:
    """starts, ends, axes, steps of an opset-10+ Slice when all four are constants."""
    if len(node.input) < 4 or any(name not in values for name in node.input[1:4]):
        return None
    starts, ends, axes = (values[name].astype(np.int64) for name in node.input[1:4])
    if len(node.input) > 4 and node.input[4]:
        if node.input[4] not in values:
            return None
        return [starts, ends, axes, values[node.input[4]].astype(np.int64)]
    return [starts, ends, axes, np.ones_like(starts)]


def plain_slices(model) -> int:
    """Drop the axes a constant Slice takes whole (start 0, to the end, step 1).

    onnxslim merges slices into one over every axis ([0, 129, 0] to [MAX, MAX, MAX] on
    axes 0..2); onnx2tf re-maps such a slice of a channels-first tensor onto the wrong
    axis (silero-vad's STFT magnitude came out with 0 channels, then its LSTM refused
    the empty sequence; basic-pitch's tf2onnx slice over axes [0, 2, 1, 3] cut the wrong
    one). The slice over the one axis that is cut is the same op.
    Returns how many slices were rewritten.
    """
    from onnx import numpy_helper

    rewritten = 0
    for graph in _bodies(model.graph):
        values = constants(graph)
        for node in graph.node:
            parts = _slice_parts(node, values) if node.op_type == "Slice" else None
            if parts is None:
                continue
            starts, ends, _axes, steps = parts
            keep = [k for k in range(len(starts))
                    if not (starts[k] == 0 and ends[k] >= _TO_END and steps[k] == 1)]
            if not keep or len(keep) == len(starts):
                continue
            names = []
            for role, value in zip(("starts", "ends", "axes", "steps"), parts):
                tensor = numpy_helper.from_array(value[keep],
                                                 f"{node.output[0]}__plain_{role}")
                graph.initializer.append(tensor)
                names.append(tensor.name)
            del node.input[1:]
            node.input.extend(names)
            rewritten += 1
    return rewritten


def tidy(model) -> list[str]:
    """Apply every rewrite; what was changed, one line each (for the conversion log)."""
    notes = []
    if count := plain_slices(model):
        notes.append(f"{count} Slice op(s) reduced to the axes they cut")
    return notes
