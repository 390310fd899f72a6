"""How an artifact's inputs and outputs are laid out against the source model's.

A converter may move axes: onnx2tf turns NCHW into NHWC and a 3-D [N, C, W] into [N, W, C]
(basic-pitch's audio [1, 43844, 1] became [1, 1, 43844]). An app that feeds the artifact
data laid out as for the source gets a refusal or garbage, so the record names, per input
and output, the artifact's shape and the transpose that takes a source-layout array to it.

    >>> record = io_layout(handle, artifact_bytes, "tflite", {"x": (0, 2, 1)}, (None,))
    >>> record["inputs"][0]["transpose"]        # np.transpose(source_array, [0, 2, 1])
    [0, 2, 1]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.errors import ConversionError
from edgeopt.model import ModelHandle, TensorSpec, tflite_interpreter
from edgeopt.runtime import (
    match_input_names,
    match_outputs,
    signature_keys,
    signature_output_keys,
)

TRANSPOSE_NOTE = ("transpose: np.transpose(source_layout_array, transpose) is the array in "
                  "the artifact's layout (null: the same layout)")


def _row(spec: TensorSpec, detail: dict | None, perm) -> dict[str, Any]:
    shape = [int(d) for d in detail["shape"]] if detail else list(spec.shape)
    row: dict[str, Any] = {"name": spec.name, "source_shape": list(spec.shape),
                           "shape": shape, "transpose": [int(p) for p in perm] if perm else None}
    if detail is not None:
        row["tensor"] = detail["name"]
        if detail.get("key"):
            row["signature_key"] = detail["key"]
    return row


def _inverse(perm) -> tuple[int, ...] | None:
    return None if perm is None else tuple(int(i) for i in np.argsort(perm))


def io_layout(handle: ModelHandle, artifact: bytes, fmt: str,
              input_perms: dict[str, tuple[int, ...]],
              output_perms: tuple[tuple[int, ...] | None, ...]) -> dict[str, Any]:
    """Per input and output: the source's and the artifact's shape and the transpose from
    the source layout to the artifact's. `input_perms`: source layout -> artifact (as the
    float conversion records them); `output_perms`: artifact -> source, in source order."""
    if fmt != "tflite":  # an .onnx artifact keeps the source's graph inputs and outputs
        return {"inputs": [_row(s, None, None) for s in handle.inputs],
                "outputs": [_row(s, None, None) for s in handle.outputs],
                "changed": False, "note": TRANSPOSE_NOTE}
    try:
        return _tflite_layout(handle, artifact, input_perms, output_perms)
    except ConversionError as exc:  # the figures are measured; say what cannot be paired
        return {"inputs": [], "outputs": [], "changed": None,
                "note": f"the artifact's inputs/outputs could not be paired with the "
                        f"source's: {exc}"}


def _tflite_layout(handle: ModelHandle, artifact: bytes,
                   input_perms: dict[str, tuple[int, ...]],
                   output_perms: tuple[tuple[int, ...] | None, ...]) -> dict[str, Any]:
    interpreter = tflite_interpreter(artifact, unprepared_ok=True)
    ins, outs = interpreter.get_input_details(), interpreter.get_output_details()
    for detail, key in zip(ins, signature_keys(interpreter, ins, "inputs")):
        detail["key"] = key
    names = match_input_names([s.name for s in handle.inputs], [d["name"] for d in ins])
    by_name = dict(zip(names, ins))
    inputs = [_row(s, by_name.get(s.name), input_perms.get(s.name)) for s in handle.inputs]
    keys = signature_output_keys(interpreter, outs)
    for detail, key in zip(outs, keys):
        detail["key"] = key if key != detail["name"] else None
    shapes = [tuple(int(d) for d in detail["shape"]) for detail in outs]
    order = match_outputs(handle.outputs, keys, shapes, [d["name"] for d in outs])
    perms = list(output_perms) + [None] * (len(handle.outputs) - len(output_perms))
    outputs = [_row(s, outs[j], _inverse(p)) for s, j, p in zip(handle.outputs, order, perms)]
    changed = any(r["transpose"] for r in inputs + outputs)
    return {"inputs": inputs, "outputs": outputs, "changed": changed, "note": TRANSPOSE_NOTE}


def output_layout_changes(handle: ModelHandle,
                          output_perms: tuple[tuple[int, ...] | None, ...]) -> dict[str, list[int]]:
    """Output name -> the transpose from the source's layout to the artifact's, for each
    output the conversion moved (the manifest's conversion.output_layout_changes)."""
    return {spec.name: [int(i) for i in inverse] for spec, perm in zip(handle.outputs,
                                                                        output_perms)
            if (inverse := _inverse(perm)) is not None}


def layout_lines(record: dict | None) -> list[str]:
    """The moved inputs and outputs, one line each, for a command's text summary."""
    lines = []
    for kind in ("inputs", "outputs"):
        for row in (record or {}).get(kind, []):
            if row.get("transpose"):
                lines.append(f"{kind[:-1]} {row['name']}: source {row['source_shape']} -> "
                             f"artifact {row['shape']} (transpose {row['transpose']}: feed "
                             "the artifact data in its layout)" if kind == "inputs" else
                             f"{kind[:-1]} {row['name']}: artifact {row['shape']} -> source "
                             f"{row['source_shape']} (np.argsort of transpose "
                             f"{row['transpose']} moves it back)")
    return lines


__all__ = ["io_layout", "layout_lines", "output_layout_changes"]
