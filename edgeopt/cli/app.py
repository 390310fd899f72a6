"""The `edgeopt` command group: global options, the config file, the commands.

Every command lives in its own module of this package, builds one config and calls one
library function. Heavy frameworks are imported inside the library functions that need
them, so `edgeopt --help` and `edgeopt devices` start in a fraction of a second.
"""

from __future__ import annotations

import click

from edgeopt import __version__
from edgeopt.cli.bench import command as bench
from edgeopt.cli.build import command as build
from edgeopt.cli.completion import command as completion
from edgeopt.cli.compress import command as compress
from edgeopt.cli.convert import command as convert
from edgeopt.cli.defaults import install
from edgeopt.cli.devices import command as devices
from edgeopt.cli.estimate import command as estimate
from edgeopt.cli.inspect import command as inspect
from edgeopt.cli.quantize import command as quantize
from edgeopt.cli.shared import EdgeoptGroup
from edgeopt.deadline import run_deadline


@click.group(cls=EdgeoptGroup, context_settings={"help_option_names": ["-h", "--help"]})
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


for command in (build, convert, inspect, quantize, compress, estimate, bench, devices,
                completion):
    cli.add_command(command)


def main() -> None:
    cli.main(prog_name="edgeopt")
