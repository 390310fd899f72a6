"""`edgeopt quantize`: edgeopt's calibration core, checked in the real runtime."""

from __future__ import annotations

import click

from edgeopt.calibration.config import BLOCK_SIZES, Scheme, WeightMethod
from edgeopt.choices import IoDtype, RangeMethod
from edgeopt.cli.defaults import sources
from edgeopt.cli.shared import (
    NAME_OR_PATH,
    PATH,
    choice,
    emit_json,
    example,
    input_shape_option,
    input_value_option,
    json_option,
    normalisation_options,
    step_progress,
    torch_route_option,
)
from edgeopt.cli.task import task_options
from edgeopt.quantize import QuantizeRequest, build_config, quantize_file, summary
from edgeopt.quiet import library_output_to_log


@click.command("quantize", epilog=example(
    "edgeopt quantize samples/digits_cnn.onnx --calib samples/digits_calib.npz --scheme w4a8 "
    "--method auto -o digits_w4a8.onnx --json"))
@click.argument("model", type=PATH)
@click.option("--calib", type=PATH, required=True, help="Calibration data: .npz, .npy or an "
              "image folder.")
@click.option("--eval", "eval", type=PATH, default=None, help="Evaluation data (labels "
              "optional); default: a fifth held back from the calibration data, as build "
              "does (never calibrated on).")
@click.option("-o", "--output", type=PATH, required=True, help="Quantized model to write: "
              ".tflite (ai-edge-quantizer) or .onnx (onnxruntime QDQ).")
@click.option("--scheme", type=choice(Scheme), default=None,
              help="w8a8 (default), w4a8, w8a16 (int16 activations, TFLite 16x8), "
                   "w4a16/w4afp32 (weight-only), dynamic, fp16, float.")
@click.option("--method", type=choice(RangeMethod, RangeMethod.CONVERTER), default=None,
              help="Activation range estimator (default auto: the best measured).")
@click.option("--weight-method", type=choice(WeightMethod), default=None,
              help="rtn or gptq (default: gptq for int4, rtn for int8).")
@click.option("--block-size", type=click.Choice([str(b) for b in BLOCK_SIZES]), default=None,
              help="int4 blocks for dense layers (weight-only schemes).")
@click.option("--recipe", type=NAME_OR_PATH, default=None, help="A recipe .toml or a built-in "
              "recipe name.")
@click.option("--accuracy-budget", type=float, default=None, help="Allowed top-1 drop in "
              "points (labelled eval data), else an output-SQNR floor in dB.")
@click.option("--io-dtype", type=choice(IoDtype), default=QuantizeRequest.io_dtype,
              help="Model input/output type of full-integer models (default float32).")
@normalisation_options
@click.option("--labels", type=PATH, default=None, help="Class names, one per line: packed "
              "into a .tflite as its TFLite-metadata label file (default: the image folder's "
              "classes).")
@click.option("--require-full-integer", is_flag=True, help="Fail when the w8a8/w4a8 model "
              "keeps any op in float (each is named); nothing is written.")
@task_options
@click.option("--no-bias-correction", is_flag=True, help="Keep the rounded weights' biases.")
@click.option("--qat", is_flag=True, help="Quantization-aware training (w8a8): with "
              "--accuracy-budget, when post-training quantization misses it at full integer; "
              "alone, always. Trains on --calib (labels used when they have them).")
@click.option("--epochs", "qat_epochs", type=click.IntRange(min=1),
              default=QuantizeRequest.qat_epochs, show_default=True,
              help="QAT epochs at most (early stopping on a held-back fifth).")
@click.option("--report", type=PATH, default=None, help="Also write an HTML page with the "
              "layer chart.")
@click.option("--dry-run", is_flag=True, help="Print the resolved config, with where each "
              "flag's value came from, and exit.")
@input_shape_option
@input_value_option
@torch_route_option
@json_option
@click.pass_context
def command(ctx: click.Context, dry_run: bool, as_json: bool, no_bias_correction: bool,
            block_size: str | None, input_shapes: tuple[str, ...],
            input_values: tuple[str, ...], **options) -> None:
    """Quantize MODEL with edgeopt's calibration core and check it in the real runtime."""
    request = QuantizeRequest(**options, bias_correction=not no_bias_correction,
                              block_size=int(block_size) if block_size else None,
                              input_shapes=tuple(input_shapes),
                              input_values=tuple(input_values))
    if dry_run:
        return emit_json({**build_config(request).to_json(), "sources": sources(ctx)})
    with library_output_to_log(), step_progress(as_json) as progress:
        record = quantize_file(request, progress)
    emit_json(record) if as_json else click.echo(summary(record))
