"""Settings that load code or reach hosts (bench's delegate, ssh, ssh options, adb,
benchmark binaries and their flags) come only from the command line or an explicit
--config FILE, never from an edgeopt.toml that happens to sit in the current folder
(issue 14, item 3): such a file could come with a cloned repository or a downloaded model."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_user_error

CONSTRUCTOR = r"""
#include <stdio.h>
__attribute__((constructor)) static void ran(void) {
    FILE *f = fopen(MARKER, "w");
    if (f) { fputs("constructor ran\n", f); fclose(f); }
}
"""


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _library_with_a_constructor(folder: Path, marker: Path) -> Path:
    """A real shared library whose load writes `marker` (as an attacker's would run code)."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler to build the test library")
    source = folder / "delegate.c"
    source.write_text(CONSTRUCTOR)
    library = folder / "libdelegate.so"
    subprocess.run(["cc", "-shared", "-fPIC", f'-DMARKER="{marker}"', str(source), "-o",
                    str(library)], check=True, timeout=120)
    return library


def test_a_delegate_in_the_working_folders_config_is_never_loaded(run_cli, folder,
                                                                   tiny_float_tflite):
    marker = folder / "constructor-ran"
    library = _library_with_a_constructor(folder, marker)
    probe = subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(library)!r})"],
                           timeout=60)
    assert probe.returncode == 0 and marker.exists()  # loading it does run its code
    marker.unlink()
    (folder / "edgeopt.toml").write_text('[bench]\ndelegate = "libdelegate.so"\nruns = 1\n')
    result = run_cli("bench", tiny_float_tflite, "--min-secs", "0", "--json")
    assert_user_error(result, "[bench] delegate loads code or reaches a host")
    assert "--config" in result.stderr
    assert not marker.exists()


def test_ssh_options_in_the_working_folders_config_never_reach_ssh(run_cli, folder,
                                                                   tiny_float_tflite):
    marker = folder / "proxy-ran"
    (folder / "edgeopt.toml").write_text(
        f'[bench]\nssh = ["board.invalid"]\nssh-option = ["ProxyCommand=touch {marker}"]\n')
    result = run_cli("bench", tiny_float_tflite)
    assert_user_error(result, "[bench] ssh")
    assert not marker.exists()


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh client")
def test_an_explicit_config_may_set_ssh_options(run_cli, folder, tiny_float_tflite):
    """The same file passed with --config is the user's own choice: ssh gets the option
    (the ProxyCommand here only touches a file, then the connection fails)."""
    marker = folder / "proxy-ran"
    config = folder / "boards.toml"
    config.write_text(f'[bench]\nssh = ["board.invalid"]\ntimeout = 30\n'
                      f'ssh-option = ["ProxyCommand=touch {marker}", "BatchMode=yes"]\n')
    result = run_cli("--config", config, "bench", tiny_float_tflite)
    assert result.exit_code == 2 and "loads code" not in result.stderr
    assert marker.exists()


@pytest.mark.parametrize("table", [
    '[bench]\nadb = "all"\n', '[bench]\nbenchmark-binary = "./bm"\n',
    '[bench]\nbenchmark-arg = ["--external_delegate_path=/tmp/x.so"]\n',
    '[bench]\ndelegate-option = ["library=/tmp/x.so"]\n',
])
def test_every_code_or_host_setting_is_refused_from_an_implicit_file(run_cli, folder, table):
    (folder / "edgeopt.toml").write_text(table)
    assert_user_error(run_cli("devices"), "loads code or reaches a host")


def test_an_implicit_file_keeps_every_other_setting(run_cli, folder):
    (folder / "edgeopt.toml").write_text('[bench]\nruns = 3\ndevice = "pixel-cpu"\n'
                                         '[build]\nmodel = "m.onnx"\ndevice = "coral-usb"\n')
    result = run_cli("build", "--dry-run", "--json")
    assert result.exit_code == 0, result.stderr


def test_a_profile_cannot_point_at_a_delegate_library(run_cli, folder):
    """A profile named by the working folder's edgeopt.toml would otherwise load it."""
    from importlib.resources import files

    shipped = (files("edgeopt.devices.profiles") / "pixel-cpu.toml").read_text()
    (folder / "board.toml").write_text(shipped.replace('delegate = "xnnpack"',
                                                       'delegate = "./libdelegate.so"'))
    (folder / "edgeopt.toml").write_text('[estimate]\ndevice = "board.toml"\n')
    assert_user_error(run_cli("estimate", "m.tflite"), "field 'delegate' must name a delegate")


def test_build_config_replaces_the_working_folders_file(run_cli, folder):
    """One file, never both: ./edgeopt.toml is not read when build names its --config."""
    (folder / "edgeopt.toml").write_text('[bench]\ndelegate = "libdelegate.so"\n')
    mine = folder / "mine.toml"
    mine.write_text('[build]\nmodel = "m.onnx"\nseed = 5\n')
    result = run_cli("build", "--config", mine, "--dry-run", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["sources"]["seed"] == str(mine)
