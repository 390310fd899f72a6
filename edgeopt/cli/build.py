"""`edgeopt build`: compress, convert, quantize, validate, place, estimate, bundle."""

from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

import click

from edgeopt.calibration.config import Scheme
from edgeopt.choices import ArtifactFormat, PruneCriterion, RangeMethod
from edgeopt.cli.defaults import config_file_option, config_path, sources
from edgeopt.cli.shared import (
    FLOATS,
    NAME_OR_PATH,
    PATH,
    choice,
    device_option,
    emit_json,
    example,
    input_shape_option,
    input_value_option,
    json_option,
    step_progress,
    torch_route_option,
)
from edgeopt.cli.task import task_options
from edgeopt.config import BuildConfig, device_names
from edgeopt.errors import ConfigError
from edgeopt.pipeline import build as run_build
from edgeopt.quiet import library_output_to_log
from edgeopt.summary import build_summary
from edgeopt.terminal import colour_enabled

DEFAULTS = {f.name: f.default for f in fields(BuildConfig) if f.name != "model"}


def _default(name: str):
    return DEFAULTS[name]


@click.command("build", epilog=example(
    "edgeopt build samples/digits_cnn.onnx --device pixel-npu --calib samples/digits_calib.npz"
    " --eval samples/digits_eval.npz -o dist/"))
@click.argument("model", required=False, type=PATH)
@device_option("Device profile name or a profile .toml (default host-cpu); 'all' or a comma "
               "list also estimates the artifact on those devices (the first named is the one "
               "it is built for). See `edgeopt devices`.", default=_default("device"))
@click.option("--calib", type=PATH, default=None, help="Calibration data: .npz, .npy, an "
              "image folder, or 'random' (smoke tests only).")
@click.option("--eval", "eval", type=PATH, default=None, help="Labelled or unlabelled "
              "evaluation data; default: a held-back share of --calib (--eval-fraction).")
@click.option("-o", "--output", type=PATH, default=_default("output"), show_default=True,
              help="Bundle folder to write.")
@click.option("--format", "format", type=choice(ArtifactFormat), default=_default("format"),
              show_default=True, help="Artifact format.")
@click.option("--scheme", type=choice(Scheme), default=None,
              help="Quantization scheme (default: the device's precision).")
@click.option("--method", type=choice(RangeMethod), default=_default("method"),
              show_default=True, help="Activation ranges (auto: the best measured per model); "
              "'converter' uses the TFLite converter's or onnxruntime's own min-max.")
@click.option("--recipe", type=NAME_OR_PATH, default=None, help="Per-layer precision rules: "
              "a recipe .toml or a built-in recipe name.")
@click.option("--accuracy-budget", type=float, default=None, help="Allowed top-1 drop in "
              "points (labelled eval data), else an output-SQNR floor in dB: choose per-layer "
              "precision to meet it with the smallest model.")
@click.option("--mean", type=FLOATS, default=None, help="Image normalisation mean on 0..255 "
              "pixels, per channel, e.g. 127.5 or 123.7,116.3,103.5.")
@click.option("--std", type=FLOATS, default=None, help="Image normalisation std on 0..255 "
              "pixels (default 255: a 0..1 scale).")
@click.option("--labels", type=PATH, default=None, help="Class names, one per line, packed "
              "into the .tflite as its TFLite-metadata label file (default: the image "
              "folder's classes).")
@input_shape_option
@input_value_option
@torch_route_option
@task_options
@click.option("--require-full-delegation", is_flag=True,
              help="Fail when any op would fall back to the CPU.")
@click.option("--require-full-integer", is_flag=True,
              help="Fail when the w8a8/w4a8 artifact keeps any op in float (each is named).")
@click.option("--rewrite/--no-rewrite", default=_default("rewrite"), show_default=True,
              help="Rewrite ops the device's delegate lacks into ops it has (kept only when "
              "delegation rises and accuracy holds).")
@click.option("--prune", type=float, default=None, help="Before quantizing, remove this "
              "share of the MACs by removing channels (structured pruning), e.g. 0.5.")
@click.option("--prune-criterion", type=choice(PruneCriterion),
              default=_default("prune_criterion"), show_default=True,
              help="Channel importance for --prune.")
@click.option("--prune-recipe", type=PATH, default=None, help="Channel ratios per layer: a "
              ".toml with [prune] \"layer regex\" = share.")
@click.option("--prune-channel-multiple", type=click.IntRange(min=1),
              default=_default("prune_channel_multiple"), show_default=True,
              help="Pruned layers keep a multiple of this many channels (CPU/NPU kernels "
              "work in tiles).")
@click.option("--distill", is_flag=True, help="Train the pruned model to match the original "
              "on the --calib samples (labels used when they have them).")
@click.option("--distill-epochs", type=click.IntRange(min=1),
              default=_default("distill_epochs"), show_default=True,
              help="Distillation epochs at most (early stopping on a held-back fifth).")
@click.option("--qat", is_flag=True, help="Quantization-aware training: with "
              "--accuracy-budget, when post-training quantization misses it at full integer; "
              "alone, always. Trains on --calib (labels used when they have them).")
@click.option("--epochs", "qat_epochs", type=click.IntRange(min=1),
              default=_default("qat_epochs"), show_default=True,
              help="QAT epochs at most (early stopping on a held-back fifth).")
@click.option("--eval-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=_default("eval_fraction"), show_default=True,
              help="Share of --calib held back for evaluation when there is no --eval.")
@click.option("--parity-samples", type=click.IntRange(min=1),
              default=_default("parity_samples"), show_default=True,
              help="Samples the conversion parity check runs.")
@click.option("--seed", type=int, default=_default("seed"), show_default=True,
              help="Seed of every random choice (splits, random data).")
@config_file_option
@click.option("--dry-run", is_flag=True, help="Print the resolved config, with where each "
              "value came from, and exit.")
@json_option
@click.pass_context
def command(ctx: click.Context, dry_run: bool, as_json: bool, **values) -> None:
    """Compress, convert, quantize and validate MODEL, and write a bundle for a device."""
    config = build_config(values)
    if dry_run:
        return _print_dry_run(ctx, config, as_json)
    with library_output_to_log(), step_progress(as_json) as progress:
        result = run_build(config, progress)
    if as_json:
        emit_json({"bundle": str(result.output), **result.manifest})
    else:
        click.echo(build_summary(result, colour_enabled(sys.stdout)))


def build_config(values: dict) -> BuildConfig:
    """The flags (and file defaults) as one BuildConfig."""
    if values["model"] is None:
        raise ConfigError("no model given (pass MODEL, or 'model' in edgeopt.toml or a "
                          "--config file)")
    return BuildConfig(**{**values, "input_shapes": tuple(values["input_shapes"]),
                          "input_values": tuple(values["input_values"])})


def _print_dry_run(ctx: click.Context, config: BuildConfig, as_json: bool) -> None:
    """The config a build would run with; each line says where its value came from."""
    devices = device_names(config.device)
    where = sources(ctx)
    file = config_path(ctx)
    if as_json:
        emit_json({**config.to_json(), "sources": where,
                   "config_file": str(file) if file else None, "devices": list(devices)})
        return
    click.echo(f"# config file: {file or 'no config file (none given, no ./edgeopt.toml)'}")
    if len(devices) > 1:
        click.echo(f"# builds for {devices[0]}; also estimates on: {', '.join(devices[1:])}")
    click.echo(config.to_toml(Path.cwd(), where), nl=False)
