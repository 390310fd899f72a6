"""Any supported input -> float `.tflite`, with the layouts that link it to its source.

    >>> conversion = to_float_tflite(handle, workdir, samples)
    >>> len(conversion.tflite) > 0
    True
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from edgeopt import stage_memo
from edgeopt.converters.onnx_to_tf import onnx_to_saved_model
from edgeopt.converters.tf_source import TFSource, from_keras, from_saved_model, run_converter
from edgeopt.converters.tflite_names import module_paths
from edgeopt.converters.tflite_shapes import with_static_inputs
from edgeopt.errors import ConversionError
from edgeopt.model import ModelHandle, load_keras, tflite_interpreter
from edgeopt.runtime import match_input_names, match_outputs, signature_output_keys


@dataclass(frozen=True)
class FloatConversion:
    tflite: bytes
    tf_source: TFSource | None  # None when the input already was a float .tflite
    input_perms: dict[str, tuple[int, ...]]  # source layout -> .tflite layout
    output_perms: tuple[tuple[int, ...] | None, ...]  # .tflite layout -> source layout
    converter: str


# Layout moves a converter makes, by rank: NCHW <-> NHWC, and the 3-D transpose.
_LAYOUT_PERMUTATIONS: dict[int, list[tuple[int, ...]]] = {4: [(0, 2, 3, 1), (0, 3, 1, 2)],
                                                          3: [(0, 2, 1)]}


def _perm_between(source: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...] | None:
    """None when the shapes agree; else the permutation of `source` axes that gives `target`."""
    source = tuple(1 if i == 0 and d < 0 else d for i, d in enumerate(source))
    if len(source) != len(target):
        return None
    if all(s < 0 or s == t for s, t in zip(source, target)):
        return None
    candidates = _LAYOUT_PERMUTATIONS.get(len(source), [])
    for perm in candidates:
        if all(source[p] < 0 or source[p] == t for p, t in zip(perm, target)):
            return perm
    return None


def _inverse(perm: tuple[int, ...] | None) -> tuple[int, ...] | None:
    return None if perm is None else tuple(int(i) for i in np.argsort(perm))


def layouts(handle: ModelHandle, tflite: bytes) -> tuple[dict, tuple]:
    """Read the converted model's IO shapes and link them to the source's layouts: inputs
    by name, outputs as `match_outputs` pairs them (never by position alone)."""
    interpreter = tflite_interpreter(tflite)
    ins = interpreter.get_input_details()
    outs = interpreter.get_output_details()
    names = match_input_names([s.name for s in handle.inputs], [d["name"] for d in ins])
    by_name = dict(zip(names, ins))
    input_perms = {}
    for spec in handle.inputs:
        detail = by_name.get(spec.name)
        perm = detail and _perm_between(spec.shape, tuple(int(d) for d in detail["shape"]))
        if perm:
            input_perms[spec.name] = perm
    shapes = [tuple(int(d) for d in detail["shape"]) for detail in outs]
    order = match_outputs(handle.outputs, signature_output_keys(interpreter, outs), shapes,
                          [d["name"] for d in outs])
    output_perms = tuple(_inverse(_perm_between(spec.shape, shapes[j]))
                         for spec, j in zip(handle.outputs, order))
    return input_perms, output_perms


def _float_converter(source: TFSource):
    converter = source.converter()
    # Keep float32 everywhere; fp16 and int8 are chosen by the quantize stage.
    converter.optimizations = []
    return converter


def _nhwc_samples(handle: ModelHandle, samples: dict[str, np.ndarray] | None):
    """First 4-D input's samples in NHWC, for onnx2tf's own output check."""
    if not samples:
        return None
    for spec in handle.inputs:
        array = samples.get(spec.name)
        if array is not None and array.ndim == 4:
            return array.transpose(0, 2, 3, 1) if array.shape[1] in (1, 3) else array
    return None


def _fixed_shapes(handle: ModelHandle) -> dict[str, tuple[int, ...]]:
    """The inputs whose every dimension --input-shape or the data fixed (batch 1 if dynamic)."""
    shapes = {}
    for spec in handle.inputs:
        dims = tuple(1 if i == 0 and d < 0 else d for i, d in enumerate(spec.shape))
        if dims and all(d > 0 for d in dims):
            shapes[spec.name] = dims
    return shapes


def to_float_tflite(handle: ModelHandle, workdir: Path,
                    samples: dict[str, np.ndarray] | None = None,
                    keras_model=None) -> FloatConversion:
    """Convert `handle` to a float32 `.tflite`; TensorFlow is imported only here."""
    if handle.format == "tflite":
        tflite = handle.tflite_bytes()  # fp16 weights folded, ... (tflite_prepare)
        fixed = with_static_inputs(tflite, _fixed_shapes(handle))
        converter = "none" if fixed == tflite else "none (dynamic inputs made static)"
        return FloatConversion(fixed, None, {}, tuple(None for _ in handle.outputs), converter)
    memo_key = stage_memo.entry_key(handle.files, handle.format, handle.inputs, handle.outputs,
                                    samples or {})
    kept = stage_memo.recall("float_conversion", memo_key)
    if kept is not None:  # a sweep's earlier candidate converted this very model
        return kept
    conversion = _convert(handle, workdir, samples, keras_model)
    if memo_key is not None:  # copying the SavedModel out is only worth it for a later build
        stage_memo.keep("float_conversion", memo_key, _kept(conversion), len(conversion.tflite))
    return conversion


def _kept(conversion: FloatConversion) -> FloatConversion:
    """The conversion with its SavedModel copied out of the build's work folder (the
    converter reads it again to quantize, in a later build too)."""
    source = conversion.tf_source
    if source is None:
        return conversion
    copy = Path(tempfile.mkdtemp(dir=stage_memo.folder())) / source.saved_model_dir.name
    shutil.copytree(source.saved_model_dir, copy)
    return replace(conversion, tf_source=replace(source, saved_model_dir=copy))


def _convert(handle: ModelHandle, workdir: Path, samples: dict[str, np.ndarray] | None,
             keras_model) -> FloatConversion:
    if handle.format == "onnx":
        converted = onnx_to_saved_model(handle, workdir, _nhwc_samples(handle, samples))
        source = TFSource(converted.saved_model_dir)
        name = f"onnx2tf {_version('onnx2tf')} + TFLiteConverter"
    elif handle.format == "keras":
        source = from_keras(keras_model or load_keras(handle.path), workdir, handle.inputs)
        name = "TFLiteConverter (Keras)"
    elif handle.format == "saved_model":
        source = from_saved_model(handle.path, workdir, handle.inputs)
        name = "TFLiteConverter (SavedModel)"
    else:
        raise ConversionError(f"cannot convert a {handle.format} model to .tflite")
    tflite = run_converter(_float_converter(source), "float")
    input_perms, output_perms = layouts(handle, tflite)
    tflite = module_paths(handle, tflite, samples, input_perms)  # a .pt2's layer names
    return FloatConversion(tflite, source, input_perms, output_perms, name)


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)
