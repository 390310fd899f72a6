"""Quantize a model with edgeopt's calibration core: library calls and `edgeopt quantize`.

    >>> from edgeopt.quantize import QuantConfig, quantize_tflite
    >>> result = quantize_tflite(float_tflite, {"image": images}, QuantConfig(scheme="w4a8"))
    >>> result.validation["sqnr_db"], result.layer_report[0]["layer"]      # doctest: +SKIP

`quantize_tflite` takes a float `.tflite` and calibration arrays keyed by its signature
input names (or tensor names), in its own layout; `quantize_onnx` takes an `.onnx` file.
Both return a `QuantResult` whose model the real runtime has loaded and run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import click
import numpy as np

from edgeopt.atomic import check_output_path, write_file_atomic
from edgeopt.calibration.config import (
    BLOCK_SIZES,
    IO_DTYPES,
    QuantConfig,
    QuantResult,
    Scheme,
    WeightMethod,
)
from edgeopt.errors import ConfigError
from edgeopt.options import comma_floats

Progress = Callable[[str], None]
RANGE_METHODS = ("auto", "minmax", "percentile", "mse", "entropy")
DEFAULT_CONFIG = QuantConfig()
EXAMPLE = ("edgeopt quantize samples/digits_cnn.onnx --calib samples/digits_calib.npz "
           "--scheme w4a8 --method auto -o digits_w4a8.onnx --json")


def quantize_tflite(float_tflite: bytes, calib: dict[str, np.ndarray],
                    config: QuantConfig = DEFAULT_CONFIG, evaluation: dict | None = None,
                    labels: np.ndarray | None = None,
                    progress: Progress | None = None) -> QuantResult:
    """Quantize a float `.tflite`; ai-edge-quantizer writes the result."""
    from edgeopt.calibration.engine import open_format, quantize_with

    fmt = open_format("tflite", bytes(float_tflite), config.num_threads)
    return quantize_with(fmt, _float32(calib), config, _maybe(evaluation), labels, progress)


def quantize_onnx(onnx_path: str | os.PathLike | bytes, calib: dict[str, np.ndarray],
                  config: QuantConfig = DEFAULT_CONFIG, evaluation: dict | None = None,
                  labels: np.ndarray | None = None,
                  progress: Progress | None = None) -> QuantResult:
    """Quantize an `.onnx` model; onnxruntime.quantization writes the result."""
    from edgeopt.calibration.engine import open_format, quantize_with

    source = onnx_path if isinstance(onnx_path, bytes) else Path(onnx_path)
    fmt = open_format("onnx", source, config.num_threads)
    return quantize_with(fmt, _float32(calib), config, _maybe(evaluation), labels, progress)


def _float32(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: (np.ascontiguousarray(v, np.float32) if np.asarray(v).dtype.kind == "f"
                else np.asarray(v)) for k, v in arrays.items()}


def _maybe(arrays: dict | None) -> dict | None:
    return None if arrays is None else _float32(arrays)


# --- from files (the CLI) ------------------------------------------------------------

def build_config(options: dict) -> QuantConfig:
    """Flags over recipe defaults over QuantConfig defaults: one config object."""
    from edgeopt.calibration.recipes import load_recipe

    recipe = load_recipe(options["recipe"]) if options.get("recipe") else None
    scheme = options.get("scheme") or (recipe.scheme if recipe else None) or Scheme.W8A8
    method = options.get("method") or (recipe.method if recipe else None) or "auto"
    return QuantConfig(scheme=scheme, method=method, recipe=recipe,
                       weight_method=options.get("weight_method"),
                       block_size=options.get("block_size"),
                       bias_correction=options.get("bias_correction", True),
                       accuracy_budget=options.get("accuracy_budget"),
                       io_dtype=options.get("io_dtype") or "float32")


def _data(handle, options: dict):
    from edgeopt.data import Preprocessing, load_dataset, split_holdout

    prep = Preprocessing(mean=options.get("mean") or (0.0,), std=options.get("std") or (255.0,))
    calib = load_dataset(options["calib"], handle.inputs, prep, "calibration")
    if options.get("eval"):
        return calib, load_dataset(options["eval"], handle.inputs, prep, "evaluation")
    if options.get("accuracy_budget") is not None and calib.count >= 4:
        return split_holdout(calib, 0.25)
    return calib, None


def _tflite_inputs(handle, workdir: Path, calib) -> tuple[bytes, dict[str, tuple]]:
    """The float .tflite and the permutations from the source layout to its layout."""
    if handle.format == "tflite":
        return handle.path.read_bytes(), {}
    from edgeopt.converters.float_tflite import to_float_tflite

    samples = {k: v[:8] for k, v in calib.arrays.items()}
    conversion = to_float_tflite(handle, workdir, samples)
    return conversion.tflite, dict(conversion.input_perms)


def _permuted(arrays: dict, perms: dict) -> dict:
    return {k: np.ascontiguousarray(v.transpose(perms[k])) if k in perms else v
            for k, v in arrays.items()}


def _keyed(arrays: dict, float_tflite: bytes) -> dict:
    """Source input names -> the .tflite's signature names (by position when they differ)."""
    from edgeopt.model import tflite_interpreter

    interpreter = tflite_interpreter(float_tflite)
    signatures = interpreter.get_signature_list()
    names = next(iter(signatures.values()))["inputs"] if signatures else []
    if not names or set(names) == set(arrays) or len(names) != len(arrays):
        return arrays
    return dict(zip(names, arrays.values()))


