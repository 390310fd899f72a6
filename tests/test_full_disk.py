"""A full disk, for the bundle and for temporary files: one clear error, exit 2, nothing
left behind, an existing bundle untouched.

The full disk is a small tmpfs mounted for the test (root may mount; elsewhere the tests
skip and say why). RLIMIT_FSIZE would give EFBIG and SIGXFSZ, not the ENOSPC a real
full disk gives, so it is not used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SAMPLES, assert_user_error
from edgeopt.atomic import write_file_atomic
from edgeopt.bundle import write_bundle
from edgeopt.errors import OutputError

# Session files some runtimes keep in TMPDIR on purpose (also in /tmp); not build leftovers.
LIBRARY_FILES = {".ses"}


def _mount_tmpfs(folder: Path, size_kib: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        pytest.skip("no `mount` command: cannot make a small full disk")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0755",
                           "tmpfs", str(folder)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here (needs root or CAP_SYS_ADMIN): "
                    f"{proc.stderr.strip()}")


@pytest.fixture
def small_disk(tmp_path):
    """small_disk(KiB) -> a folder on a fresh tmpfs of that size, unmounted afterwards."""
    mounted = []

    def make(size_kib: int, name: str = "disk") -> Path:
        folder = tmp_path / name
        _mount_tmpfs(folder, size_kib)
        mounted.append(folder)
        return folder

    yield make
    for folder in mounted:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def _fill(disk: Path, leave_kib: int) -> None:
    """Take all but `leave_kib` of the disk's free space."""
    free = shutil.disk_usage(disk).free - leave_kib * 1024
    if free > 0:
        (disk / "filler").write_bytes(b"\0" * free)


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep | LIBRARY_FILES)


@pytest.fixture(scope="module")
def good_bundle(sample_bundles) -> Path:
    return sample_bundles("plain")


def test_bundle_into_a_full_disk(small_disk):
    disk = small_disk(64)
    files = {"model.tflite": os.urandom(200_000), "manifest.json": b"{}"}
    with pytest.raises(OutputError, match=r"no space left on device writing .*model\.tflite "
                                          r"\(the bundle needs 195 KiB; the file system at "
                                          rf"{disk} has \d+ KiB free\)"):
        write_bundle(disk / "dist", files)
    assert _leftovers(disk, set()) == []


def test_rebuild_into_a_full_disk_keeps_the_old_bundle(small_disk, good_bundle, run_cli):
    disk = small_disk(1024)
    shutil.copytree(good_bundle, disk / "out")
    _fill(disk, leave_kib=32)
    before = _contents(disk / "out")
    result = run_cli("build", SAMPLES / "digits_cnn.keras", "--calib",
                     SAMPLES / "digits_calib.npz", "-o", disk / "out")
    assert_user_error(result, f"no space left on device writing {disk / 'out'}/")
    assert "nothing was changed" in result.stderr
    assert _contents(disk / "out") == before
    assert _leftovers(disk, {"out", "filler"}) == []


def test_a_single_file_into_a_full_disk(small_disk):
    disk = small_disk(64)
    (disk / "model.tflite").write_bytes(b"old")
    with pytest.raises(OutputError, match="no space left on device writing .* was not changed"):
        write_file_atomic(disk / "model.tflite", os.urandom(200_000))
    assert (disk / "model.tflite").read_bytes() == b"old"
    assert _leftovers(disk, {"model.tflite"}) == []


@pytest.mark.parametrize("model", ["digits_cnn.keras", "digits_cnn.onnx"])
def test_temporary_files_on_a_full_disk(small_disk, tmp_path, model):
    temp = small_disk(256, "tmp")
    _fill(temp, leave_kib=16)
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "edgeopt.cli", "build", str(SAMPLES / model), "--calib",
         str(SAMPLES / "digits_calib.npz"), "-o", str(out)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "TMPDIR": str(temp), "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert_user_error(result, "no space left on device")
    assert f"temporary files go to {temp}" in result.stderr and "TMPDIR" in result.stderr
    assert not out.exists()
    assert _leftovers(temp, {"filler"}) == []


def test_quantize_into_a_full_disk_names_that_disk_not_tmpdir(small_disk, run_cli):
    """Old code: `.q.tflite.partial` left behind and the message blamed TMPDIR."""
    disk = small_disk(256)
    (disk / "q.tflite").write_bytes(b"old")
    _fill(disk, leave_kib=8)
    result = run_cli("quantize", SAMPLES / "digits_cnn.keras", "--calib",
                     SAMPLES / "digits_calib.npz", "-o", disk / "q.tflite")
    assert_user_error(result, f"no space left on device writing {disk / 'q.tflite'}")
    assert f"the file system at {disk}" in result.stderr and "TMPDIR" not in result.stderr
    assert (disk / "q.tflite").read_bytes() == b"old"
    assert _leftovers(disk, {"q.tflite", "filler"}) == []


def test_quantize_into_a_read_only_folder_is_refused_up_front(small_disk, run_cli, tmp_path):
    """Old code: an internal error (exit 1) after the whole quantization."""
    disk = small_disk(64)
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    result = run_cli("quantize", SAMPLES / "digits_cnn.keras", "--calib",
                     tmp_path / "missing.npz", "-o", disk / "q.tflite")
    assert_user_error(result, f"cannot write in {disk} (read-only file system)")
