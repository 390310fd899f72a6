"""What every command shares: the group that turns errors into one line, the option
decorators, the value types a config file can also give, the one JSON emitter and the one
progress factory.

Option types that name files (`PathValue`, `NameOrPath`, `DeviceSpec`) also tell the
config loader (edgeopt.cli.defaults) that a value from a file is relative to that file;
`Trusted` options load code or reach hosts and are refused from an implicitly found
./edgeopt.toml.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from enum import StrEnum

import click
from click.shell_completion import CompletionItem

from edgeopt.bundle import disk_full_message
from edgeopt.choices import TorchRoute
from edgeopt.devices.profile import profile_names
from edgeopt.display import printable
from edgeopt.errors import EdgeoptError
from edgeopt.interrupts import interrupted, watch_interrupts
from edgeopt.tempfiles import private_tempdir
from edgeopt.terminal import StepProgress

NOT_PATHS = ("random", "all", "")
COMMAND_ARGS = "edgeopt.command_args"


def _debug_requested(args: list[str]) -> bool:
    return "--debug" in args or os.environ.get("EDGEOPT_DEBUG") == "1"


def _fail(message: str, code: int) -> int:
    click.echo(f"edgeopt: error: {printable(message)}", err=True)
    return code


class EdgeoptGroup(click.Group):
    """Turns every user error into one `edgeopt: error:` line and exit status 2."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        # the command's own arguments: `build --config FILE` replaces ./edgeopt.toml
        ctx.meta[COMMAND_ARGS] = [*getattr(ctx, "_protected_args", []), *ctx.args]
        return rest

    def main(self, args=None, prog_name=None, standalone_mode=True, **extra):
        args = list(sys.argv[1:] if args is None else args)
        code = self._run(args, prog_name or "edgeopt", **extra)
        if standalone_mode:
            sys.exit(code)
        return code

    def _run(self, args: list[str], prog_name: str, **extra) -> int:
        debug = _debug_requested(args)
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
            return _fail(disk_full_message(exc) or str(exc).replace("\n", " "), exc.exit_code)
        except KeyboardInterrupt:
            return _fail("interrupted", 130)
        except Exception as exc:  # a bug: say so on one line; --debug shows where
            if interrupted(exc):  # ImportError "initialization failed", SystemError, ...
                return _fail("interrupted", 130)
            if debug:
                traceback.print_exc()
            if full := disk_full_message(exc):  # a full disk is the machine's state, not a bug
                return _fail(full, 2)
            return _fail(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug "
                         "and report it)".replace("\n", " "), 1)
        if interrupted():  # a library dropped the KeyboardInterrupt and the command went on
            return _fail("interrupted", 130)
        return result if isinstance(result, int) else 0


# --- output: one JSON emitter, one progress system -----------------------------------------

def emit_json(obj: dict) -> None:
    """The one JSON object a `--json` command prints on stdout."""
    click.echo(json.dumps(obj, indent=2, default=str))


def step_progress(as_json: bool) -> StepProgress:
    """Live steps on a terminal, `• step` lines in a pipe, nothing with --json. Make it
    inside `library_output_to_log()`, which keeps sys.stderr on the real terminal."""
    return StepProgress(sys.stderr, quiet=as_json)


def example(*commands: str) -> str:
    """The epilog every command carries: one or more example command lines."""
    return "\b\nExample:\n" + "\n".join(f"  {c}" for c in commands)


# --- value types ------------------------------------------------------------------------

def choice(choices: type[StrEnum], *leave_out: StrEnum) -> click.Choice:
    """A click.Choice of an enum's values (the library's own names)."""
    return click.Choice([c.value for c in choices if c not in leave_out])


class PathValue(click.ParamType):
    """A file or folder; from a config file, relative to the file."""

    name = "path"

    def __init__(self, dir_okay: bool = True):
        self.dir_okay = dir_okay

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            self.fail(f"expected a path (a string), got {value!r}", param, ctx)
        if not self.dir_okay and os.path.isdir(value):
            self.fail(f"{value} is a folder; give a file", param, ctx)
        return value

    def rebase(self, value: str, folder: str) -> str:
        if value in NOT_PATHS or os.path.isabs(value):
            return value
        return os.path.normpath(os.path.join(folder, value))


