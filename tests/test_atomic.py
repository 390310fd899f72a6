"""The one file writer (edgeopt/atomic.py) and the commands that use it: regular files only,
names that fit, mode 0644 minus the umask, nothing left behind, bad destinations refused
before any work."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import SAMPLES, assert_user_error
from edgeopt.atomic import (
    TEMP_MARK,
    append_text,
    check_output_path,
    write_file_atomic,
)
from edgeopt.errors import OutputError

ROOT = os.geteuid() == 0


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if TEMP_MARK in p.name)


def test_writes_a_new_file_and_replaces_an_old_one(tmp_path):
    target = tmp_path / "model.tflite"
    assert write_file_atomic(target, b"first") == target
    write_file_atomic(target, "second")
    assert target.read_bytes() == b"second"
    assert _temps(tmp_path) == []


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o002, 0o644), (0o077, 0o600)])
def test_mode_is_0644_minus_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        write_file_atomic(tmp_path / "m.tflite", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "m.tflite").stat().st_mode) == mode


def test_a_folder_is_refused(tmp_path):
    (tmp_path / "out.tflite").mkdir()
    with pytest.raises(OutputError, match="is a folder; give a file name"):
        check_output_path(tmp_path / "out.tflite")
    with pytest.raises(OutputError, match="is a folder"):
        write_file_atomic(tmp_path / "out.tflite", b"x")
    assert (tmp_path / "out.tflite").is_dir()


def test_a_fifo_is_refused_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "out.tflite"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="is a FIFO; edgeopt writes only regular files"):
        write_file_atomic(fifo, b"x")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert _temps(tmp_path) == []


def test_a_symlink_to_a_fifo_or_to_dev_null_is_refused(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to_fifo.tflite").symlink_to(tmp_path / "fifo")
    (tmp_path / "to_null.tflite").symlink_to("/dev/null")
    with pytest.raises(OutputError, match="is a FIFO .through the symlink"):
        write_file_atomic(tmp_path / "to_fifo.tflite", b"x")
    with pytest.raises(OutputError, match="/dev/null is a character device"):
        write_file_atomic(tmp_path / "to_null.tflite", b"x")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert (tmp_path / "to_null.tflite").is_symlink()
    assert _temps(tmp_path) == [] and _temps(Path("/dev")) == []


def test_dev_null_itself_is_refused():
    with pytest.raises(OutputError, match="character device"):
        check_output_path("/dev/null")


def test_a_symlink_to_a_regular_file_is_written_through(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "m.tflite").write_bytes(b"old")
    (tmp_path / "link.tflite").symlink_to(tmp_path / "real" / "m.tflite")
    write_file_atomic(tmp_path / "link.tflite", b"new")
    assert (tmp_path / "link.tflite").is_symlink()
    assert (tmp_path / "real" / "m.tflite").read_bytes() == b"new"


def test_a_dangling_symlink_is_refused(tmp_path):
    (tmp_path / "m.tflite").symlink_to(tmp_path / "nowhere" / "m.tflite")
    with pytest.raises(OutputError, match="does not exist"):
        check_output_path(tmp_path / "m.tflite")


def test_a_missing_folder_is_refused_unless_asked_to_make_it(tmp_path):
    with pytest.raises(OutputError, match="folder .*nope does not exist"):
        check_output_path(tmp_path / "nope" / "m.tflite")
    write_file_atomic(tmp_path / "a" / "b" / "m.toml", "x", make_parents=True)
    assert (tmp_path / "a" / "b" / "m.toml").read_text() == "x"


def test_a_240_character_name_is_written_with_a_short_temporary_name(tmp_path):
    target = tmp_path / ("m" * 233 + ".tflite")
    write_file_atomic(target, b"x")
    assert target.read_bytes() == b"x"


def test_names_and_paths_too_long_are_refused_up_front(tmp_path):
    with pytest.raises(OutputError, match="output name too long: .* has 300 bytes, at most 255"):
        check_output_path(tmp_path / ("m" * 293 + ".tflite"))
    deep = tmp_path.joinpath(*["d" * 200] * 21) / "m.tflite"
    with pytest.raises(OutputError, match="output path too long"):
        check_output_path(deep)
    with pytest.raises(OutputError, match="NUL"):
        check_output_path(str(tmp_path / "a\0b"))


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f"{TEMP_MARK}{dead}-0000aaaa"
    live = tmp_path / f"{TEMP_MARK}{os.getpid()}-0000bbbb"
    stale.write_bytes(b"half")
    live.write_bytes(b"busy")
    write_file_atomic(tmp_path / "m.tflite", b"x")
    assert _temps(tmp_path) == [live.name]


INTERRUPT = textwrap.dedent("""
    import os, signal, sys, threading, time
    from pathlib import Path
    from edgeopt.atomic import write_file_atomic
    target, when = Path(sys.argv[1]), sys.argv[2]
    # Ctrl-C's KeyboardInterrupt even when SIGINT came in ignored (a job started with `&`
    # by a shell without job control, as CI scripts run: Python then installs no handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    content = os.urandom(1 << 20) * 96
    if when.startswith("after:"):  # SIGINT the moment the writer leaves this os call
        name = when.split(":")[1]
        real = getattr(os, name)
        def interrupted(*args):
            result = real(*args)
            os.kill(os.getpid(), signal.SIGINT)
            return result
        setattr(os, name, interrupted)
    else:  # SIGINT from a timer, wherever the writer is by then
        threading.Timer(float(when), os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        write_file_atomic(target, content)
        print("done")
    except KeyboardInterrupt:
        print("interrupted")
    time.sleep(0.2)
""")


def test_an_interrupted_write_leaves_a_whole_file_and_no_temporary(tmp_path):
    """SIGINT at fixed points of the writer (after the data's fsync: before the rename;
    after the rename) and from timers (wherever the writer is by then: a write may finish
    first, so those only check the file)."""
    target = tmp_path / "m.tflite"
    outcomes, sizes = {}, {}
    for when in ("after:fsync", "after:replace", "0.0005", "0.005", "0.02", "0.05", "0.1"):
        target.write_bytes(b"old")
        proc = subprocess.run([sys.executable, "-c", INTERRUPT, str(target), when],
                              capture_output=True, text=True, timeout=120)
        outcome = outcomes[when] = proc.stdout.strip()
        sizes[when] = target.stat().st_size
        assert outcome in ("done", "interrupted"), proc.stderr
        # the old file or the whole new one (an interrupt after the rename), never a part
        assert target.stat().st_size in (3, 96 << 20)
        if outcome == "done":
            assert target.stat().st_size == 96 << 20
        assert _temps(tmp_path) == []
    # before the rename: the old file stays; after it: the new file, whole
    assert (outcomes["after:fsync"], sizes["after:fsync"]) == ("interrupted", 3)
    assert (outcomes["after:replace"], sizes["after:replace"]) == ("interrupted", 96 << 20)


def test_append_adds_lines_and_refuses_a_fifo(tmp_path):
    log = tmp_path / "sub" / "records.jsonl"
    append_text(log, "a\n", make_parents=True)
    append_text(log, "b\n")
    assert log.read_text() == "a\nb\n"
    assert stat.S_IMODE(log.stat().st_mode) == 0o644 & ~_umask()
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OutputError, match="FIFO"):
        append_text(tmp_path / "fifo", "a\n")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder this process cannot write into: a read-only tmpfs as root, else mode 0555."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if ROOT:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs",
                               str(folder)], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a read-only tmpfs: {proc.stderr.strip()}")
        yield folder
        subprocess.run(["umount", str(folder)], capture_output=True)
    else:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)


def test_a_read_only_folder_is_one_clear_error(read_only_folder):
    with pytest.raises(OutputError, match=r"cannot write in .*ro \((read-only file system|"
                                          r"permission denied)\)"):
        write_file_atomic(read_only_folder / "m.tflite", b"x")


# --- the commands: bad destinations are refused before any work -------------------------

def _calib_missing(tmp_path: Path) -> str:
    """Data that would fail the command only after the model is loaded: if the error is
    about the output, the output was checked first."""
    return str(tmp_path / "no_such_calib.npz")


def test_quantize_refuses_a_folder_before_any_work(run_cli, tmp_path):
    (tmp_path / "out.tflite").mkdir()
    result = run_cli("quantize", SAMPLES / "digits_cnn.onnx", "--calib", _calib_missing(tmp_path),
                     "-o", tmp_path / "out.tflite")
    assert_user_error(result, "is a folder")
    assert [p.name for p in tmp_path.iterdir()] == ["out.tflite"]


def test_quantize_refuses_a_bad_report_path_before_any_work(run_cli, tmp_path):
    os.mkfifo(tmp_path / "report.html")
    result = run_cli("quantize", SAMPLES / "digits_cnn.onnx", "--calib", _calib_missing(tmp_path),
                     "-o", tmp_path / "q.tflite", "--report", tmp_path / "report.html")
    assert_user_error(result, "is a FIFO")


@pytest.mark.parametrize("command", ["convert", "compress", "quantize"])
def test_a_symlink_to_dev_null_as_output_is_refused(run_cli, tmp_path, command):
    (tmp_path / "out.tflite").symlink_to("/dev/null")
    extra = {"convert": ["--calib", _calib_missing(tmp_path)],
             "compress": ["--prune", "0.5", "--data", _calib_missing(tmp_path)],
             "quantize": ["--calib", _calib_missing(tmp_path)]}[command]
    result = run_cli(command, SAMPLES / "digits_cnn.onnx", *extra, "-o", tmp_path / "out.tflite")
    assert_user_error(result, "/dev/null is a character device")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize("command", ["convert", "quantize", "build"])
def test_a_300_character_output_is_one_error(run_cli, tmp_path, command):
    name = "m" * 293 + (".tflite" if command != "build" else "")
    result = run_cli(command, SAMPLES / "digits_cnn.onnx", "--calib", _calib_missing(tmp_path),
                     "-o", tmp_path / name)
    assert_user_error(result, "output name too long")


def test_a_240_character_bundle_folder_is_refused_before_the_build(run_cli, tmp_path):
    """Its staging folder's name would not fit; the old code ran the build, then failed."""
    result = run_cli("build", SAMPLES / "digits_cnn.onnx", "--calib", _calib_missing(tmp_path),
                     "-o", tmp_path / ("d" * 240))
    assert_user_error(result, "output name too long")
    assert "at most 217 here" in result.stderr


def test_bench_refuses_a_fifo_as_record_before_running(bench, tmp_path, tiny_float_tflite):
    os.mkfifo(tmp_path / "records.jsonl")
    result = bench(tiny_float_tflite, "--record", tmp_path / "records.jsonl")
    assert_user_error(result, "is a FIFO")


def test_devices_calibrate_refuses_a_fifo_before_measuring(run_cli, tmp_path):
    os.mkfifo(tmp_path / "host.toml")
    result = run_cli("devices", "calibrate", "host-cpu", "-o", tmp_path / "host.toml")
    assert_user_error(result, "is a FIFO")


def test_devices_calibrate_refuses_a_bad_fit_report_path_before_measuring(run_cli, tmp_path):
    (tmp_path / "host.fit.json").mkdir()
    result = run_cli("devices", "calibrate", "host-cpu", "-o", tmp_path / "host.toml")
    assert_user_error(result, "host.fit.json is a folder")


def test_convert_writes_a_0644_file(run_cli, tmp_path):
    out = tmp_path / "m.tflite"
    result = run_cli("convert", SAMPLES / "digits_cnn.onnx", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o644 & ~_umask()
    assert _temps(tmp_path) == []


def test_a_model_name_too_long_for_the_bundle_file_is_refused_before_the_build(run_cli,
                                                                             tmp_path):
    """The bundle's model file is `<model stem>.tflite`: 250 + 7 bytes do not fit."""
    model = tmp_path / ("m" * 250 + ".onnx")
    shutil.copy(SAMPLES / "digits_cnn.onnx", model)
    result = run_cli("build", model, "--calib", _calib_missing(tmp_path), "-o", tmp_path / "out")
    assert_user_error(result, "output name too long")
    assert not (tmp_path / "out").exists()


def test_a_file_where_a_folder_should_be_is_refused(tmp_path):
    (tmp_path / "notes").write_text("mine")
    with pytest.raises(OutputError, match="notes is not a folder"):
        check_output_path(tmp_path / "notes" / "m.tflite")
    with pytest.raises(OutputError, match="notes is not a folder"):
        write_file_atomic(tmp_path / "notes" / "a" / "m.toml", "x", make_parents=True)
    assert (tmp_path / "notes").read_text() == "mine"
