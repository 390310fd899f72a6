"""Quantize a model with edgeopt's calibration core: library calls and `edgeopt quantize`.

    >>> from edgeopt.quantize import QuantConfig, quantize_tflite
    >>> result = quantize_tflite(float_tflite, {"image": images}, QuantConfig(scheme="w4a8"))
    >>> result.validation["sqnr_db"], result.layer_report[0]["layer"]      # doctest: +SKIP

`quantize_tflite` takes a float `.tflite` and calibration arrays keyed by its signature
input names (or tensor names), in its own layout; `quantize_onnx` takes an `.onnx` file.
Both return a `QuantResult` whose model the real runtime has loaded and run.
"""

from __future__ import annotations

import html
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from edgeopt.atomic import check_output_path, write_file_atomic
from edgeopt.calibration.config import (
    QuantConfig,
    QuantResult,
)
from edgeopt.calibration.engine import open_format, quantize_with
from edgeopt.calibration.recipes import load_recipe
from edgeopt.calibration.report import render_layer_chart
from edgeopt.choices import RangeMethod, values
from edgeopt.converters.float_tflite import to_float_tflite
from edgeopt.converters.onnx_adapt import adapt_onnx, adaptation_notes
from edgeopt.converters.onnx_pin import held_inputs
from edgeopt.data import DataSpec, load_data, permuted, shapes_from_data
from edgeopt.errors import ConfigError
from edgeopt.float_islands import FULL_INTEGER_SCHEMES, require_full_integer
from edgeopt.io_layout import io_layout, layout_lines
from edgeopt.model import load_model, tflite_interpreter, with_input_shapes
from edgeopt.qat_step import QatSettings, after_ptq, check_request, qat_summary
from edgeopt.runtime import OnnxRunner, TFLiteRunner, fits_declared, run_dataset
from edgeopt.summary import output_rows
from edgeopt.task_spec import DEFAULT_BLANK_INDEX, DEFAULT_SCORE_THRESHOLD, TaskSpec
from edgeopt.tflite_metadata import check_labels_file, with_quantize_metadata
from edgeopt.tflite_prepare import given_scheme
from edgeopt.tflite_reader import read_tflite
from edgeopt.validate import check_collapsed, compare

Progress = Callable[[str], None]
RANGE_METHODS = values(RangeMethod, RangeMethod.CONVERTER)
DEFAULT_CONFIG = QuantConfig()

def quantize_tflite(float_tflite: bytes, calib: dict[str, np.ndarray],
                    config: QuantConfig = DEFAULT_CONFIG, evaluation: dict | None = None,
                    labels: np.ndarray | None = None,
                    progress: Progress | None = None,
                    fixed_ranges: dict | None = None) -> QuantResult:
    """Quantize a float `.tflite`; ai-edge-quantizer writes the result. `fixed_ranges`
    (tensor -> (lo, hi)) override the estimated ranges (quantization-aware training)."""
    fmt = open_format("tflite", bytes(float_tflite), config.num_threads)
    return quantize_with(fmt, _float32(calib), config, _maybe(evaluation), labels, progress,
                         fixed_ranges)


def quantize_onnx(onnx_path: str | os.PathLike | bytes, calib: dict[str, np.ndarray],
                  config: QuantConfig = DEFAULT_CONFIG, evaluation: dict | None = None,
                  labels: np.ndarray | None = None,
                  progress: Progress | None = None,
                  fixed_ranges: dict | None = None) -> QuantResult:
    """Quantize an `.onnx` model; onnxruntime.quantization writes the result."""
    source = onnx_path if isinstance(onnx_path, bytes) else Path(onnx_path)
    fmt = open_format("onnx", source, config.num_threads)
    return quantize_with(fmt, _float32(calib), config, _maybe(evaluation), labels, progress,
                         fixed_ranges)


def _float32(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: (np.ascontiguousarray(v, np.float32) if np.asarray(v).dtype.kind == "f"
                else np.asarray(v)) for k, v in arrays.items()}


def _maybe(arrays: dict | None) -> dict | None:
    return None if arrays is None else _float32(arrays)


# --- from files (the CLI) ------------------------------------------------------------

