"""`edgeopt bench`: measure for real, here, on phones over adb, on boards over ssh."""

from __future__ import annotations

from pathlib import Path

import click

from edgeopt.bench import (
    ADB_NUMERICS_SAMPLES,
    ADB_WARMUP,
    HOST_NUMERICS_SAMPLES,
    HOST_WARMUP,
    BenchConfig,
    run_bench,
)
from edgeopt.choices import BenchClock, BenchRunner
from edgeopt.cli.shared import (
    NAME_OR_PATH,
    PATH,
    KeyValue,
    Trusted,
    choice,
    device_option,
    emit_json,
    example,
    json_option,
    step_progress,
)
from edgeopt.devices.runners.measurement import default_records_path
from edgeopt.devices.runners.report_text import render_outcome
from edgeopt.divergence import (
    DEFAULT_THRESHOLD,
    DivergenceConfig,
    ObserveMode,
    ReferenceKernels,
    find_divergence,
)
from edgeopt.divergence_text import render_divergence
from edgeopt.errors import DeviceError
from edgeopt.quiet import library_output_to_log

DEFAULTS = BenchConfig(models=())


@click.command("bench", epilog=example(
    "edgeopt bench dist/digits_cnn.tflite --runs 100 --json",
    "edgeopt bench model.tflite --device pixel-gpu --adb --check-numerics",
    "edgeopt bench a.tflite b.tflite --adb all --record",
    "edgeopt bench dist/model.tflite --find-divergence --adb"))
@click.argument("models", nargs=-1, type=PATH)
@device_option("Device profile name or .toml (default: host-cpu on the host; over adb it "
               "picks the delegate flags).")
@click.option("--runs", type=click.IntRange(min=1), default=DEFAULTS.runs, show_default=True,
              help="Timed steady runs (at least).")
@click.option("--min-secs", type=click.FloatRange(min=0), default=DEFAULTS.min_secs,
              show_default=True, help="Steady runs go on for at least this long, as "
              "benchmark_model's --min_secs: a short burst of runs is at the mercy of other "
              "work.")
@click.option("--warmup", type=click.IntRange(min=0), default=None,
              help=f"Untimed runs first (default {HOST_WARMUP} on the host, {ADB_WARMUP} "
                   "over adb).")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="CPU threads (default: the runtime's choice).")
@click.option("--clock", type=choice(BenchClock), default=DEFAULTS.clock, show_default=True,
              help="Host runs: wall time, or the thread's CPU time (with --threads 1: leaves "
              "out preemption by other work on a busy machine).")
@click.option("--delegate", cls=Trusted, type=NAME_OR_PATH, default=None,
              help="Delegate NAME (xnnpack, none, gpu, nnapi, qnn-htp, edgetpu, ...) or PATH "
              "to a delegate library (default: the profile's).")
@click.option("--delegate-option", "delegate_options", cls=Trusted, type=KeyValue(),
              multiple=True, metavar="KEY=VALUE",
              help="Option for an external delegate library (repeatable).")
@click.option("--adb", cls=Trusted, is_flag=False, flag_value="", default=None,
              metavar="[SERIAL|all]", help="Run on an Android device with benchmark_model: "
              "the only one (no value), SERIAL, or all connected devices in parallel.")
@click.option("--ssh", cls=Trusted, multiple=True, metavar="[USER@]HOST[:PORT]",
              help="Run on a Linux board over the system ssh client (repeatable: boards in "
                   "parallel).")
@click.option("--ssh-option", "ssh_options", cls=Trusted, multiple=True, metavar="OPTION",
              help="Extra `ssh -o OPTION` (repeatable), e.g. IdentityFile=~/.ssh/board.")
@click.option("--runner", type=choice(BenchRunner), default=DEFAULTS.runner, show_default=True,
              help="On the device: TFLite's benchmark_model, or edgeopt's remote_bench.py "
                   "under the device's python3 (auto: benchmark_model when there is one).")
@click.option("--benchmark-binary", cls=Trusted, type=NAME_OR_PATH, default=None,
              help="benchmark_model to use: a local file to push, or a path on the device "
              "(default: /data/local/tmp/benchmark_model or PATH).")
@click.option("--benchmark-arg", "benchmark_args", cls=Trusted, multiple=True,
              help="Extra flag passed to benchmark_model as is (repeatable).")
@click.option("--check-numerics", is_flag=True, help="Also run the same inputs without the "
              "delegate and report SQNR, max-abs difference and top-1 agreement.")
