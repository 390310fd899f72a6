"""Temporary files of killed runs are swept by the next run."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from edgeopt.tempfiles import private_tempdir, sweep_dead


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_private_tempdir_holds_every_temp_file_and_goes_away(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with private_tempdir() as folder:
        assert folder.parent == tmp_path and folder.name.startswith(f"edgeopt-{os.getpid()}-")
        made = tempfile.mkdtemp()
        assert os.path.dirname(made) == str(folder)
    assert not folder.exists()
    assert tempfile.tempdir == str(tmp_path)


def test_folders_of_dead_processes_are_swept_and_live_ones_kept(tmp_path):
    dead = tmp_path / f"edgeopt-{_dead_pid()}-abc123"
    (dead / "sub").mkdir(parents=True)
    alive = tmp_path / f"edgeopt-{os.getppid()}-def456"
    alive.mkdir()
    foreign = tmp_path / "edgeopt-notapid-x"
    foreign.mkdir()
    assert sweep_dead(tmp_path) == 1
    assert not dead.exists() and alive.exists() and foreign.exists()


def test_a_killed_cli_run_leaves_a_folder_the_next_run_removes(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    code = ("import os, signal, tempfile\n"
            "from edgeopt.tempfiles import private_tempdir\n"
            "with private_tempdir():\n"
            "    open(tempfile.mktemp(), 'w').write('x')\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n")
    subprocess.run([sys.executable, "-c", code], env=env, check=False)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("edgeopt-")]
    subprocess.run([sys.executable, "-m", "edgeopt.cli", "devices"], env=env, check=True,
                   capture_output=True)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("edgeopt-")]
