"""A copy of a .tflite whose every op output is also a model output.

    >>> exposed = expose_op_outputs(Path("model.tflite").read_bytes())
    >>> len(exposed.tensors)            # tensor indices as in the original model
    37

A delegate computes a whole partition out of sight: its inner tensors never reach the
interpreter's memory. A tensor that is a model output must be written back, so in this copy
every op's result can be read after `invoke`, with the delegate's partitions kept as they
are (a delegate clusters by the ops it supports, not by the outputs). The price: a delegate
may no longer fuse an op into its consumer (the fused result would hide the output), so a
divergence that only a fusion makes is seen in the original model's outputs alone.

String, resource and variant tensors are left out. Only the main subgraph is changed;
tensors, buffers and op order are untouched, so tensor index N names the same tensor in
both files. Weights stored after the flatbuffer are moved into it (a copy over 2 GB fails
to pack and is refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeopt.errors import ModelLoadError, first_line
from edgeopt.tflite_edit import inline_buffers

# TensorType values with no array behind them (STRING, RESOURCE, VARIANT): LiteRT cannot
# hand them out as outputs (reading a resource tensor even crashes the interpreter).
NOT_ARRAYS = frozenset({5, 13, 14})


@dataclass(frozen=True)
class ExposedModel:
    content: bytes
    tensors: tuple[int, ...]          # the model outputs of the copy, in order
    original_outputs: tuple[int, ...]


def _unpack(content: bytes) -> Any:
    from ai_edge_litert import schema_py_generated as schema

    try:
        return schema.ModelT.InitFromObj(schema.Model.GetRootAs(content, 0))
    except Exception as exc:  # no verifier in Python: any decoding error means corrupt
        raise ModelLoadError(f"corrupt TFLite flatbuffer ({first_line(exc)})") from exc


def _pack(model: Any) -> bytes:
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    try:
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    except Exception as exc:  # flatbuffers' own BuilderSizeError and friends
        raise ModelLoadError("the copy with every op output exposed does not fit one "
                             f"flatbuffer (2 GB): {first_line(exc)}") from exc
    return bytes(builder.Output())


def expose_op_outputs(content: bytes) -> ExposedModel:
    """`content` with every op output of subgraph 0 appended to its outputs."""
    model = _unpack(content)
    inline_buffers(model, content)
    graph = model.subgraphs[0]
    original = [int(t) for t in (graph.outputs if graph.outputs is not None else [])]
    outputs = list(original)
    seen = set(outputs)
    for op in graph.operators or []:
        for tensor in (op.outputs if op.outputs is not None else []):
            if int(tensor) >= 0 and int(tensor) not in seen \
                    and graph.tensors[int(tensor)].type not in NOT_ARRAYS:
                seen.add(int(tensor))
                outputs.append(int(tensor))
    graph.outputs = outputs
    return ExposedModel(_pack(model), tuple(outputs), tuple(original))
