"""`edgeopt completion`: the shell-completion script."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

from edgeopt.choices import Shell
from edgeopt.cli.shared import choice, emit_json, example, json_option

COMPLETE_VAR = "_EDGEOPT_COMPLETE"


@click.command("completion", epilog=example(
    "eval \"$(edgeopt completion bash)\"   # in ~/.bashrc; zsh: ~/.zshrc",
    "edgeopt completion zsh --json"))
@click.argument("shell", type=choice(Shell))
@json_option
@click.pass_context
def command(ctx: click.Context, shell: str, as_json: bool) -> None:
    """Print the shell-completion script for SHELL (commands, options, device names);
    with --json, {"shell", "install", "script"}."""
    root = ctx.find_root().command
    script = get_completion_class(shell)(root, {}, "edgeopt", COMPLETE_VAR).source()
    if as_json:
        rc = "~/.bashrc" if shell == Shell.BASH else "~/.zshrc"
        return emit_json({"shell": shell, "install": f'eval "$(edgeopt completion {shell})" '
                          f"in {rc}", "script": script})
    click.echo(script)
