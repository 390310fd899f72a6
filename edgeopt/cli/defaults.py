"""A config file's tables as click's `default_map`, for every command; provenance for
`--dry-run` from click's parameter sources.

One table per command (`[build]`, `[bench]`, `[devices.calibrate]`...); keys outside any
table belong to `build`. Keys are the option's long name (`min-secs` or `min_secs`) or its
parameter name; a command's MODEL argument may be given too. Each value is checked with
the option's own click type when the file is read, so an unknown table or key, or a value
of the wrong type, is one error naming the key and the file before anything runs. Paths
(options whose type is a `PathValue`) are relative to the file, so a bundle's
edgeopt.toml rebuilds it from any folder.

Options that load code or reach hosts (`Trusted`: bench's delegate, ssh options, hosts...)
are taken from an explicit `--config FILE` only, never from an edgeopt.toml that happens
to be in the current folder.
"""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from edgeopt.cli.shared import COMMAND_ARGS, PathValue, Trusted
from edgeopt.config import ConfigFile, find_config_file, load_config_file
from edgeopt.errors import ConfigError

CONFIG_META = "edgeopt.config_file"
SKIPPED = frozenset({"help", "version", "config_file", "debug", "dry_run", "as_json"})
COMMAND_LINE, DEFAULT = "command line", "default"


def install(ctx: click.Context, explicit: str | None) -> None:
    """Read `--config FILE` (or ./edgeopt.toml) into the context's default_map; never
    both: with `build --config FILE`, ./edgeopt.toml is not read at all."""
    later = ctx.meta.get(COMMAND_ARGS, [])
    if explicit is None and any(a == "--config" or a.startswith("--config=") for a in later):
        ctx.meta[CONFIG_META], ctx.default_map = None, {}
        return
    path = find_config_file(explicit)
    cfile = load_config_file(path) if path else None
    ctx.meta[CONFIG_META] = cfile
    root = ctx.find_root().command
    ctx.default_map = default_map(root, cfile, explicit=bool(explicit)) if cfile else {}


def default_map(group: click.Group, cfile: ConfigFile, explicit: bool) -> dict:
    """click's default_map for every command, from the file's tables."""
    tables = {**cfile.commands, "build": cfile.build} if cfile.build else dict(cfile.commands)
    defaults = {}
    for name, table in tables.items():
        command = group.commands.get(name)
        if command is None:
            known = ", ".join(sorted(group.commands))
            raise ConfigError(f"config file {cfile.path}: unknown table [{name}]; tables are "
                              f"command names: {known}")
        defaults[name] = _table_defaults(command, table, cfile, name, explicit)
    return defaults


def _table_defaults(command: click.Command, table: dict, cfile: ConfigFile, where: str,
                    explicit: bool) -> dict:
    params = _params(command)
    defaults = {}
    for raw_key, value in table.items():
        sub = getattr(command, "commands", {}).get(raw_key)
        if isinstance(value, dict) and sub is not None:
            defaults[raw_key] = _table_defaults(sub, value, cfile, f"{where}.{raw_key}",
                                                explicit)
            continue
        param = params.get(raw_key.replace("-", "_"))
        if param is None:
            known = ", ".join(sorted({p.name for p in params.values()})) or "none"
            raise ConfigError(f"config file {cfile.path}: unknown key '{raw_key}' in "
                              f"[{where}]; known: {known}")
        if isinstance(param, Trusted) and not explicit:
            raise ConfigError(
                f"config file {cfile.path}: [{where}] {raw_key} loads code or reaches a host, "
                "so edgeopt takes it only from the command line or an explicit --config "
                "FILE, not from an edgeopt.toml it finds in the current folder")
        defaults[param.name] = _checked(command, param, value, cfile, f"[{where}] {raw_key}")
    return defaults


def _params(command: click.Command) -> dict[str, click.Parameter]:
    """Options by long names and parameter names (dashes as underscores), and arguments."""
    found: dict[str, click.Parameter] = {}
    for param in command.params:
        if param.name in SKIPPED:
            continue
        longs = [o.lstrip("-") for o in param.opts if o.startswith("--")]
        for spelling in [param.name, *longs]:
            found[spelling.replace("-", "_")] = param
    return found


def _checked(command: click.Command, param: click.Parameter, value, cfile: ConfigFile,
             where: str):
    """The value as the option would parse it, paths made relative to the file."""
    fail = f"config file {cfile.path}: {where}"
    if isinstance(value, dict):
        raise ConfigError(f"{fail} must be a value, not a table")
    many = param.multiple or param.nargs == -1
    if many and not isinstance(value, list):
        value = [value]
    items = value if many else [value]
    for item in items:
        _check_kind(param, item, fail)
    if isinstance(param.type, PathValue):
        items = [param.type.rebase(v, str(cfile.path.parent)) if isinstance(v, str) else v
                 for v in items]
    try:
        return param.type_cast_value(click.Context(command), items if many else items[0])
    except click.BadParameter as exc:
        raise ConfigError(f"{fail}: {exc.format_message()}") from exc


def _check_kind(param: click.Parameter, value, fail: str) -> None:
    """TOML has types: a flag takes true/false, a number is not a string or a boolean."""
    is_flag = getattr(param, "is_bool_flag", False)
    if is_flag and not isinstance(value, bool):
        raise ConfigError(f"{fail} must be true or false, got {value!r}")
    if not is_flag and isinstance(value, bool):
        raise ConfigError(f"{fail} takes a value, not {str(value).lower()}")
    numeric = isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType))
    if numeric and not isinstance(value, (int, float)):
        raise ConfigError(f"{fail} must be a number, got {value!r}")
    if isinstance(param.type, click.types.IntParamType) and isinstance(value, float):
        raise ConfigError(f"{fail} must be an integer, got {value!r}")


def sources(ctx: click.Context) -> dict[str, str]:
    """Where each parameter's value came from: 'command line', the config file, 'default'
    (the parameter names are the config's field names)."""
    cfile = ctx.meta.get(CONFIG_META)
    found = {}
    for param in ctx.command.params:
        if param.name in SKIPPED:
            continue
        source = ctx.get_parameter_source(param.name)
        found[param.name] = (
            COMMAND_LINE if source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
            else str(cfile.path) if source is ParameterSource.DEFAULT_MAP and cfile
            else DEFAULT)
    return found


def config_file_option(f):
    """`build --config FILE`: the same as `edgeopt --config FILE build`."""
    def load(ctx: click.Context, _param, value: str | None):
        if value is not None:
            install(ctx.parent or ctx, value)
            ctx.default_map = (ctx.parent or ctx).default_map.get(ctx.info_name)
        return value

    return click.option("--config", "config_file", default=None, metavar="FILE",
                        is_eager=True, expose_value=False, callback=load,
                        help="Defaults from FILE instead of ./edgeopt.toml, e.g. a bundle's "
                        "edgeopt.toml (paths in it are relative to it); flags still win.")(f)


def config_path(ctx: click.Context) -> Path | None:
    cfile = ctx.meta.get(CONFIG_META)
    return cfile.path if cfile else None
