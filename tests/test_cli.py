"""The CLI contract: help and examples, one-line errors, no TensorFlow for help/devices."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import assert_user_error

SHIPPED = {"host-cpu", "pixel-npu", "pixel-gpu", "pixel-cpu", "snapdragon-npu", "rpi5-cpu",
           "coral-usb", "coral-devboard", "ethos-u55-256", "ethos-u65-512",
           "snapdragon-8gen2-npu", "snapdragon-8elite-npu", "pixel3-cpu", "pixel3-gpu",
           "pixel4-cpu", "pixel4-gpu", "rpi4-cpu"}


def test_every_command_has_help_and_an_example(run_cli):
    from edgeopt.cli import cli

    for name, command in cli.commands.items():
        assert command.help, name
        result = run_cli(name, "--help")
        assert result.exit_code == 0
        assert "Example:" in result.stdout and f"edgeopt {name}" in result.stdout, name


def _imports_after(code: str) -> set[str]:
    script = f"import sys\nfrom edgeopt.cli import cli\n{code}\nprint(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    return set(out.stdout.split())


def test_help_and_devices_do_not_import_tensorflow():
    for code in ("cli.main(['--help'], standalone_mode=False)",
                 "cli.main(['devices'], standalone_mode=False)",
                 "cli.main(['devices', '--json'], standalone_mode=False)"):
        modules = _imports_after(code)
        assert "click" in modules  # the script really ran
        assert not {"tensorflow", "keras", "onnx2tf", "tf_keras"} & modules, code


def test_help_loads_no_command_module_and_no_numpy():
    modules = _imports_after("cli.main(['--help'], standalone_mode=False)")
    assert "click" in modules
    assert "numpy" not in modules
    assert not {m for m in modules if m.startswith("edgeopt.cli.")} - {
        "edgeopt.cli.app", "edgeopt.cli.shared", "edgeopt.cli.defaults"}


def test_the_help_lines_are_the_commands_own():
    from edgeopt.cli import cli
    from edgeopt.cli.app import COMMANDS

    for name, (_, line) in COMMANDS.items():
        assert cli.commands[name].get_short_help_str(1000) == line, name


def test_devices_json_lists_the_shipped_profiles(run_cli):
    result = run_cli("devices", "--json")
    assert result.exit_code == 0
    devices = json.loads(result.stdout)["devices"]
    assert {d["name"] for d in devices} == SHIPPED
    for device in devices:
        assert {"kind", "delegate", "precision", "runtime", "io_dtype", "source"} <= set(device)


def test_devices_table(run_cli):
    result = run_cli("devices")
    assert result.exit_code == 0
    assert all(name in result.stdout for name in SHIPPED)


def test_unknown_device_lists_known_ones(run_cli, tiny_onnx_path):
    result = run_cli("build", tiny_onnx_path, "--device", "pixel-9000", "--calib", "random")
    assert_user_error(result, "unknown device 'pixel-9000'")
    assert "pixel-npu" in result.stderr and "coral-usb" in result.stderr


def test_usage_errors_are_one_line(run_cli):
    assert_user_error(run_cli("build", "--no-such-flag"), "no such option")
    assert_user_error(run_cli("no-such-command"), "no such command")


def test_internal_errors_are_one_line_and_debug_shows_traceback(monkeypatch, run_cli):
    from edgeopt.cli import devices

    def broken():
        raise RuntimeError("boom")

    monkeypatch.setattr(devices, "all_profiles", broken)
    result = run_cli("devices")
    assert result.exit_code == 1 and result.stderr.startswith("edgeopt: error: internal error")
    assert "Traceback" not in result.stderr
    result = run_cli("--debug", "devices")
    assert "Traceback" in result.stderr


def test_dry_run_prints_the_resolved_config(run_cli, tiny_onnx_path):
    result = run_cli("build", tiny_onnx_path, "--device", "coral-usb", "--calib", "random",
                     "--dry-run", "--json")
    assert result.exit_code == 0
    config = json.loads(result.stdout)
    assert config["device"] == "coral-usb" and config["model"] == str(tiny_onnx_path)
    assert config["sources"]["device"] == "command line" and config["sources"]["seed"] == "default"
    assert config["devices"] == ["coral-usb"]


def test_group_config_option_is_documented(run_cli):
    result = run_cli("--help")
    assert "--config FILE" in result.stdout and "edgeopt.toml" in result.stdout


def test_shell_completion_scripts(run_cli):
    for shell, marker in (("bash", "complete -o nosort -F"), ("zsh", "compdef")):
        result = run_cli("completion", shell)
        assert result.exit_code == 0 and marker in result.stdout
        assert "_EDGEOPT_COMPLETE" in result.stdout
    assert_user_error(run_cli("completion", "fish-and-chips"), "invalid value")


def test_completion_lists_commands():
    import os
    import subprocess
    import sys

    env = {**os.environ, "_EDGEOPT_COMPLETE": "bash_complete", "COMP_WORDS": "edgeopt bu",
           "COMP_CWORD": "1"}
    out = subprocess.run([sys.executable, "-m", "edgeopt.cli"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert "build" in out.stdout


def _all_commands(group, path=()):
    for name, command in group.commands.items():
        yield (*path, name), command
        if hasattr(command, "commands"):
            yield from _all_commands(command, (*path, name))


def test_every_command_and_subcommand_has_help_an_example_and_json(run_cli):
    from edgeopt.cli import cli

    commands = dict(_all_commands(cli))
    assert ("devices", "calibrate") in commands and ("completion",) in commands
    for path, command in commands.items():
        name = " ".join(path)
        assert command.help and command.epilog, name
        assert "--json" in {o for p in command.params for o in getattr(p, "opts", [])}, name
        result = run_cli(*path, "--help")
        assert result.exit_code == 0, name
        assert "Example:" in result.stdout and f"edgeopt {name}" in result.stdout, name


def test_completion_json_is_one_object_with_the_script(run_cli):
    result = run_cli("completion", "zsh", "--json")
    assert result.exit_code == 0 and result.stderr == ""
    record = json.loads(result.stdout)
    assert record["shell"] == "zsh" and "compdef" in record["script"]
    assert record["script"].rstrip("\n") == run_cli("completion", "zsh").stdout.rstrip("\n")


def test_python_dash_m_edgeopt_is_the_cli():
    out = subprocess.run([sys.executable, "-m", "edgeopt", "devices", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert {d["name"] for d in json.loads(out.stdout)["devices"]} == SHIPPED
