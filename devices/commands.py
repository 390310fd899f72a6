"""Click commands of the devices issue, registered by edgeopt/cli.py:

    cli.add_command(estimate_command, "estimate")
    devices.add_command(calibrate_command, "calibrate")   # `devices` as a group

Each builds one config and calls one library function; `--json` prints one object.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from edgeopt.devices.modelsource import PRECISIONS

ALL = "all"


def _json_option(f):
    return click.option("--json", "as_json", is_flag=True,
                        help="Print one JSON object on stdout and nothing else there.")(f)


def _emit(obj: dict) -> None:
    click.echo(json.dumps(obj, indent=2, default=str))


@click.command("estimate", epilog="\b\nExample:\n  edgeopt estimate model.tflite --device "
               "coral-usb\n  edgeopt estimate model.keras --device all --json")
@click.argument("model")
@click.option("--device", "-d", default="host-cpu", show_default=True,
              help="Device profile name, a profile .toml, or 'all' to compare every profile.")
@click.option("--precision", type=click.Choice(PRECISIONS), default="auto", show_default=True,
              help="auto: a .tflite as it is, other formats as the device's build precision "
                   "(int8 for int8 devices); model: as the file is; int8: as full int8.")
@click.option("--top", type=int, default=0, help="Show only the N slowest ops (text output).")
@_json_option
def estimate_command(model, device, precision, top, as_json):
    """Estimate latency and energy of MODEL on a device, per op, before touching it."""
    from edgeopt.devices.estimate_cli import estimate_all, estimate_one
    from edgeopt.devices.render import render_comparison, render_estimate

    if device == ALL:
        record, results = estimate_all(model, precision)
        click.echo(json.dumps(record, indent=2) if as_json else render_comparison(results))
        return
    est, notes, log = estimate_one(model, device, precision)
    if as_json:
        _emit({**est.to_json(), "model": str(model), "notes": [*notes, *est.notes]})
        return
    click.echo(render_estimate(est, top, notes))
    if log:
        click.echo("\n" + log)


@click.command("calibrate", epilog="\b\nExample:\n  edgeopt devices calibrate host-cpu\n"
               "  edgeopt devices calibrate pixel-cpu --records ~/.cache/edgeopt/"
               "measurements.jsonl")
@click.argument("device", default="host-cpu")
@click.option("--threads", type=int, default=1, show_default=True,
              help="Interpreter threads for the host micro-benchmarks (estimates then "
                   "assume the same).")
@click.option("--quick", is_flag=True, help="Two shapes per micro-benchmark family.")
@click.option("--records", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Fit to `edgeopt bench --record` measurements of DEVICE instead of "
                   "running micro-benchmarks here.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Profile file to write (default: the user profile folder, which "
                   "--device DEVICE then uses).")
@_json_option
def calibrate_command(device, threads, quick, records, output, as_json):
    """Measure a device, fit its profile's efficiency factors, store the fitted profile."""
    from edgeopt.devices.calibrate import CalibrationConfig, calibrate

    if threads < 1:
        raise click.BadParameter("must be at least 1", param_hint="--threads")
    config = CalibrationConfig(device, threads, quick, records, output)
    progress = None if as_json else (lambda msg: click.echo(f"• {msg}", err=True))
    result = calibrate(config, progress=progress)
    record = {"device": device, "profile": str(result.path), "use": result.usage,
              "samples": result.samples,
              "host": result.host.describe() if result.host else None, **result.fit.to_json()}
    if as_json:
        _emit(record)
        return
    click.echo(f"wrote {result.path}: {result.samples} measurements, rms error "
               f"{result.fit.rms_error:.1%} (before the fit {record['prior_rms_error']:.1%}); "
               f"{result.usage}")