def quantize_file(options: dict, progress: Progress | None = None) -> dict:
    """Load MODEL and data, quantize, write OUTPUT atomically; returns the JSON record."""
    from edgeopt.model import load_model

    output = Path(options["output"])
    check_output_path(output)  # before 100 s of work, not after
    if options.get("report"):
        check_output_path(options["report"])
    config = build_config(options)
    handle = load_model(options["model"])
    if output.suffix != ".onnx":
        from edgeopt.tflite_metadata import check_labels_file
        check_labels_file(options.get("labels"), handle)
    calib, evaluation = _data(handle, options)
    if output.suffix == ".onnx":
        if handle.format != "onnx":
            raise ConfigError(f"-o {output.name}: an .onnx output needs an .onnx model "
                              f"(got {handle.format}); write .tflite instead")
        result = quantize_onnx(handle.path, calib.arrays, config,
                               evaluation.arrays if evaluation else None,
                               evaluation.labels if evaluation else None, progress)
    else:
        from edgeopt.tflite_metadata import with_quantize_metadata

        result = _to_tflite(handle, calib, evaluation, config, progress)
        result = with_quantize_metadata(result, handle, options, calib)
    write_file_atomic(output, result.model)
    if options.get("report"):
        write_file_atomic(options["report"], report_page(result))
    return {"output": str(output), "source": {"file": str(handle.path), "format":
            handle.format, "size_bytes": handle.size_bytes}, **result.to_json()}


def _to_tflite(handle, calib, evaluation, config: QuantConfig, progress) -> QuantResult:
    """Convert to a float .tflite when needed, move the data to its layout, quantize."""
    import tempfile

    if progress:
        progress("converting to a float .tflite")
    with tempfile.TemporaryDirectory(prefix="edgeopt-quantize-") as tmp:
        float_tflite, perms = _tflite_inputs(handle, Path(tmp), calib)
    arrays = _keyed(_permuted(calib.arrays, perms), float_tflite)
    eval_arrays = _keyed(_permuted(evaluation.arrays, perms), float_tflite) if evaluation \
        else None
    labels = evaluation.labels if evaluation else None
    return quantize_tflite(float_tflite, arrays, config, eval_arrays, labels, progress)


def report_page(result: QuantResult) -> str:
    """A small standalone HTML page: the layer chart and the validation figures."""
    import html

    from edgeopt.calibration.report import render_layer_chart

    validation = html.escape(json.dumps(result.validation, indent=2, default=str))
    return (f"<!doctype html><meta charset='utf-8'><title>edgeopt quantize</title>"
            f"<h1>{html.escape(result.scheme)} ({html.escape(result.format)})</h1>"
            f"<p>{html.escape(result.method)}</p>{render_layer_chart(result.layer_report)}"
            f"<pre>{validation}</pre>")


# --- the click command (registered by edgeopt.cli) ------------------------------------