@dataclass(frozen=True)
class QuantizeRequest:
    """`edgeopt quantize`'s flags: what to read, what to write, how to quantize.

    None in scheme, method and weight_method means "the recipe's, else the QuantConfig
    default" (w8a8, auto; gptq for int4 layers, rtn for int8), resolved by build_config.
    """

    model: str
    calib: str
    output: str                             # .tflite (ai-edge-quantizer) or .onnx (QDQ)
    eval: str | None = None                 # None: a share held back from the calibration data
    scheme: str | None = None               # None: the recipe's, else w8a8
    method: str | None = None               # None: the recipe's, else auto
    weight_method: str | None = None        # None: gptq for int4 layers, rtn for int8
    block_size: int | None = None           # int4 blocks (dense layers); None: per channel
    recipe: str | None = None               # a recipe .toml or a built-in recipe name
    accuracy_budget: float | None = None    # top-1 points (labels), else an SQNR floor in dB
    io_dtype: str = "float32"               # full-integer models' input/output type
    mean: tuple[float, ...] | None = None   # None: edgeopt.data's defaults (0)
    std: tuple[float, ...] | None = None    # None: edgeopt.data's defaults (255)
    bias_correction: bool = True
    report: str | None = None               # also write an HTML page with the layer chart
    labels: str | None = None               # class names packed into a .tflite's metadata
    input_shapes: tuple[str, ...] = ()      # --input-shape NAME:DIMS fixes dynamic dims
    input_values: tuple[str, ...] = ()      # --input-value NAME=VALUE pins an .onnx input
    torch_route: str = "onnx"               # --torch-route: how a .pt2 becomes a model
    require_full_integer: bool = False      # fail when a w8a8/w4a8 model keeps a float op
    task: str | None = None                 # what the outputs are (edgeopt.task_spec)
    task_output: str | None = None
    boxes: str | None = None
    scores: str | None = None
    box_format: str = "cxcywh"
    score_threshold: float = DEFAULT_SCORE_THRESHOLD
    blank_index: int = DEFAULT_BLANK_INDEX
    accept_collapsed: bool = False
    qat: bool = False                       # quantization-aware training (edgeopt.qat_step)
    qat_epochs: int = 10

    def task_spec(self) -> TaskSpec:
        return TaskSpec.from_flags(self.task, self.task_output, self.boxes, self.scores,
                                   self.box_format, self.score_threshold, self.blank_index,
                                   self.accept_collapsed)


def build_config(request: QuantizeRequest) -> QuantConfig:
    """Flags over recipe defaults over QuantConfig defaults: one config object."""
    recipe = load_recipe(request.recipe) if request.recipe else None
    scheme = request.scheme or (recipe.scheme if recipe else None) or DEFAULT_CONFIG.scheme
    method = request.method or (recipe.method if recipe else None) or DEFAULT_CONFIG.method
    return QuantConfig(scheme=scheme, method=method, recipe=recipe,
                       weight_method=request.weight_method, block_size=request.block_size,
                       bias_correction=request.bias_correction,
                       accuracy_budget=request.accuracy_budget, io_dtype=request.io_dtype,
                       rescue=not request.accept_collapsed)


def _data(handle, request: QuantizeRequest):
    """--calib/--eval as `edgeopt build` reads them (edgeopt.data.load_data, the same
    held-back share): the figure printed is measured on samples that neither calibrated
    the model nor chose its candidate, and build and quantize see the same samples."""
    spec = DataSpec(request.calib, request.eval, request.mean, request.std)
    return load_data(spec, handle.inputs)


def _tflite_inputs(handle, workdir: Path, calib) -> tuple[bytes, dict[str, tuple], tuple]:
    """The float .tflite, the permutations from the source layout to its inputs' layout
    and those from its outputs' layout back to the source's."""
    if handle.format == "tflite":
        given = given_scheme(read_tflite(handle.tflite_bytes()))
        if given is not None:
            raise ConfigError(f"the .tflite is already quantized ({given}: integer weights and "
                              "activations); `edgeopt quantize` needs the float model "
                              f"(`edgeopt build --scheme {given}` ships this one as given)")
    # a .tflite comes back as given, but with dynamic inputs fixed to the shape the data or
    # --input-shape chose, as build has it (a placeholder shape may not prepare)
    samples = {k: v[:8] for k, v in calib.arrays.items()}
    conversion = to_float_tflite(handle, workdir, samples)
    return conversion.tflite, dict(conversion.input_perms), conversion.output_perms


def _keyed(arrays: dict, float_tflite: bytes) -> dict:
    """Source input names -> the .tflite's signature names (by position when they differ)."""
    interpreter = tflite_interpreter(float_tflite)
    signatures = interpreter.get_signature_list()
    names = next(iter(signatures.values()))["inputs"] if signatures else []
    if not names or set(names) == set(arrays) or len(names) != len(arrays):
        return arrays
    return dict(zip(names, arrays.values()))


