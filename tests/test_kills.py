"""Real `edgeopt build` processes killed with SIGKILL, and real builds racing for one
output folder: the folder always holds one whole bundle, old or new, never a mixture.

Whole means: the manifest validates against the schema and the model file matches the
size and sha256 the manifest records, and the file set is a bundle's. Kills land at
seeded random times and, to hit the short write phase for sure, the moment the staging
folder appears. `benchmarks/kills.py` does the same 50+ times and reports the figures.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest

from conftest import SAMPLES
from edgeopt.bundle import STAGING_MARK, remove_stale_staging, verify_bundle

SEED = 20251130


def _build_argv(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "edgeopt.cli", "build", str(SAMPLES / "digits_cnn.keras"),
            "--calib", str(SAMPLES / "digits_calib.npz"), "-o", str(out), *extra]


def _env(tmp_path: Path) -> dict[str, str]:
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(temp), "TF_CPP_MIN_LOG_LEVEL": "3"}


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def assert_whole(out: Path, files: set[str]) -> dict[str, bytes]:
    """The bundle at `out` is complete and consistent; returns its contents."""
    import jsonschema

    contents = _contents(out)
    assert set(contents) == files, sorted(set(contents) ^ files)
    manifest = json.loads(contents["manifest.json"])
    schema = json.loads(resources.files("edgeopt").joinpath("manifest.schema.json").read_text())
    jsonschema.validate(manifest, schema)
    model = contents[manifest["model"]["file"]]
    assert hashlib.sha256(model).hexdigest() == manifest["model"]["sha256"]
    assert len(model) == manifest["model"]["size_bytes"]
    assert verify_bundle(out) == []
    return contents


def _staging(parent: Path, name: str) -> list[Path]:
    return [p for p in parent.iterdir() if p.name.startswith(f".{name}{STAGING_MARK}")]


def kill_build(argv: list[str], env: dict, out: Path, at: float | None, extra: float) -> str:
    """Start a build and SIGKILL it `at` seconds in, or (at None) `extra` seconds after its
    staging folder appears. Returns 'killed', or 'finished' when it ended first."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    if at is not None:
        time.sleep(at)
    else:
        while proc.poll() is None and not _staging(out.parent, out.name):
            time.sleep(0.002)
        time.sleep(extra)
    finished = proc.poll() is not None
    proc.send_signal(signal.SIGKILL)
    code = proc.wait()
    if finished:
        assert code == 0, f"the build failed by itself (exit {code})"
    return "finished" if finished else "killed"


def _build_in_process(out: Path) -> None:
    from edgeopt.config import BuildConfig
    from edgeopt.pipeline import build

    build(BuildConfig(model=str(SAMPLES / "digits_cnn.keras"),
                      calib=str(SAMPLES / "digits_calib.npz"), output=str(out)))


@pytest.mark.slow  # 34 s; test_bundle kills a real build in the default suite
def test_sigkill_at_random_points_never_breaks_the_bundle(tmp_path, sample_bundles):
    out, env = tmp_path / "site" / "dist", _env(tmp_path)
    out.parent.mkdir()
    shutil.copytree(sample_bundles("plain"), out)  # what _build_in_process(out) writes
    files = set(_contents(out))
    current = assert_whole(out, files)
    rng = random.Random(SEED)
    plan = [None, rng.uniform(1.0, 5.0), rng.uniform(1.0, 5.0)]  # None: in the write phase
    outcomes = []
    for at in plan:
        outcomes.append(kill_build(_build_argv(out), env, out, at, rng.uniform(0, 0.02)))
        now = assert_whole(out, files)
        assert now == current or now["manifest.json"] != current["manifest.json"]
        current = now
    assert "killed" in outcomes
    _build_in_process(out)  # the next build removes what the killed ones left
    assert_whole(out, files)
    assert sorted(p.name for p in out.parent.iterdir()) == ["dist"]


def test_two_real_builds_racing_for_one_folder(tmp_path):
    out, env = tmp_path / "dist", _env(tmp_path)
    procs = [subprocess.Popen(_build_argv(out, "--scheme", scheme), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for scheme in ("w8a8", "float")]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    contents = _contents(out)
    manifest = json.loads(contents["manifest.json"])
    assert manifest["recipe"]["scheme"] in ("w8a8", "float")
    assert_whole(out, set(contents))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dist", "tmp"]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_backup_of_a_killed_swap_is_put_back(tmp_path):
    """Where renameat2 cannot exchange, a build moves the old bundle aside first; killed
    right then, the next build puts it back instead of deleting it."""
    backup = tmp_path / f".dist{STAGING_MARK}{_dead_pid()}-abc-old"
    backup.mkdir()
    (backup / "manifest.json").write_text("{}")
    remove_stale_staging(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dist"]
    assert (tmp_path / "dist" / "manifest.json").read_text() == "{}"
    again = tmp_path / f".dist{STAGING_MARK}{_dead_pid()}-def-old"
    again.mkdir()
    remove_stale_staging(tmp_path)  # the destination exists now: the backup is stale
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dist"]


def test_verify_bundle_names_what_is_wrong(tmp_path):
    (tmp_path / "m.tflite").write_bytes(b"abc")
    manifest = {"model": {"file": "m.tflite", "sha256": hashlib.sha256(b"abc").hexdigest(),
                          "size_bytes": 3}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert verify_bundle(tmp_path) == []
    (tmp_path / "m.tflite").write_bytes(b"abd")
    assert verify_bundle(tmp_path) == ["model m.tflite does not match its sha256 in the "
                                       "manifest"]
    (tmp_path / "m.tflite").unlink()
    assert verify_bundle(tmp_path) == ["model m.tflite is missing"]
    (tmp_path / "manifest.json").write_text('{"model": ')
    assert "cannot be read" in verify_bundle(tmp_path)[0]


def test_a_killed_single_file_write_is_cleaned_by_the_next(tmp_path):
    """`edgeopt convert -o FILE` writes via a temporary sibling named with its pid."""
    from edgeopt.atomic import TEMP_MARK, write_file_atomic

    target = tmp_path / "model.tflite"
    stale = tmp_path / f".model.tflite{TEMP_MARK}{_dead_pid()}-x1.tmp"
    live = tmp_path / f".model.tflite{TEMP_MARK}{os.getpid()}-x2.tmp"
    stale.write_bytes(b"half")
    live.write_bytes(b"busy")
    write_file_atomic(target, b"whole")
    assert target.read_bytes() == b"whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "model.tflite"]
