"""Atomic bundles: all or nothing, even under SIGKILL and concurrent builders."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import SAMPLES
from edgeopt.bundle import STAGING_MARK, remove_stale_staging, write_bundle
from edgeopt.errors import OutputError


def _files(tag: str) -> dict[str, bytes]:
    return {"model.tflite": tag.encode() * 1000,
            "manifest.json": json.dumps({"schema_version": 1, "tag": tag}).encode()}


def test_write_and_replace(tmp_path):
    out = tmp_path / "dist"
    write_bundle(out, _files("one"))
    write_bundle(out, _files("two"))
    assert json.loads((out / "manifest.json").read_text())["tag"] == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dist"]


def test_refuses_files_and_foreign_folders(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="not a folder"):
        write_bundle(tmp_path / "file", _files("a"))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("x")
    with pytest.raises(OutputError, match="not empty"):
        write_bundle(tmp_path / "mine", _files("a"))
    with pytest.raises(OutputError, match="does not exist"):
        write_bundle(tmp_path / "no" / "such" / "dir", _files("a"))


def test_stale_staging_of_dead_builds_is_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".dist{STAGING_MARK}{dead.pid}-abc"
    live = tmp_path / f".dist{STAGING_MARK}{os.getpid()}-def"
    stale.mkdir()
    live.mkdir()
    remove_stale_staging(tmp_path)
    assert not stale.exists() and live.exists()


_WRITER = """
import sys
from edgeopt.bundle import write_bundle
tag = sys.argv[2]
for i in range(int(sys.argv[3])):
    manifest = '{"schema_version": 1, "tag": "%s"}' % tag
    write_bundle(sys.argv[1], {"model.tflite": (tag * 200000).encode(),
                               "manifest.json": manifest.encode()})
"""


def _assert_whole(out):
    manifest = json.loads((out / "manifest.json").read_text())
    assert (out / "model.tflite").read_bytes() == (manifest["tag"] * 200000).encode()


def test_concurrent_writers_leave_one_whole_bundle(tmp_path):
    out = tmp_path / "dist"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(out), tag, "15"])
             for tag in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    _assert_whole(out)
    assert not [p for p in tmp_path.iterdir() if p.name != "dist"]


def test_sigkill_during_writes_never_leaves_a_mixture(tmp_path):
    out = tmp_path / "dist"
    write_bundle(out, {"model.tflite": ("z" * 200000).encode(),
                       "manifest.json": b'{"schema_version": 1, "tag": "z"}'})
    rng = random.Random(3)
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(out), "k", "1000"])
        time.sleep(rng.uniform(0.3, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        _assert_whole(out)
    write_bundle(out, _files("after"))  # the next build cleans the killed ones' staging
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dist"]


def _contents(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_sigkill_during_a_real_build_keeps_the_old_bundle(tmp_path, sample_bundles):
    out = tmp_path / "dist"
    args = [sys.executable, "-m", "edgeopt.cli", "build", str(SAMPLES / "digits_cnn.keras"),
            "--calib", str(SAMPLES / "digits_calib.npz"), "-o", str(out)]
    shutil.copytree(sample_bundles("plain"), out)  # the bundle that build (args) writes
    before = _contents(out)
    for delay in (2.0, 4.0, 6.0):
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        now = _contents(out)
        if now != before:  # the kill came after the swap: the new bundle must be whole
            manifest = json.loads(now["manifest.json"])
            assert set(now) == set(before) and manifest["model"]["file"] in now
            before = now