def quantize_file(request: QuantizeRequest, progress: Progress | None = None) -> dict:
    """Load MODEL and data, quantize, write OUTPUT atomically; returns the JSON record."""
    output = Path(request.output)
    check_output_path(output)  # before 100 s of work, not after
    if request.report:
        check_output_path(request.report)
    config = build_config(request)
    if request.require_full_integer and config.scheme not in FULL_INTEGER_SCHEMES:
        raise ConfigError(f"--require-full-integer needs scheme w8a8 or w4a8, got "
                          f"'{config.scheme}'")
    task = request.task_spec()
    handle, values = held_inputs(with_input_shapes(load_model(request.model,
                                                              request.torch_route),
                                                   request.input_shapes), request.input_values)
    task.check_outputs([o.name for o in handle.outputs])
    if output.suffix != ".onnx":
        check_labels_file(request.labels, handle)
    calib, evaluation = _data(handle, request)
    handle, calib, fixed = shapes_from_data(handle, calib)
    handle = adapt_onnx(handle, values, calib.arrays)
    for note in fixed + adaptation_notes(handle):
        (progress or (lambda _msg: None))(note)
    qat_settings = QatSettings(request.qat, request.qat_epochs)
    check_request(qat_settings, handle, calib, str(config.scheme))
    if output.suffix == ".onnx":
        if handle.format != "onnx":
            raise ConfigError(f"-o {output.name}: an .onnx output needs an .onnx model "
                              f"(got {handle.format}); write .tflite instead")
        result = quantize_onnx(handle.path, calib.arrays, config, evaluation.arrays,
                               evaluation.labels, progress)
        float_model, eval_arrays, arrays = handle.path.read_bytes(), evaluation.arrays, \
            calib.arrays
        moves: tuple = ({}, ())
    else:
        result, float_model, eval_arrays, arrays, moves = _to_tflite(
            handle, calib, evaluation, config, progress)
    with tempfile.TemporaryDirectory(prefix="edgeopt-qat-") as tmp:
        result, qat = after_ptq(result, config, qat_settings, handle=handle, keras_model=None,
                                runtime_format=result.format, float_model=float_model,
                                calib_runtime=arrays, calib=calib, eval_runtime=eval_arrays,
                                eval_labels=evaluation.labels if evaluation else None,
                                workdir=Path(tmp), progress=progress or (lambda _msg: None))
    if output.suffix != ".onnx":
        result = with_quantize_metadata(result, handle, request, calib)
    result = _validated(result, float_model, eval_arrays, evaluation.labels, handle, task,
                        progress)
    result = _with_data_warnings(result, calib, evaluation)
    if request.require_full_integer:
        require_full_integer(result.float_ops or [], result.scheme)
    result = with_validation_source(result, calib, evaluation)
    layout = io_layout(handle, result.model, result.format, *moves)
    write_file_atomic(output, result.model)
    if request.report:
        write_file_atomic(request.report, report_page(result))
    source = {"file": str(handle.path), "format": handle.format,
              "size_bytes": handle.size_bytes}
    if handle.preparation:  # what was rewritten before quantizing (edgeopt.tflite_prepare)
        source["prepared"] = list(handle.preparation)
    if handle.adaptation is not None:  # the .onnx rewritten first (converters.onnx_adapt)
        source = {**source, "file": request.model, "onnx_rewrite": handle.adaptation}
    record = {"output": str(output), "source": source, **result.to_json(),
              "layout": layout}
    if qat is not None:
        record["qat"] = qat
    return record


def _runner(content: bytes, fmt: str, input_names: list[str]):
    return OnnxRunner(content) if fmt == "onnx" else TFLiteRunner(content, input_names)


def _output_names(float_outputs: list[np.ndarray], handle) -> list[str]:
    """The source's output names when the artifact's outputs line up with them (count and
    per-sample shapes, -1 matching any size), else output_0, output_1, ..."""
    source = handle.outputs
    if len(source) == len(float_outputs) and all(
            fits_declared(out.shape[1:], tuple(spec.shape[1:]))
            for spec, out in zip(source, float_outputs)):
        return [spec.name for spec in source]
    return [f"output_{i}" for i in range(len(float_outputs))]


