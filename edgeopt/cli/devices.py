"""`edgeopt devices` (the shipped profiles) and `edgeopt devices calibrate`."""

from __future__ import annotations

from pathlib import Path

import click

from edgeopt.cli.shared import DEVICE, FILE, emit_json, example, json_option, step_progress
from edgeopt.devices.calibrate import CalibrationConfig, calibrate
from edgeopt.devices.listing import devices_table
from edgeopt.devices.profile import all_profiles


@click.group("devices", epilog=example("edgeopt devices --json"), invoke_without_command=True)
@json_option
@click.pass_context
def command(ctx: click.Context, as_json: bool) -> None:
    """List the device profiles edgeopt ships (`devices calibrate` fits one to this host)."""
    if ctx.invoked_subcommand is not None:
        return
    profiles = [p.summary() for p in all_profiles()]
    if as_json:
        return emit_json({"devices": profiles})
    click.echo(devices_table(profiles))


@command.command("calibrate", epilog=example(
    "edgeopt devices calibrate host-cpu",
    "edgeopt devices calibrate pixel-cpu --records ~/.cache/edgeopt/measurements.jsonl"))
@click.argument("device", type=DEVICE, default="host-cpu")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="Interpreter threads for the host micro-benchmarks (estimates then "
                   "assume the same).")
@click.option("--quick", is_flag=True, help="Two shapes per micro-benchmark family.")
@click.option("--records", type=FILE, default=None,
              help="Fit to `edgeopt bench --record` measurements of DEVICE instead of "
                   "running micro-benchmarks here.")
@click.option("-o", "--output", type=FILE, default=None,
              help="Profile file to write (default: the user profile folder, which "
                   "--device DEVICE then uses).")
@json_option
def calibrate_command(device: str, threads: int, quick: bool, records: str | None,
                      output: str | None, as_json: bool) -> None:
    """Measure a device, fit its profile's efficiency factors, store the fitted profile."""
    config = CalibrationConfig(device, threads, quick, _path(records), _path(output))
    with step_progress(as_json) as progress:
        result = calibrate(config, progress=progress)
    record = {"device": device, "profile": str(result.path), "use": result.usage,
              "samples": result.samples,
              "host": result.host.describe() if result.host else None, **result.fit.to_json()}
    if as_json:
        return emit_json(record)
    click.echo(f"wrote {result.path}: {result.samples} measurements, rms error "
               f"{result.fit.rms_error:.1%} (before the fit {record['prior_rms_error']:.1%}); "
               f"{result.usage}")


def _path(value: str | None) -> Path | None:
    return None if value is None else Path(value)
