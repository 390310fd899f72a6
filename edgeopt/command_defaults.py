"""A config file's `[bench]`, `[estimate]`, `[devices.calibrate]`... tables as click defaults.

`edgeopt build` resolves its own config (edgeopt.config.resolve_build, which also says where
each value came from); every other command takes its table through click's `default_map`,
so a value in the file acts as the option's default and a flag still wins. Keys are the
option's long name (`min-secs` or `min_secs`); arguments (MODEL) are not defaults. Values
are checked with the option's own type when the file is read, so a bad one names the key
and the file before anything runs.
"""

from __future__ import annotations

import os

import click

from edgeopt.config import ConfigFile
from edgeopt.errors import ConfigError

# Options whose values are files or folders, whatever the command: relative to the file.
PATH_OPTIONS = frozenset({"model", "output", "calib", "eval", "eval_data", "inputs", "record",
                          "records", "report", "benchmark_binary", "teacher", "labels"})
# Options that take a name or a path: a path when the value looks like one.
NAME_OR_PATH_OPTIONS = frozenset({"device", "recipe", "delegate"})
PATH_SUFFIXES = (".toml", ".so", ".dylib", ".dll")
SKIPPED = frozenset({"help", "version", "config_file", "debug"})


def default_map(group: click.Group, cfile: ConfigFile | None) -> dict:
    """click's default_map for every command except build, from the file's tables."""
    if cfile is None:
        return {}
    defaults = {}
    for name, table in cfile.commands.items():
        command = group.commands.get(name)
        if command is None or name == "build":
            known = ", ".join(sorted(group.commands))
            raise ConfigError(f"config file {cfile.path}: unknown table [{name}]; tables are "
                              f"command names: {known}")
        defaults[name] = _table_defaults(command, table, cfile, name)
    return defaults


def _table_defaults(command: click.Command, table: dict, cfile: ConfigFile, where: str) -> dict:
    options = _options(command)
    defaults = {}
    for raw_key, value in table.items():
        key = raw_key.replace("-", "_")
        sub = getattr(command, "commands", {}).get(raw_key)
        if isinstance(value, dict) and sub is not None:
            defaults[raw_key] = _table_defaults(sub, value, cfile, f"{where}.{raw_key}")
            continue
        if key not in options:
            known = ", ".join(sorted(options)) or "none"
            raise ConfigError(f"config file {cfile.path}: unknown key '{raw_key}' in [{where}]; "
                              f"known: {known}")
        param = options[key]
        defaults[param.name] = _checked(command, param, value, cfile, f"[{where}] {raw_key}")
    return defaults


def _options(command: click.Command) -> dict[str, click.Option]:
    """Options by their long names and parameter names, dashes as underscores."""
    found = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.name in SKIPPED:
            continue
        for spelling in [param.name, *(o.lstrip("-") for o in param.opts if o.startswith("--"))]:
            found[spelling.replace("-", "_")] = param
    return found


def _checked(command: click.Command, param: click.Option, value, cfile: ConfigFile,
             where: str):
    """The value as the option would parse it, paths made relative to the file."""
    if isinstance(value, dict):
        raise ConfigError(f"config file {cfile.path}: {where} must be a value, not a table")
    if param.multiple and not isinstance(value, list):
        value = [value]
    if param.is_flag and not isinstance(value, bool) and param.flag_value in (True, False):
        raise ConfigError(f"config file {cfile.path}: {where} must be true or false")
    value = _rebased(param.name, value, cfile.path.parent)
    try:
        return param.type_cast_value(click.Context(command), value)
    except click.BadParameter as exc:
        raise ConfigError(f"config file {cfile.path}: {where}: {exc.format_message()}") from exc


def _rebased(name: str, value, folder):
    if isinstance(value, list):
        return [_rebased(name, v, folder) for v in value]
    if not isinstance(value, str) or not value or os.path.isabs(value):
        return value
    if name in PATH_OPTIONS and value not in ("random", "all"):
        return os.path.normpath(os.path.join(folder, value))
    if name in NAME_OR_PATH_OPTIONS and ("/" in value or value.endswith(PATH_SUFFIXES)):
        return os.path.normpath(os.path.join(folder, value))
    return value