class NameOrPath(PathValue):
    """A built-in name (w8a8, pixel-npu, gpu) or a file: a path when it looks like one."""

    name = "name|path"
    SUFFIXES = (".toml", ".so", ".dylib", ".dll")

    def rebase(self, value: str, folder: str) -> str:
        looks_like_path = "/" in value or os.sep in value or value.endswith(self.SUFFIXES) \
            or ".so." in value
        return super().rebase(value, folder) if looks_like_path else value


class DeviceSpec(NameOrPath):
    """A device profile name or .toml, 'all', or a comma list of them."""

    name = "device"

    def rebase(self, value: str, folder: str) -> str:
        return ",".join(super(DeviceSpec, self).rebase(item.strip(), folder)
                        for item in value.split(",") if item.strip())

    def shell_complete(self, ctx, param, incomplete: str):
        """Profile names and 'all', after a comma too."""
        head, comma, tail = incomplete.rpartition(",")
        return [CompletionItem(head + comma + name) for name in [*profile_names(), "all"]
                if name.startswith(tail)]


class FloatList(click.ParamType):
    """`127.5` or `123.7,116.3,103.5` on the command line; a number or a list in a file."""

    name = "floats"

    def convert(self, value, param, ctx):
        items = value if isinstance(value, (list, tuple)) else [value]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            return tuple(float(v) for v in items)
        if isinstance(value, str):
            try:
                return tuple(float(v) for v in value.split(",") if v.strip())
            except ValueError:
                pass
        self.fail(f"expected a number or comma-separated numbers, got {value!r}", param, ctx)


class KeyValue(click.ParamType):
    """KEY=VALUE, as a (key, value) pair."""

    name = "key=value"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        key, sep, text = str(value).partition("=")
        if not sep or not key:
            self.fail(f"expected KEY=VALUE, got {value!r}", param, ctx)
        return key, text


class Trusted(click.Option):
    """An option that loads code or reaches a host: never from an implicit ./edgeopt.toml."""


PATH = PathValue()
FILE = PathValue(dir_okay=False)
NAME_OR_PATH = NameOrPath()
DEVICE = DeviceSpec()
FLOATS = FloatList()


# --- shared options -----------------------------------------------------------------------

def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print one JSON object on stdout and nothing else there.")(f)


def device_option(help: str, default: str | None = None) -> Callable:
    return click.option("--device", "-d", type=DEVICE, default=default,
                        show_default=default is not None, help=help)


def input_shape_option(f: Callable) -> Callable:
    return click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME:DIMS",
                        help="Fix an input's dynamic dimensions, e.g. x:1,3,48,192 (repeat "
                        "for more inputs).")(f)


def torch_route_option(f: Callable) -> Callable:
    return click.option("--torch-route", "torch_route", type=choice(TorchRoute),
                        default=TorchRoute.ONNX.value, show_default=True,
                        help="How a PyTorch .pt2 becomes a model: torch.onnx.export into the "
                        "ONNX path, or litert-torch straight to a float .tflite.")(f)


def input_value_option(f: Callable) -> Callable:
    return click.option("--input-value", "input_values", multiple=True, metavar="NAME=VALUE",
                        help="Pin an .onnx input to one value for the build, e.g. sr=16000: "
                        "the artifact has no such input (repeat for more inputs).")(f)


def normalisation_options(f: Callable) -> Callable:
    f = click.option("--std", type=FLOATS, default=None,
                     help="Image normalisation std on 0..255 pixels (default 255: a 0..1 "
                     "scale).")(f)
    return click.option("--mean", type=FLOATS, default=None,
                        help="Image normalisation mean on 0..255 pixels, per channel, e.g. "
                        "127.5 or 123.7,116.3,103.5.")(f)
