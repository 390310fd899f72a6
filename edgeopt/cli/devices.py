"""`edgeopt devices` (the shipped profiles), `devices calibrate` and `devices fit`."""

from __future__ import annotations

from pathlib import Path

import click

from edgeopt.cli.shared import DEVICE, FILE, PATH, emit_json, example, json_option, step_progress
from edgeopt.devices.calibrate import CalibrationConfig, calibrate
from edgeopt.devices.corpus import load_corpus
from edgeopt.devices.corpus_fit import fit_corpus, fit_report, write_fit
from edgeopt.devices.corpus_map import PROFILE_ROWS
from edgeopt.devices.listing import devices_table
from edgeopt.devices.profile import all_profiles, user_profile_dir


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


@command.command("fit", epilog=example(
    "edgeopt devices fit",
    "edgeopt devices fit --measurements devices/measurements --profile coral-usb --json"))
@click.option("--measurements", type=PATH, default=None,
              help="Folder of corpus CSV files (default: the corpus edgeopt ships).")
@click.option("--profile", "profiles", multiple=True, type=click.Choice(list(PROFILE_ROWS)),
              help="Fit only this profile (repeatable; default: every profile with rows).")
@click.option("-o", "--output-dir", type=PATH, default=None,
              help="Folder to write the fitted profiles to (default: the user profile "
                   "folder, which --device NAME then uses).")
@click.option("--cached-only", is_flag=True,
              help="Use only stand-ins already built; do not build missing ones.")
@json_option
def fit_command(measurements: str | None, profiles: tuple[str, ...], output_dir: str | None,
                cached_only: bool, as_json: bool) -> None:
    """Fit device profiles to published latencies, with leave-one-family-out CV."""
    rows = load_corpus(_path(measurements))
    folder = _path(output_dir) or user_profile_dir()
    with step_progress(as_json) as progress:
        results = fit_corpus(rows, profiles or None, not cached_only, progress)
    written = [write_fit(result, folder) for result in results]
    records = [{**fit_report(r), "profile_file": str(p)} for r, p in zip(results, written)]
    if as_json:
        return emit_json({"profiles": records})
    for record in records:
        click.echo(f"{record['profile']}: {record['basis']} ({record['method']}; prior "
                   f"{record['prior_median_abs_error']:.0%}); wrote {record['profile_file']}")


def _path(value: str | None) -> Path | None:
    return None if value is None else Path(value)
