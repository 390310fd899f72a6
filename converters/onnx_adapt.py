"""An .onnx rewritten before the build: inputs pinned (`--input-value`, converters/onnx_pin),
dynamic quantization undone (converters/onnx_dequantize) and fast variances computed in
two passes (converters/onnx_variance), checked in onnxruntime.

The rewritten model is checked against the user's file on the same samples (the pinned
inputs fed their values to the original only) and written to a folder that lives as long
as the process; the handle then points at it, with `adaptation` saying what was done:
the manifest's `onnx_rewrite`, its notes and the report say it to the user.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from edgeopt.converters.onnx_dequantize import dequantize, is_dynamically_quantized
from edgeopt.converters.onnx_pin import FLAG, pin
from edgeopt.converters.onnx_variance import two_pass_variance
from edgeopt.converters.parity import check_parity
from edgeopt.data import load_dataset
from edgeopt.errors import ConversionError, DataError, first_line
from edgeopt.model import ModelHandle
from edgeopt.runtime import OnnxRunner

CHECK_SAMPLES = 8
# Pinning, folding and a two-pass variance compute the same thing (up to float32 rounding):
# below this cosine something else changed.
PIN_COSINE = 0.9999
# The rewritten .onnx of each model this process adapted, removed when the process ends.
_FOLDERS: list[tempfile.TemporaryDirectory] = []


def adapt_onnx(handle: ModelHandle, values: dict[str, np.ndarray],
               arrays: dict[str, np.ndarray] | None) -> ModelHandle:
    """The handle of the rewritten model, or `handle` when nothing applies. `handle` lacks
    the pinned inputs already (onnx_pin.held_inputs); `arrays` are the samples to check on
    (None: seeded random inputs of the declared shapes)."""
    if handle.format != "onnx" or handle.adaptation is not None:
        return handle
    import onnx

    model = onnx.load(str(handle.path))
    dynamic = is_dynamically_quantized(model)
    record: dict = {"original_file": handle.path.name, "original_bytes": handle.size_bytes}
    notes = []
    if values:
        pin(model, values)
        record["pinned_inputs"] = {k: v.tolist() for k, v in values.items()}
        notes.append(_pin_note(values))
    if dynamic:
        replaced = dequantize(model)
        record["dequantized_ops"] = replaced
        notes.append("the model was dynamically quantized (int8 weights, activations "
                     f"quantized at run time): {_counts(replaced)} rewritten to float ops "
                     "with the weights dequantized exactly; edgeopt quantizes that float "
                     "model")
    centred = two_pass_variance(model)
    if centred:
        record["two_pass_variances"] = centred
        notes.append(_variance_note(centred))
    if not values and not dynamic and not centred:
        return handle
    content = _folded(model) if values else _checked(model)
    try:
        parity = _check(handle, values, content, arrays, dynamic, centred)
        notes.append(_parity_note(parity, dynamic))
    except (ConversionError, DataError) as exc:
        if arrays is not None:  # on the user's samples, a mismatch stops the build
            raise
        # seeded random inputs of dynamic shapes the model may not run on (inspect)
        parity = None
        notes.append(f"not checked against the original on random inputs ({exc})")
    record["parity"] = parity
    record["notes"] = notes
    folder = tempfile.TemporaryDirectory(prefix="edgeopt-adapt-", ignore_cleanup_errors=True)
    _FOLDERS.append(folder)
    path = Path(folder.name) / handle.path.name
    path.write_bytes(content)
    return replace(handle, path=path, adaptation=record)


def _pin_note(values: dict[str, np.ndarray]) -> str:
    pinned = ", ".join(f"'{k}' = {v.tolist()}" for k, v in values.items())
    return (f"input {pinned} pinned for the build ({FLAG}): the artifact has no such input "
            "and computes the model at that value; the app must not feed it")


def _variance_note(count: int) -> str:
    return (f"{count} variance{'s' if count > 1 else ''} computed as E[x²] − E[x]² (a fast "
            "variance, as flax's layer norm writes it) rewritten as E[(x − E[x])²]: the "
            "same value, without the cancellation that turns the difference into rounding "
            "noise once each mean is on an int8 grid")


def _counts(replaced: dict[str, int]) -> str:
    return ", ".join(f"{n} {op}" for op, n in replaced.items())


def _folded(model) -> bytes:
    """The graph with its constants folded (a pinned input decides its `If` nodes); the
    dequantized graph needs no folding (its later stages fold shapes as for any model)."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    import onnx
    import onnxslim

    declared = {o.name: onnx.TypeProto.FromString(o.type.SerializeToString())
                for o in model.graph.output}
    for output in model.graph.output:  # onnxslim trusts declared output shapes: ddddocr's
        output.type.tensor_type.ClearField("shape")  # [1, seqlen] made it reshape [T, 1, C]
    log = io.StringIO()
    try:
        with redirect_stdout(log), redirect_stderr(log):
            model = onnxslim.slim(model)
    except Exception:  # onnxslim raises anything from its passes: the unfolded graph is kept
        pass
    for output in model.graph.output:  # the outputs keep the shapes the source declares:
        if output.name in declared:  # runners read the sample axis from them
            output.type.CopyFrom(declared[output.name])
    return _checked(model)


def _checked(model) -> bytes:
    import onnx

    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise ConversionError(f"the rewritten model is not valid ONNX: {first_line(exc)}") from exc
    return model.SerializeToString()


def _samples(handle: ModelHandle, arrays: dict[str, np.ndarray] | None) -> dict:
    """Batch-first samples: the first of `arrays`, else seeded random ones (DataError when
    a dynamic dimension leaves no size to invent)."""
    if arrays is None:
        arrays = load_dataset("random", handle.inputs).arrays
    return {k: v[:CHECK_SAMPLES] for k, v in arrays.items()}


def _check(handle, values, content: bytes, arrays, dynamic: bool, centred: int) -> dict:
    """Parity of the rewritten model against the user's file, in onnxruntime."""
    feeds = _samples(handle, arrays)
    count = len(next(iter(feeds.values())))
    per_sample = {k: np.full((count, *v.shape[1:]), v.reshape(-1)[0], v.dtype)
                  for k, v in values.items()}  # batch-first, as every feed
    reference = OnnxRunner(handle.path).run({**feeds, **per_sample})
    rewritten = OnnxRunner(content).run(feeds)
    what = " and ".join(part for part, done in (
        ("dequantizing the model", dynamic), (f"pinning {', '.join(values)}", values),
        ("computing the variances in two passes", centred)) if done)
    parity = check_parity(reference, rewritten, what)
    if not dynamic and parity.cosine < PIN_COSINE:
        raise ConversionError(f"{what} changed the model's outputs (cosine "
                              f"{parity.cosine:.6f}, max abs error {parity.max_abs:.3g})")
    return {**parity.to_json(), "data": "the calibration samples" if arrays is not None
            else "seeded random inputs"}


def _parity_note(parity: dict, dynamic: bool) -> str:
    close = ("close, not equal: the original quantizes its activations at run time"
             if dynamic else "the same computation")
    return (f"the rewritten model against the original in onnxruntime on "
            f"{parity['samples']} {parity['data'].removeprefix('the ')}: cosine "
            f"{parity['cosine']:.6f}, max abs difference {parity['max_abs']:.3g} ({close})")


def adaptation_notes(handle: ModelHandle) -> tuple[str, ...]:
    """What was rewritten before the build, for the progress lines and the manifest."""
    return tuple(handle.adaptation["notes"]) if handle.adaptation else ()
