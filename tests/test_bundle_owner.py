"""A folder is replaced only when it is provably an edgeopt bundle (issue 14 item 1).

Before the `.edgeopt-bundle` marker any folder holding a `manifest.json` was taken for a
bundle and deleted whole, with whatever else it held.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from conftest import SAMPLES, assert_user_error
from edgeopt.bundle import STAGING_MARK, _exchange, _swap_in, write_bundle
from edgeopt.bundle_owner import MARKER, marker_bytes, ownership_problem
from edgeopt.errors import OutputError


def _files(tag: str) -> dict[str, bytes]:
    return {"model.tflite": tag.encode() * 1000, "snippets/run.py": b"print(1)\n",
            "manifest.json": json.dumps({"schema_version": 1, "tag": tag}).encode()}


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def _webapp(folder: Path) -> dict[str, bytes]:
    (folder / "notes").mkdir(parents=True)
    (folder / "manifest.json").write_text('{"name": "My web app", "start_url": "/"}')
    (folder / "thesis.docx").write_bytes(b"PK\x03\x04 four years of work")
    (folder / "notes" / "todo.txt").write_text("submit thesis\n")
    return _tree(folder)


def test_build_into_a_web_app_folder_keeps_every_file(tmp_path, run_cli):
    webapp = tmp_path / "webapp"
    before = _webapp(webapp)
    result = run_cli("build", SAMPLES / "digits_cnn.onnx", "--calib",
                     SAMPLES / "digits_calib.npz", "-o", f"{webapp}/")
    assert_user_error(result, "thesis.docx")
    assert "notes/todo.txt" in result.stderr and "delete it by hand" in result.stderr
    assert _tree(webapp) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["webapp"]


def test_a_bundle_edgeopt_wrote_is_replaced(tmp_path):
    out = tmp_path / "dist"
    write_bundle(out, _files("one"))
    assert json.loads((out / MARKER).read_text())["files"]["model.tflite"]
    write_bundle(out, _files("two"))
    assert _tree(out) == {**_files("two"), MARKER: marker_bytes(_files("two"))}


def test_a_user_file_added_to_a_bundle_is_not_deleted(tmp_path):
    out = tmp_path / "dist"
    write_bundle(out, _files("one"))
    (out / "snippets" / "my_app.py").write_text("my own code")
    before = _tree(out)
    with pytest.raises(OutputError, match="did not write: snippets/my_app.py"):
        write_bundle(out, _files("two"))
    assert _tree(out) == before


def test_a_changed_bundle_file_is_not_overwritten(tmp_path):
    out = tmp_path / "dist"
    write_bundle(out, _files("one"))
    (out / "snippets" / "run.py").write_text("edited by hand")
    with pytest.raises(OutputError, match="changed since edgeopt wrote them: snippets/run.py"):
        write_bundle(out, _files("two"))
    assert (out / "snippets" / "run.py").read_text() == "edited by hand"


@pytest.mark.parametrize("tamper", ["marker", "manifest", "empty-folder", "link", "fifo"])
def test_anything_the_marker_does_not_vouch_for_is_refused(tmp_path, tamper):
    out = tmp_path / "dist"
    write_bundle(out, _files("one"))
    if tamper == "marker":
        (out / MARKER).write_text("{}")
    elif tamper == "manifest":
        (out / "manifest.json").write_text('{"schema_version": 1, "tag": "forged"}')
    elif tamper == "empty-folder":
        (out / "photos").mkdir()
    elif tamper == "link":
        (tmp_path / "home").mkdir()
        (tmp_path / "home" / "keep.txt").write_text("mine")
        (out / "model.tflite").unlink()
        (out / "model.tflite").symlink_to(tmp_path / "home" / "keep.txt")
    else:
        os.mkfifo(out / "pipe")
    before = _tree(out)
    with pytest.raises(OutputError, match="nothing was written"):
        write_bundle(out, _files("two"))
    assert _tree(out) == before
    assert tamper != "link" or (tmp_path / "home" / "keep.txt").read_text() == "mine"


def test_an_old_bundle_without_marker_is_refused_with_advice(tmp_path):
    out = tmp_path / "dist"
    out.mkdir()
    for name, content in _files("old").items():
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_bytes(content)
    with pytest.raises(OutputError, match="delete it by hand") as caught:
        write_bundle(out, _files("new"))
    assert "manifest.json, model.tflite" in str(caught.value)
    assert _tree(out) == _files("old")


def test_a_symlinked_output_folder_is_refused(tmp_path, run_cli):
    real = tmp_path / "real"
    write_bundle(real, _files("one"))
    before = _tree(real)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(OutputError, match="symbolic link"):
        write_bundle(tmp_path / "link", _files("two"))
    result = run_cli("build", SAMPLES / "digits_cnn.onnx", "--calib",
                     SAMPLES / "digits_calib.npz", "-o", tmp_path / "link")
    assert_user_error(result, "symbolic link")
    assert _tree(real) == before and (tmp_path / "link").is_symlink()


def _staged(parent: Path, files: dict[str, bytes]) -> Path:
    staging = Path(tempfile.mkdtemp(prefix=f".dist{STAGING_MARK}{os.getpid()}-", dir=parent))
    for name, content in {**files, MARKER: marker_bytes(files)}.items():
        (staging / name).parent.mkdir(exist_ok=True)
        (staging / name).write_bytes(content)
    return staging


def test_a_folder_that_changes_between_check_and_swap_is_put_back(tmp_path):
    """The state a race leaves: check_destination saw a clean bundle, then a user file
    arrived before renameat2 exchanged the folders; the old tree must come back whole."""
    out = tmp_path / "dist"
    write_bundle(out, _files("one"))
    assert ownership_problem(out) is None  # what the check saw
    (out / "thesis.docx").write_bytes(b"arrived after the check")
    before = _tree(out)
    staging = _staged(tmp_path, _files("two"))
    assert _exchange(staging, out)
    with pytest.raises(OutputError, match="changed while the bundle was written.*put back"):
        _swap_in(staging, out)
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dist"]


def test_a_clean_swap_deletes_only_the_old_bundle(tmp_path):
    out = tmp_path / "dist"
    write_bundle(out, _files("one"))
    staging = _staged(tmp_path, _files("two"))
    assert _exchange(staging, out)
    _swap_in(staging, out)
    assert _tree(out)["model.tflite"] == _files("two")["model.tflite"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dist"]


def test_a_user_file_racing_the_bundle_writer_is_never_lost(tmp_path):
    """A real race: a thread drops a file into the output folder at a random moment of
    each write (before the check, between check and swap, during the clean-up). Wherever
    the file landed, it is still there afterwards: in the folder, or kept beside it."""
    import random
    import shutil
    import threading
    import time

    out = tmp_path / "dist"
    write_bundle(out, _files("start") | {"weights.bin": bytes(2 * 1024 ** 2)})
    rng = random.Random(5)
    outcomes = []
    for i in range(120):
        delay = rng.uniform(0, 0.05)
        def drop(delay=delay, text=str(i)):
            time.sleep(delay)
            (out / "user.txt").write_text(text)
        racer = threading.Thread(target=drop)
        racer.start()
        try:
            write_bundle(out, _files(str(i)) | {"weights.bin": bytes([i]) * 2 * 1024 ** 2})
        except OutputError as exc:
            assert "user.txt" in str(exc)
            outcomes.append("changed while" in str(exc) or "kept at" in str(exc))
        else:
            outcomes.append("written")  # the file went into the new bundle
        racer.join()
        found = list(tmp_path.rglob("user.txt"))
        assert [p.read_text() for p in found] == [str(i)], (i, found)
        found[0].unlink()
        for kept in tmp_path.glob("*.edgeopt-kept-*"):
            shutil.rmtree(kept)
    # Measured on this machine: about 2 of 120 writes met the file after the check (the
    # post-swap verification put the folder back); the rest were refused at the check or
    # wrote before the file arrived. The test holds whichever happens.
    assert len(outcomes) == 120