def summary(record: dict) -> str:
    validation = record.get("validation") or {}
    lines = [f"wrote {record['output']} ({record['size_bytes'] / 1024:.1f} KiB, "
             f"{record['scheme']}, {record['format']})", f"method    {record['method']}"]
    if validation:
        lines.append(f"validated {validation.get('samples')} samples in "
                     f"{validation.get('runtime')}: output SQNR "
                     f"{_fmt(validation.get('sqnr_db'))} dB, {validation.get('metric')} "
                     f"{_fmt(validation.get('value'))}")
    worst = record.get("layer_report") or []
    if worst:
        lines.append(f"worst layer {worst[0]['layer']} ({worst[0]['precision']}): "
                     f"SQNR {_fmt(worst[0]['sqnr_db'])} dB")
    lines += [f"warning   {w}" for w in record.get("warnings", [])]
    return "\n".join(lines)


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.4g}"


@click.command("quantize", epilog=f"\b\nExample:\n  {EXAMPLE}")
@click.argument("model")
@click.option("--calib", required=True, help="Calibration data: .npz, .npy or an image folder.")
@click.option("--eval", "eval_data", default=None, help="Evaluation data (labels optional); "
              "default: the calibration data (a held-back quarter with --accuracy-budget).")
@click.option("-o", "--output", required=True, help="Quantized model to write: .tflite "
              "(ai-edge-quantizer) or .onnx (onnxruntime QDQ).")
@click.option("--scheme", type=click.Choice([s.value for s in Scheme]), default=None,
              help="w8a8 (default), w4a8, w4a16/w4afp32 (weight-only), dynamic, fp16, float.")
@click.option("--method", type=click.Choice(RANGE_METHODS), default=None,
              help="Activation range estimator (default auto: the best measured).")
@click.option("--weight-method", type=click.Choice([m.value for m in WeightMethod]),
              default=None, help="rtn or gptq (default: gptq for int4, rtn for int8).")
@click.option("--block-size", type=click.Choice([str(b) for b in BLOCK_SIZES]), default=None,
              help="int4 blocks for dense layers (weight-only schemes).")
@click.option("--recipe", default=None, help="A recipe .toml or a built-in recipe name.")
@click.option("--accuracy-budget", type=float, default=None, help="Allowed top-1 drop in "
              "points (labelled eval data), else an output-SQNR floor in dB.")
@click.option("--io-dtype", type=click.Choice(IO_DTYPES), default=None,
              help="Model input/output type of full-integer models (default float32).")
@click.option("--mean", default=None, help="Image normalisation mean on 0..255 pixels.")
@click.option("--std", default=None, help="Image normalisation std on 0..255 pixels.")
@click.option("--labels", default=None, help="Class names, one per line: packed into a "
              ".tflite as its TFLite-metadata label file (default: the image folder's classes).")
@click.option("--no-bias-correction", is_flag=True, help="Keep the rounded weights' biases.")
@click.option("--report", default=None, help="Also write an HTML page with the layer chart.")
@click.option("--dry-run", is_flag=True, help="Print the resolved config and exit.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object on stdout and nothing else there.")
def quantize_command(model, calib, eval_data, output, scheme, method, weight_method, block_size,
                     recipe, accuracy_budget, io_dtype, mean, std, labels, no_bias_correction,
                     report, dry_run, as_json):
    """Quantize MODEL with edgeopt's calibration core and check it in the real runtime."""
    options = {"model": model, "calib": calib, "eval": eval_data, "output": output,
               "scheme": scheme, "method": method, "weight_method": weight_method,
               "block_size": int(block_size) if block_size else None, "recipe": recipe,
               "accuracy_budget": accuracy_budget, "io_dtype": io_dtype,
               "mean": comma_floats(mean), "std": comma_floats(std),
               "bias_correction": not no_bias_correction, "report": report, "labels": labels}
    if dry_run:
        click.echo(json.dumps(build_config(options).to_json(), indent=2))
        return
    from edgeopt.quiet import library_output_to_log

    progress = (lambda _m: None) if as_json else (lambda m: click.echo(f"• {m}", err=True))
    with library_output_to_log():
        record = quantize_file(options, progress)
    click.echo(json.dumps(record, indent=2, default=str) if as_json else summary(record))


__all__ = ["QuantConfig", "QuantResult", "quantize_tflite", "quantize_onnx", "quantize_file",
           "quantize_command"]
