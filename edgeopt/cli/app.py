"""The `edgeopt` command group: global options, the config file, the commands.

Every command lives in its own module of this package, builds one config and calls one
library function. Heavy frameworks are imported inside the library functions that need
them, so `edgeopt --help` and `edgeopt devices` start in a fraction of a second.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping

import click
from click.shell_completion import CompletionItem
from click.utils import make_default_short_help

from edgeopt import __version__
from edgeopt.cli.defaults import install
from edgeopt.cli.shared import EdgeoptGroup
from edgeopt.deadline import run_deadline

# name -> (module defining `command`, its one-line help). A command's module, and the
# libraries it imports (numpy, the stages), load only when that command runs, so `--help`,
# completion and `devices` stay light; tests/test_cli.py checks the lines match the commands.
COMMANDS: dict[str, tuple[str, str]] = {
    "build": ("edgeopt.cli.build", "Compress, convert, quantize and validate MODEL, and write "
              "a bundle for a device."),
    "convert": ("edgeopt.cli.convert", "Convert MODEL to a float .tflite and check it "
                "against the source."),
    "inspect": ("edgeopt.cli.inspect", "Format, inputs and outputs, op histogram, "
                "parameters, MACs and size of MODEL."),
    "quantize": ("edgeopt.cli.quantize", "Quantize MODEL with edgeopt's calibration core and "
                 "check it in the real runtime."),
    "compress": ("edgeopt.cli.compress", "Prune (remove channels) or sparsify MODEL, and "
                 "distill it back from the original."),
    "sweep": ("edgeopt.cli.sweep", "Build every candidate of a sweep file and show the "
              "Pareto front per device."),
    "estimate": ("edgeopt.cli.estimate", "Estimate latency and energy of MODEL on a device, "
                 "per op, before touching it."),
    "bench": ("edgeopt.cli.bench", "Measure latency, memory, power and numerics of MODELS, "
              "here, on phones over adb, or on Linux boards over ssh."),
    "devices": ("edgeopt.cli.devices", "List the device profiles edgeopt ships (`devices "
                "calibrate` fits one to this host)."),
    "completion": ("edgeopt.cli.completion", "Print the shell-completion script for SHELL "
                   '(commands, options, device names); with --json, {"shell", "install", '
                   '"script"}.'),
}


class LazyCommands(MutableMapping):
    """click's name -> command table, importing a command's module on first use."""

    def __init__(self, modules: dict[str, tuple[str, str]]) -> None:
        self._modules = modules
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            if name not in self._modules:
                raise KeyError(name)
            self._loaded[name] = importlib.import_module(self._modules[name][0]).command
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._modules, *self._loaded]))

    def __len__(self) -> int:
        return len(set(self._modules) | set(self._loaded))


class LazyGroup(EdgeoptGroup):
    """The top-level group: help and completion list commands from COMMANDS' lines."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(COMMANDS)  # type: ignore[assignment]

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.commands)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, make_default_short_help(text, limit))
                for name, (_, text) in sorted(COMMANDS.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        names = [CompletionItem(name, help=text) for name, (_, text) in COMMANDS.items()
                 if name.startswith(incomplete)]
        return names + click.Command.shell_complete(self, ctx, incomplete)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edgeopt")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("--config", "config_file", default=None, metavar="FILE",
              help="Defaults for every command's flags, one table per command ([build], "
              "[bench], ...); default: ./edgeopt.toml when there is one (which may not set "
              "delegates, ssh or adb: those come from the command line or --config).")
@click.pass_context
def cli(ctx: click.Context, debug: bool, config_file: str | None) -> None:
    """Take a trained model to a phone or an embedded board, offline.

    \b
    edgeopt build model.onnx --device pixel-npu --calib images/ -o dist/

    Flags win over ./edgeopt.toml (or --config FILE), which wins over the defaults;
    `edgeopt build --dry-run` shows where each value came from.
    """
    run_deadline()  # a bad EDGEOPT_RUN_DEADLINE_S is an error before any work, not midway
    install(ctx, config_file)


def main() -> None:
    cli.main(prog_name="edgeopt")
