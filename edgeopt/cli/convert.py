"""`edgeopt convert`: a float .tflite, checked against its source."""

from __future__ import annotations

from pathlib import Path

import click

from edgeopt.cli.shared import (
    PATH,
    emit_json,
    example,
    input_shape_option,
    input_value_option,
    json_option,
    step_progress,
    torch_route_option,
)
from edgeopt.convert import convert_to_file
from edgeopt.quiet import library_output_to_log
from edgeopt.summary import size_text


@click.command("convert", epilog=example(
    "edgeopt convert samples/digits_cnn.onnx -o digits_float.tflite"))
@click.argument("model", type=PATH)
@click.option("-o", "--output", type=PATH, required=True, help="The float .tflite file to "
              "write.")
@click.option("--calib", type=PATH, default="random", help="Sample inputs for the parity "
              "check (default: random inputs; an image folder also records its "
              "normalisation).")
@click.option("--labels", type=PATH, default=None, help="Class names, one per line, packed "
              "into the .tflite as its TFLite-metadata label file.")
@input_shape_option
@input_value_option
@torch_route_option
@json_option
def command(model: str, output: str, calib: str, labels: str | None,
            input_shapes: tuple[str, ...], input_values: tuple[str, ...], torch_route: str,
            as_json: bool) -> None:
    """Convert MODEL to a float .tflite and check it against the source."""
    with library_output_to_log(), step_progress(as_json) as progress:
        record = convert_to_file(model, Path(output), calib, progress, labels=labels,
                                 input_shapes=tuple(input_shapes),
                                 input_values=tuple(input_values),
                                 torch_route=torch_route)
    if as_json:
        return emit_json(record)
    p = record["parity"]
    click.echo(f"wrote {output} ({size_text(record['size_bytes'])}) with {record['converter']}; "
               f"parity on {p['samples']} samples: max abs {p['max_abs']:.3g}, "
               f"cosine {p['cosine']:.6f}")