@click.option("--numerics-samples", type=click.IntRange(min=1), default=None,
              help=f"Inputs for --check-numerics (default {HOST_NUMERICS_SAMPLES} on the host, "
                   f"{ADB_NUMERICS_SAMPLES} over adb).")
@click.option("--inputs", type=PATH, default=None, help="Data for --check-numerics (.npz, "
              ".npy, images); default: seeded random inputs.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=DEFAULTS.timeout_s,
              show_default=True, help="Seconds before a device run, or any other step on a "
              "device (probe, push, pull), counts as hung.")
@click.option("--idle", "idle_s", type=click.FloatRange(min=0), default=DEFAULTS.idle_s,
              show_default=True, help="Seconds of idle power sampled before the run (the "
              "baseline).")
@click.option("--power-secs", type=click.FloatRange(min=0), default=DEFAULTS.power_secs,
              show_default=True, help="With power sampling, the steady runs last at least "
              "this long (the gauge needs samples; --runs is then a minimum).")
@click.option("--no-power", is_flag=True, help="Do not sample the battery.")
@click.option("--record", type=PATH, is_flag=False, flag_value="", default=None,
              metavar="[FILE]", help="Append each measurement as a JSON line (no value: the "
              "user cache file that `edgeopt devices calibrate` reads).")
@click.option("--find-divergence", is_flag=True, help="Instead of timing: run the same "
              "inputs with and without the delegate, compare every op's output and name the "
              "first op that departs beyond --threshold, with its path to the outputs (host: "
              "XNNPACK or --delegate against LiteRT's reference kernels; over adb: the "
              "phone's delegate against its CPU kernels).")
@click.option("--threshold", type=click.FloatRange(min=0, min_open=True),
              default=DEFAULT_THRESHOLD, show_default=True,
              help="--find-divergence: the relative error an op's output may reach "
                   "(quantized outputs also need more than one step of difference).")
@click.option("--observe", type=choice(ObserveMode), default=ObserveMode.OUTPUTS.value,
              show_default=True, help="--find-divergence: read the delegate's inner tensors "
              "as extra model outputs, or (host) with LiteRT's preserve-all-tensors, which "
              "sees partition boundaries only.")
@click.option("--reference", type=choice(ReferenceKernels),
              default=ReferenceKernels.REF.value, show_default=True,
              help="--find-divergence on the host: compare with LiteRT's reference kernels, "
              "or with its optimized builtin ones (the kernels a phone's CPU runs).")
@json_option
def command(models: tuple[str, ...], as_json: bool, **options) -> None:
    """Measure latency, memory, power and numerics of MODELS, here, on phones over adb, or
    on Linux boards over ssh."""
    divergence = [options.pop(k) for k in ("find_divergence", "threshold", "observe",
                                           "reference")]
    config = bench_config(models, options)
    if divergence[0]:
        _divergence(DivergenceConfig.from_bench(config, *divergence[1:]), as_json)
        return
    with library_output_to_log(), step_progress(as_json) as progress:
        outcome = run_bench(config, progress)
    emit_json(outcome.to_json()) if as_json else click.echo(render_outcome(outcome))
    if outcome.errors:
        raise DeviceError(f"{len(outcome.errors)} of "
                          f"{len(outcome.errors) + len(outcome.measurements)} measurements "
                          f"failed; first: {outcome.errors[0]}")


def _divergence(config: DivergenceConfig, as_json: bool) -> None:
    with library_output_to_log(), step_progress(as_json) as progress:
        record = find_divergence(config, progress)
    emit_json(record) if as_json else click.echo(render_divergence(record))


def bench_config(models: tuple[str, ...], options: dict) -> BenchConfig:
    """The command's flags as one BenchConfig (flag names are the config's, except these)."""
    models, adb = _models_and_adb(models, options.pop("adb"))
    record = options.pop("record")
    return BenchConfig(models=tuple(Path(m) for m in models), adb=adb,
                       delegate_options=tuple(options.pop("delegate_options")),
                       record=None if record is None else Path(record or default_records_path()),
                       power=not options.pop("no_power"), **options)


def _models_and_adb(models: tuple[str, ...], adb: str | None) -> tuple[tuple[str, ...], str | None]:
    """`--adb MODEL` with no other model: the user meant `--adb` alone, then the model."""
    if not models and adb and Path(adb).is_file():
        return (adb,), ""
    return models, adb
