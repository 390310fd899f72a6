"""`edgeopt sweep`: the accuracy / latency / size / energy trade-off of a search space."""

from __future__ import annotations

import click

from edgeopt.cli.shared import (
    PATH,
    Trusted,
    emit_json,
    example,
    json_option,
    step_progress,
)
from edgeopt.quiet import library_output_to_log
from edgeopt.sweep import SweepConfig, plan, run_sweep
from edgeopt.sweep_cache import Store
from edgeopt.sweep_report import AXIS, table


@click.command("sweep", epilog=example(
    "edgeopt sweep sweep.toml -o sweep-out --workers 2",
    "edgeopt sweep sweep.toml --dry-run",
    "edgeopt sweep sweep.toml --ray auto --write-best dist/",
    "edgeopt sweep sweep.toml --bench host --adb R5CT80ABCDE"))
@click.argument("space", type=PATH)
@click.option("-o", "--output", type=PATH, default="sweep", show_default=True,
              help="Results folder: one point and bundle per candidate, sweep.json, "
              "report.html; a sweep run again into it builds only what is not there.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Candidates built at once on this machine (worker processes).")
@click.option("--ray", "ray_address", default=None, metavar="auto|HOST:PORT",
              help="Run candidates as tasks on a Ray cluster ('auto': the one this machine "
              "belongs to); needs edgeopt[ray] and edgeopt on every node.")
@click.option("--write-best", type=PATH, default=None, help="Write each device's pick as a "
              "bundle FOLDER/DEVICE.")
@click.option("--tolerance", type=click.FloatRange(min=0), default=None, help="Quality a pick "
              "may give up for speed: in the metric's units (default 0.01 of a share, 1 dB).")
@click.option("--retry-failed", is_flag=True, help="Build the candidates that failed before "
              "again (a finished one is never rebuilt).")
@click.option("--search", type=click.Choice(["grid", "optuna"]), default="grid",
              show_default=True, help="grid: every candidate; optuna: a multi-objective "
              "search (NSGA-II: quality up, latency down) of --trials candidates per device "
              "(needs edgeopt[optuna]).")
@click.option("--trials", type=click.IntRange(min=1), default=None,
              help="Trials per device with --search optuna (default 20).")
@click.option("--bench", type=click.Choice(["host"]), default=None, help="Measure each "
              "host-cpu candidate's artifact on this machine after the builds (the front then "
              "compares measured latencies).")
@click.option("--adb", "adb_serial", cls=Trusted, default=None, metavar="SERIAL",
              help="Measure the candidates of every other device on the phone SERIAL (with "
              "the device's delegate), after the builds.")
@click.option("--no-reuse", "no_reuse", is_flag=True, help="Convert and compress every "
              "candidate afresh, as separate builds would (by default a worker reuses a float "
              "conversion or a pruned model across candidates with the same model, data and "
              "settings).")
@click.option("--dry-run", is_flag=True, help="List the candidates (and what is already "
              "built), build nothing.")
@json_option
def command(space: str, output: str, workers: int, ray_address: str | None,
            write_best: str | None, tolerance: float | None, retry_failed: bool,
            search: str, trials: int | None, bench: str | None, adb_serial: str | None,
            no_reuse: bool, dry_run: bool, as_json: bool) -> None:
    """Build every candidate of a sweep file and show the Pareto front per device."""
    config = SweepConfig(space, output, workers, ray_address, write_best, retry_failed,
                         tolerance, search, trials, bench, adb_serial, not no_reuse)
    if dry_run:
        return _dry_run(config, as_json)
    with library_output_to_log(), step_progress(as_json) as progress:
        result = run_sweep(config, progress)
    if as_json:
        return emit_json(result.to_json())
    click.echo(table(result.points, result.fronts, result.best))
    click.echo(f"\n{result.built} built now, {result.cached} from {result.output}, "
               f"{result.failed} failed, {result.benched} measured now; * on a device's "
               "Pareto front, best: the pick")
    for device, basis in result.bases.items():
        click.echo(f"{device}: the front compares the {AXIS[basis]} latency")
    for device, folder in result.best_bundles.items():
        click.echo(f"{device}: {folder}")
    click.echo(f"report: {result.output / 'report.html'}")


def _dry_run(config: SweepConfig, as_json: bool) -> None:
    plan_ = plan(config)
    store = Store(config.output)
    rows = [{"key": t.key, "candidate": t.label,
             "built": store.point(t.key) is not None} for t in plan_.tasks()]
    excluded = [{"candidate": c, "reason": r} for c, r in plan_.space.excluded]
    if as_json:
        return emit_json({"candidates": rows, "excluded": excluded})
    for r in rows:
        click.echo(f"{r['key']}  {r['candidate']}{'  (built)' if r['built'] else ''}")
    for e in excluded:
        click.echo(f"excluded: {e['candidate']}: {e['reason']}")
    click.echo(f"{len(rows)} candidates, {sum(r['built'] for r in rows)} already built")
