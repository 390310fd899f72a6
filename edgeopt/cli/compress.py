"""`edgeopt compress`: prune or sparsify, and distill back from the original."""

from __future__ import annotations

import click

from edgeopt.choices import PruneCriterion, PrunePattern
from edgeopt.cli.shared import (
    PATH,
    choice,
    emit_json,
    example,
    input_shape_option,
    json_option,
    normalisation_options,
    step_progress,
)
from edgeopt.compress import CompressConfig, CompressSettings, compress, render_summary
from edgeopt.quiet import library_output_to_log

DEFAULTS = CompressSettings()


@click.command("compress", epilog=example(
    "edgeopt compress samples/digits_cnn.keras --prune 0.5 --distill --data samples/images "
    "-o small.tflite"))
@click.argument("model", type=PATH)
@click.option("--prune", type=float, default=None, help="Share to remove: of the MACs "
              "(--structured, default), or of the weights (--unstructured).")
@click.option("--structured", "pattern", flag_value=PrunePattern.STRUCTURED.value, default=True,
              help="Remove whole channels: a smaller, faster model (default).")
@click.option("--2:4", "pattern", flag_value=PrunePattern.TWO_FOUR.value,
              help="Zero two of every four weights.")
@click.option("--unstructured", "pattern", flag_value=PrunePattern.UNSTRUCTURED.value,
              help="Zero the smallest weights anywhere.")
@click.option("--criterion", type=choice(PruneCriterion), default=DEFAULTS.criterion,
              show_default=True, help="Channel importance (structured): weight norms, BN "
              "scale, or data-driven (activation, taylor; these use --data).")
@click.option("--recipe", type=PATH, default=None, help="A prune recipe .toml: [prune] "
              "\"layer regex\" = share of channels.")
@click.option("--channel-multiple", type=click.IntRange(min=1),
              default=DEFAULTS.channel_multiple, show_default=True,
              help="Pruned layers keep a multiple of this many channels: CPU and NPU kernels "
              "work in tiles, so 66 channels cost what 80 do.")
@click.option("--student", type=PATH, default=None, help="Distill into this smaller .keras "
              "model instead of pruning (the teacher, MODEL, may be any format).")
@click.option("--distill", is_flag=True, help="Train the compressed model to match the "
              "original on --data (labels used when the data has them).")
@click.option("--data", type=PATH, default=None, help="Sample inputs: an image folder, .npz "
              "or .npy.")
@click.option("--eval", "eval", type=PATH, default=None, help="Held-out data to compare the "
              "compressed model with the original on (default: --data).")
@click.option("--epochs", type=click.IntRange(min=1), default=DEFAULTS.epochs,
              show_default=True, help="Distillation epochs at most (early stopping on a "
              "held-back fifth).")
@normalisation_options
@input_shape_option
@click.option("-o", "--output", type=PATH, required=True, help="The model to write: .keras, "
              ".tflite or .onnx (ONNX inputs).")
@json_option
def command(model: str, output: str, data: str | None, eval: str | None, mean, std,
            input_shapes: tuple[str, ...], as_json: bool, **settings) -> None:
    """Prune (remove channels) or sparsify MODEL, and distill it back from the original."""
    settings["distill"] = settings["distill"] or settings["student"] is not None
    config = CompressConfig(model, output, CompressSettings(**settings), data, mean, std,
                            tuple(input_shapes), eval)
    with library_output_to_log(), step_progress(as_json) as progress:
        result = compress(config, progress)
    if as_json:
        return emit_json({"output": str(result.output), **result.record})
    click.echo(render_summary(result))
