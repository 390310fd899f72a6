"""`edgeopt inspect`: what a model is, and where its ops would run."""

from __future__ import annotations

import click

from edgeopt.cli.shared import (
    PATH,
    device_option,
    emit_json,
    example,
    input_shape_option,
    input_value_option,
    json_option,
    torch_route_option,
)
from edgeopt.inspect import inspect_model, render_inspection
from edgeopt.quiet import library_output_to_log


@click.command("inspect", epilog=example("edgeopt inspect samples/digits_cnn.keras --json"))
@click.argument("model", type=PATH)
@device_option("Also show which ops run where on this device, and why the others fall back; "
               "'all' gives one line per device.")
@input_shape_option
@input_value_option
@torch_route_option
@json_option
def command(model: str, device: str | None, input_shapes: tuple[str, ...],
            input_values: tuple[str, ...], torch_route: str, as_json: bool) -> None:
    """Format, inputs and outputs, op histogram, parameters, MACs and size of MODEL."""
    with library_output_to_log():
        record = inspect_model(model, device, tuple(input_shapes), tuple(input_values),
                               torch_route)
    if as_json:
        return emit_json(record)
    click.echo(render_inspection(record))
