"""`edgeopt estimate`: latency and energy on a device profile, per op."""

from __future__ import annotations

import click

from edgeopt.choices import EstimatePrecision
from edgeopt.cli.shared import (
    PATH,
    choice,
    device_option,
    emit_json,
    example,
    input_shape_option,
    json_option,
)
from edgeopt.devices.estimate_cli import estimate_all, estimate_one
from edgeopt.devices.render import render_comparison, render_estimate

ALL = "all"


@click.command("estimate", epilog=example("edgeopt estimate model.tflite --device coral-usb",
                                          "edgeopt estimate model.keras --device all --json"))
@click.argument("model", type=PATH)
@device_option("Device profile name, a profile .toml, or 'all' to compare every profile.",
               default="host-cpu")
@click.option("--precision", type=choice(EstimatePrecision), default=EstimatePrecision.AUTO.value,
              show_default=True, help="auto: a .tflite as it is, other formats as the "
              "device's build precision (int8 for int8 devices); model: as the file is; "
              "int8: as full int8.")
@click.option("--top", type=click.IntRange(min=0), default=0,
              help="Show only the N slowest ops (text output).")
@input_shape_option
@json_option
def command(model: str, device: str, precision: str, top: int, input_shapes: tuple[str, ...],
            as_json: bool) -> None:
    """Estimate latency and energy of MODEL on a device, per op, before touching it."""
    if device == ALL:
        record, results = estimate_all(model, precision, tuple(input_shapes))
        return emit_json(record) if as_json else click.echo(render_comparison(results))
    est, notes, log = estimate_one(model, device, precision, tuple(input_shapes))
    if as_json:
        return emit_json({**est.to_json(), "model": str(model), "notes": [*notes, *est.notes]})
    click.echo(render_estimate(est, top, notes))
    if log:
        click.echo("\n" + log)
