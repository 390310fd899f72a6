"""The `edgeopt` command: a thin layer that builds one config and calls one function.

Heavy frameworks are imported inside the commands that need them, so `edgeopt --help`
and `edgeopt devices` start in a fraction of a second.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import click

from edgeopt import __version__
from edgeopt.deadline import run_deadline
from edgeopt.display import printable
from edgeopt.errors import EdgeoptError
from edgeopt.interrupts import interrupted, watch_interrupts
from edgeopt.options import comma_floats

EXAMPLES = {
    "build": "edgeopt build samples/digits_cnn.onnx --device pixel-npu "
             "--calib samples/digits_calib.npz --eval samples/digits_eval.npz -o dist/",
    "convert": "edgeopt convert samples/digits_cnn.onnx -o digits_float.tflite",
    "inspect": "edgeopt inspect samples/digits_cnn.keras --json",
    "devices": "edgeopt devices --json",
    "completion": "eval \"$(edgeopt completion bash)\"   # in ~/.bashrc; zsh: ~/.zshrc",
}


def _example(name: str) -> str:
    return f"\b\nExample:\n  {EXAMPLES[name]}"


def _debug_requested(args: list[str]) -> bool:
    return "--debug" in args or os.environ.get("EDGEOPT_DEBUG") == "1"


def _disk_full(exc: BaseException) -> str | None:
    from edgeopt.bundle import disk_full_message

    return disk_full_message(exc)


def _fail(message: str, code: int) -> int:
    click.echo(f"edgeopt: error: {printable(message)}", err=True)
    return code


class EdgeoptGroup(click.Group):
    """Turns every user error into one `edgeopt: error:` line and exit status 2."""

    def main(self, args=None, prog_name=None, standalone_mode=True, **extra):
        args = list(sys.argv[1:] if args is None else args)
        code = self._run(args, prog_name or "edgeopt", **extra)
        if standalone_mode:
            sys.exit(code)
        return code

    def _run(self, args: list[str], prog_name: str, **extra) -> int:
        debug = _debug_requested(args)
        from edgeopt.tempfiles import private_tempdir

        try:
            with watch_interrupts(), private_tempdir():  # killed runs leave nothing behind
                result = super().main(args=args, prog_name=prog_name, standalone_mode=False,
                                      **extra)
        except click.exceptions.Exit as exc:
            return exc.exit_code
        except click.exceptions.Abort:
            return _fail("interrupted", 130)
        except click.ClickException as exc:
            return _fail(exc.format_message().replace("\n", " "), 2)
        except EdgeoptError as exc:
            if interrupted(exc):  # a library turned Ctrl-C into its own error
                return _fail("interrupted", 130)
            if debug:
                traceback.print_exc()
            return _fail(_disk_full(exc) or str(exc).replace("\n", " "), exc.exit_code)
        except KeyboardInterrupt:
            return _fail("interrupted", 130)
        except Exception as exc:  # a bug: say so on one line; --debug shows where
            if interrupted(exc):  # ImportError "initialization failed", SystemError, ...
                return _fail("interrupted", 130)
            if debug:
                traceback.print_exc()
            if full := _disk_full(exc):  # a full disk is the machine's state, not a bug
                return _fail(full, 2)
            return _fail(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug "
                         "and report it)".replace("\n", " "), 1)
        if interrupted():  # a library dropped the KeyboardInterrupt and the command went on
            return _fail("interrupted", 130)
        return result if isinstance(result, int) else 0


def json_option(f):
    return click.option("--json", "as_json", is_flag=True,
                        help="Print one JSON object on stdout and nothing else there.")(f)


def emit_json(obj: dict) -> None:
    click.echo(json.dumps(obj, indent=2, default=str))


def step_progress(as_json: bool):
    """Live steps on a terminal, `• step` lines in a pipe, nothing with --json. Make it
    inside `library_output_to_log()`, which keeps sys.stderr on the real terminal."""
    from edgeopt.terminal import StepProgress

    return StepProgress(sys.stderr, quiet=as_json)


def complete_devices(ctx, param, incomplete: str):
    """Shell completion of --device: profile names and 'all', after a comma too."""
    from click.shell_completion import CompletionItem

    from edgeopt.devices.profile import profile_names

    head, comma, tail = incomplete.rpartition(",")
    return [CompletionItem(head + comma + name) for name in [*profile_names(), "all"]
            if name.startswith(tail)]


CONFIG_META = "edgeopt.config_file"


@click.group(cls=EdgeoptGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edgeopt")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("--config", "config_file", default=None, metavar="FILE",
              help="Defaults for every command's flags, one table per command ([build], "
              "[bench], ...); default: ./edgeopt.toml when there is one.")
@click.pass_context
def cli(ctx, debug: bool, config_file: str | None) -> None:
    """Take a trained model to a phone or an embedded board, offline.

    \b
    edgeopt build model.onnx --device pixel-npu --calib images/ -o dist/

    Flags win over ./edgeopt.toml (or --config FILE), which wins over the defaults;
    `edgeopt build --dry-run` shows where each value came from.
    """
    from edgeopt.command_defaults import default_map
    from edgeopt.config import find_config_file, load_config_file

    run_deadline()  # a bad EDGEOPT_RUN_DEADLINE_S is an error before any work, not midway
    path = find_config_file(config_file)
    cfile = load_config_file(path) if path else None
    ctx.meta[CONFIG_META] = cfile
    ctx.default_map = default_map(ctx.command, cfile)


# --- build ------------------------------------------------------------------------------

@cli.command(epilog=_example("build"))
@click.argument("model", required=False)
@click.option("--device", "-d", default=None, shell_complete=complete_devices,
              help="Device profile name or a profile .toml (default host-cpu); 'all' or a "
              "comma list also estimates the artifact on those devices (the first named "
              "is the one it is built for). See `edgeopt devices`.")
@click.option("--calib", default=None, help="Calibration data: .npz, .npy, an image folder, "
              "or 'random' (smoke tests only).")
@click.option("--eval", "eval_data", default=None, help="Labelled or unlabelled evaluation "
              "data; default: a held-back fifth of --calib.")
@click.option("-o", "--output", default=None, help="Bundle folder to write (default dist).")
@click.option("--format", "fmt", type=click.Choice(["tflite", "onnx"]), default=None,
              help="Artifact format (default tflite).")
@click.option("--scheme", type=click.Choice(["w8a8", "w4a8", "w4a16", "w4afp32", "dynamic",
                                            "fp16", "float"]),
              default=None, help="Quantization scheme (default: the device's precision).")
@click.option("--method", type=click.Choice(["auto", "minmax", "percentile", "mse", "entropy",
                                            "converter"]), default=None,
              help="Activation ranges (default auto: the best measured per model); "
              "'converter' uses the TFLite converter's or onnxruntime's own min-max.")
@click.option("--recipe", default=None, help="Per-layer precision rules: a recipe .toml or a "
              "built-in recipe name.")
@click.option("--accuracy-budget", type=float, default=None, help="Allowed top-1 drop in "
              "points (labelled eval data), else an output-SQNR floor in dB: choose per-layer "
              "precision to meet it with the smallest model.")
@click.option("--mean", default=None, help="Image normalisation mean on 0..255 pixels, "
              "per channel, e.g. 127.5 or 123.7,116.3,103.5.")
@click.option("--std", default=None, help="Image normalisation std on 0..255 pixels "
              "(default 255: a 0..1 scale).")
@click.option("--labels", default=None, help="Class names, one per line, packed into the "
              ".tflite as its TFLite-metadata label file (default: the image folder's classes).")
@click.option("--input-shape", "input_shapes", multiple=True, help="Fix an input's dynamic "
              "dimensions, e.g. x:1,3,48,192 (repeat for more inputs).")
@click.option("--require-full-delegation", is_flag=True, default=None,
              help="Fail when any op would fall back to the CPU.")
@click.option("--prune", type=float, default=None, help="Before quantizing, remove this "
              "share of the MACs by removing channels (structured pruning), e.g. 0.5.")
@click.option("--prune-criterion", type=click.Choice(["l1", "l2", "bn_scale", "activation",
                                                     "taylor"]), default=None,
              help="Channel importance for --prune (default l1).")
@click.option("--prune-recipe", default=None, help="Channel ratios per layer: a .toml with "
              "[prune] \"layer regex\" = share.")
@click.option("--prune-channel-multiple", type=int, default=None, help="Pruned layers keep a "
              "multiple of this many channels (default 8: CPU/NPU kernels work in tiles).")
@click.option("--distill", is_flag=True, default=None, help="Train the pruned model to match "
              "the original on the --calib samples (labels used when they have them).")
@click.option("--distill-epochs", type=int, default=None, help="Distillation epochs at most "
              "(default 20; early stopping on a held-back fifth).")
@click.option("--config", "config_file", default=None, metavar="FILE",
              help="Defaults from FILE instead of ./edgeopt.toml, e.g. a bundle's edgeopt.toml "
              "(paths in it are relative to it); flags still win.")
@click.option("--dry-run", is_flag=True, help="Print the resolved config, with where each "
              "value came from, and exit.")
@json_option
@click.pass_context
def build(ctx, model, device, calib, eval_data, output, fmt, scheme, method, recipe,
          accuracy_budget, mean, std, labels, input_shapes, require_full_delegation, prune,
          prune_criterion, prune_recipe, prune_channel_multiple, distill, distill_epochs,
          config_file, dry_run, as_json):
    """Compress, convert, quantize and validate MODEL, and write a bundle for a device."""
    from edgeopt.config import load_config_file, resolve_build

    cfile = load_config_file(config_file) if config_file else ctx.meta.get(CONFIG_META)
    resolved = resolve_build({
        "model": model, "device": device, "calib": calib, "eval": eval_data, "output": output,
        "format": fmt, "scheme": scheme, "method": method, "recipe": recipe,
        "accuracy_budget": accuracy_budget, "mean": comma_floats(mean), "std": comma_floats(std),
        "labels": labels, "input_shapes": tuple(input_shapes) or None,
        "require_full_delegation": require_full_delegation or None, "prune": prune,
        "prune_criterion": prune_criterion, "prune_recipe": prune_recipe,
        "prune_channel_multiple": prune_channel_multiple,
        "distill": distill or None, "distill_epochs": distill_epochs}, cfile)
    if dry_run:
        _print_dry_run(resolved, as_json)
        return
    from edgeopt.pipeline import build as run_build
    from edgeopt.quiet import library_output_to_log
    from edgeopt.summary import build_summary
    from edgeopt.terminal import colour_enabled

    with library_output_to_log(), step_progress(as_json) as progress:
        result = run_build(resolved.config, progress)
    if as_json:
        emit_json({"bundle": str(result.output), **result.manifest})
    else:
        click.echo(build_summary(result, colour_enabled(sys.stdout)))


def _print_dry_run(resolved, as_json: bool) -> None:
    """The config a build would run with; each line says where its value came from."""
    from edgeopt.config import device_names

    devices = device_names(resolved.config.device)
    if as_json:
        emit_json({**resolved.to_json(), "devices": list(devices)})
        return
    source = resolved.file or "no config file (none given, no ./edgeopt.toml)"
    click.echo(f"# config file: {source}")
    if len(devices) > 1:
        click.echo(f"# builds for {devices[0]}; also estimates on: {', '.join(devices[1:])}")
    click.echo(resolved.config.to_toml(Path.cwd(), resolved.sources), nl=False)


# --- convert ----------------------------------------------------------------------------

@cli.command(epilog=_example("convert"))
@click.argument("model")
@click.option("-o", "--output", required=True, help="The float .tflite file to write.")
@click.option("--calib", default="random", help="Sample inputs for the parity check "
              "(default: random inputs; an image folder also records its normalisation).")
@click.option("--labels", default=None, help="Class names, one per line, packed into the "
              ".tflite as its TFLite-metadata label file.")
@json_option
def convert(model, output, calib, labels, as_json):
    """Convert MODEL to a float .tflite and check it against the source."""
    from edgeopt.convert import convert_to_file
    from edgeopt.quiet import library_output_to_log
    from edgeopt.summary import size_text

    with library_output_to_log(), step_progress(as_json) as progress:
        record = convert_to_file(model, Path(output), calib, progress, labels=labels)
    if as_json:
        emit_json(record)
    else:
        p = record["parity"]
        click.echo(f"wrote {output} ({size_text(record['size_bytes'])}) with "
                   f"{record['converter']}; "
                   f"parity on {p['samples']} samples: max abs {p['max_abs']:.3g}, "
                   f"cosine {p['cosine']:.6f}")


# --- inspect ----------------------------------------------------------------------------

@cli.command(epilog=_example("inspect"))
@click.argument("model")
@click.option("--device", "-d", default=None, shell_complete=complete_devices,
              help="Also show which ops run where on this "
              "device, and why the others fall back; 'all' gives one line per device.")
@json_option
def inspect(model, device, as_json):
    """Format, inputs and outputs, op histogram, parameters, MACs and size of MODEL."""
    from edgeopt.inspect import inspect_model, render_inspection
    from edgeopt.quiet import library_output_to_log

    with library_output_to_log():
        record = inspect_model(model, device)
    click.echo(json.dumps(record, indent=2) if as_json else render_inspection(record))


# --- devices ----------------------------------------------------------------------------

@cli.group(epilog=_example("devices"), invoke_without_command=True)
@json_option
@click.pass_context
def devices(ctx, as_json):
    """List the device profiles edgeopt ships (`devices calibrate` fits one to this host)."""
    if ctx.invoked_subcommand is not None:
        return
    from edgeopt.devices.profile import all_profiles

    profiles = [p.summary() for p in all_profiles()]
    if as_json:
        emit_json({"devices": profiles})
        return
    header = ("name", "kind", "delegate", "precision", "io", "formats")
    rows = [(p["name"], p["kind"], p["delegate"], p["precision"], p["io_dtype"],
             ",".join(p["formats"])) for p in profiles]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


@cli.command(epilog=_example("completion"))
@click.argument("shell", type=click.Choice(["bash", "zsh"]))
def completion(shell):
    """Print the shell-completion script for SHELL (commands, options, device names)."""
    from click.shell_completion import get_completion_class

    script = get_completion_class(shell)(cli, {}, "edgeopt", "_EDGEOPT_COMPLETE").source()
    click.echo(script)


def _register_commands() -> None:
    """Commands whose code lives with their stage; their modules import nothing heavy."""
    from edgeopt.bench import bench_command
    from edgeopt.compress import compress_command
    from edgeopt.devices.commands import calibrate_command, estimate_command
    from edgeopt.quantize import quantize_command

    cli.add_command(bench_command, "bench")
    cli.add_command(quantize_command, "quantize")
    cli.add_command(compress_command, "compress")
    cli.add_command(estimate_command, "estimate")
    devices.add_command(calibrate_command, "calibrate")


_register_commands()


def main() -> None:
    cli.main(prog_name="edgeopt")


if __name__ == "__main__":
    main()