def _validated(result: QuantResult, float_model: bytes, arrays: dict, labels, handle,
               task: TaskSpec, progress) -> QuantResult:
    """Per-output figures and the task metric on the held-out samples; a collapsed output
    stops here, before anything is written (unless --accept-collapsed)."""
    if progress:
        progress(f"validating each output on {len(next(iter(arrays.values())))} evaluation "
                 "samples")
    names = list(arrays)
    reference = run_dataset(_runner(float_model, result.format, names), arrays)
    outputs = run_dataset(_runner(result.model, result.format, names), arrays)
    validation = compare(reference, outputs, labels, _output_names(reference, handle), task,
                         result.output_ops)
    check_collapsed(validation, task.accept_collapsed)
    record = {**(result.validation or {}), **validation.to_json()}
    if validation.collapsed:
        record["accepted_collapsed"] = True
    return replace(result, validation=record)


def validation_source(calib, evaluation) -> str:
    """Where the validation samples come from, in the words the summary prints."""
    if evaluation is None:
        return f"calibration samples of {calib.source}"
    if evaluation.source == calib.source:
        return f"held out from {calib.source}, not calibrated on"
    return evaluation.source


def with_validation_source(result: QuantResult, calib, evaluation) -> QuantResult:
    if result.validation is None:
        return result
    return replace(result, validation={**result.validation,
                                       "data": validation_source(calib, evaluation)})


def _with_data_warnings(result: QuantResult, calib, evaluation) -> QuantResult:
    """What did not fit the model in the data (images, few samples) leads the warnings."""
    found = calib.warnings + (evaluation.warnings if evaluation else ())
    return replace(result, warnings=list(dict.fromkeys([*found, *result.warnings])))


def _to_tflite(handle, calib, evaluation, config: QuantConfig, progress):
    """Convert to a float .tflite when needed, move the data to its layout, quantize:
    (result, the float .tflite, the evaluation and calibration arrays in its layout, the
    layout moves: input permutations and output permutations)."""
    if progress:
        progress("converting to a float .tflite")
    with tempfile.TemporaryDirectory(prefix="edgeopt-quantize-") as tmp:
        float_tflite, perms, output_perms = _tflite_inputs(handle, Path(tmp), calib)
    arrays = _keyed(permuted(calib.arrays, perms), float_tflite)
    eval_arrays = _keyed(permuted(evaluation.arrays, perms), float_tflite) if evaluation \
        else None
    labels = evaluation.labels if evaluation else None
    result = quantize_tflite(float_tflite, arrays, config, eval_arrays, labels, progress)
    return result, float_tflite, eval_arrays, arrays, (perms, output_perms)


def report_page(result: QuantResult) -> str:
    """A small standalone HTML page: the layer chart and the validation figures."""
    validation = html.escape(json.dumps(result.validation, indent=2, default=str))
    return (f"<!doctype html><meta charset='utf-8'><title>edgeopt quantize</title>"
            f"<h1>{html.escape(result.scheme)} ({html.escape(result.format)})</h1>"
            f"<p>{html.escape(result.method)}</p>{render_layer_chart(result.layer_report)}"
            f"<pre>{validation}</pre>")


# --- the text summary of `edgeopt quantize` ---------------------------------------------

def summary(record: dict) -> str:
    validation = record.get("validation") or {}
    lines = [f"wrote {record['output']} ({record['size_bytes'] / 1024:.1f} KiB, "
             f"{record['scheme']}, {record['format']})", f"method    {record['method']}"]
    if validation:
        pooled = "output SQNR" if len(validation.get("outputs") or ()) <= 1 else \
            f"pooled SQNR over {len(validation['outputs'])} outputs"
        where = f" ({validation['data']})" if validation.get("data") else ""
        lines.append(f"validated {validation.get('samples')} samples{where} in "
                     f"{validation.get('runtime')}: {pooled} "
                     f"{_fmt(validation.get('sqnr_db'))} dB, {validation.get('metric')} "
                     f"{_fmt(validation.get('value'))}")
        lines += [f"{k:<9} {v}" for k, v in output_rows(validation)]
    worst = record.get("layer_report") or []
    if worst:
        lines.append(f"worst layer {worst[0]['layer']} ({worst[0]['precision']}): "
                     f"SQNR {_fmt(worst[0]['sqnr_db'])} dB")
    lines += [f"qat       {line}" for line in qat_summary(record.get("qat"))]
    lines += [f"layout    {line}" for line in layout_lines(record.get("layout"))]
    lines += [f"prepared  {n}" for n in (record.get("source") or {}).get("prepared", [])]
    lines += [f"warning   {w}" for w in record.get("warnings", [])]
    return "\n".join(lines)


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.4g}"


__all__ = ["QuantConfig", "QuantResult", "quantize_file", "quantize_onnx", "quantize_tflite",
           "summary"]
