"""What the terminal shows: live steps and colour on a terminal (a real pseudo-terminal from
the pty module), plain `•` lines in a pipe, nothing but JSON with --json, NO_COLOR obeyed."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys

import pytest

from conftest import run_edgeopt

ESC = "\x1b["
COLOUR = ("\x1b[32m", "\x1b[36m", "\x1b[1m", "\x1b[0m")


def _terminal_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    return {**env, "TERM": "xterm-256color", "COLUMNS": "120", **extra}


def _read_all(fd: int) -> str:
    chunks = []
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:  # the other side closed (Linux reports EIO)
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _drive_on_pty(monkeypatch, env: dict, messages: list[str]) -> str:
    """StepProgress writing to a real terminal; returns what the terminal received."""
    from edgeopt.terminal import StepProgress

    for key in ("NO_COLOR", "TERM"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    master, slave = pty.openpty()
    stream = io.TextIOWrapper(os.fdopen(slave, "wb"), encoding="utf-8", line_buffering=True)
    try:
        with StepProgress(stream) as progress:
            for message in messages:
                progress(message)
        stream.flush()
        return _read_all(master)
    finally:
        stream.close()
        os.close(master)


STEPS = ["converting to float .tflite", "comparing 3 devices", "a (1/3)", "b (2/3)", "c (3/3)",
         "writing dist"]


def test_terminal_gets_live_steps_bars_and_colour(monkeypatch):
    shown = _drive_on_pty(monkeypatch, {"TERM": "xterm"}, STEPS)
    assert "\r\x1b[2K" in shown  # the running step is redrawn in place
    assert "\x1b[32m✓\x1b[0m converting to float .tflite" in shown
    assert "━" * 24 + " 3/3 c" in shown  # a counted step fills its bar
    assert "• " not in shown


def test_no_color_keeps_the_live_line_but_drops_colour(monkeypatch):
    shown = _drive_on_pty(monkeypatch, {"TERM": "xterm", "NO_COLOR": "1"}, STEPS)
    assert "\r\x1b[2K" in shown and "✓ writing dist" in shown
    assert not any(code in shown for code in COLOUR)


def test_a_pipe_gets_plain_lines():
    from edgeopt.terminal import StepProgress

    stream = io.StringIO()
    with StepProgress(stream) as progress:
        for message in STEPS:
            progress(message)
    assert stream.getvalue().splitlines() == [f"• {m}" for m in STEPS]


def test_quiet_prints_nothing():
    from edgeopt.terminal import StepProgress

    stream = io.StringIO()
    with StepProgress(stream, quiet=True) as progress:
        progress("converting")
    assert stream.getvalue() == ""


def test_a_failed_step_is_marked(monkeypatch):
    from edgeopt.terminal import StepProgress

    for key in ("NO_COLOR", "TERM"):
        monkeypatch.delenv(key, raising=False)
    master, slave = pty.openpty()
    stream = io.TextIOWrapper(os.fdopen(slave, "wb"), encoding="utf-8", line_buffering=True)
    with pytest.raises(ValueError), StepProgress(stream) as progress:
        progress("quantizing")
        raise ValueError("bad")
    shown = _read_all(master)
    stream.close()
    os.close(master)
    assert "✗\x1b[0m quantizing" in shown and "✓" not in shown


def test_colour_rules(monkeypatch):
    from edgeopt.terminal import colour_enabled, paint

    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        monkeypatch.setenv("TERM", "xterm")
        monkeypatch.delenv("NO_COLOR", raising=False)
        assert colour_enabled(tty)
        monkeypatch.setenv("NO_COLOR", "1")
        assert not colour_enabled(tty)
        monkeypatch.delenv("NO_COLOR")
        monkeypatch.setenv("TERM", "dumb")
        assert not colour_enabled(tty)
    os.close(master)
    assert not colour_enabled(io.StringIO())
    assert paint("x", "bold red", True) == "\x1b[1;31mx\x1b[0m" and paint("x", "red", False) == "x"


def _run_on_pty(args: list[str], env: dict, timeout: float = 300) -> tuple[int, str]:
    """`edgeopt ARGS` with stdin, stdout and stderr on a pseudo-terminal."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "edgeopt.cli", *args], stdin=slave,
                            stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    try:
        while True:
            if select.select([master], [], [], 1.0)[0]:
                try:
                    chunk = os.read(master, 1 << 16)
                except OSError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=timeout), b"".join(chunks).decode("utf-8", "replace")
    finally:
        os.close(master)


def test_build_on_a_terminal_draws_bars_and_a_coloured_summary(tiny_float_tflite, tmp_path):
    code, shown = _run_on_pty(["build", str(tiny_float_tflite), "--device", "pixel-npu",
                               "--calib", "random", "-o", str(tmp_path / "dist")],
                              _terminal_env())
    assert code == 0, shown
    assert "\r\x1b[2K" in shown and "━" in shown  # live step lines with a bar
    assert "✓" in shown and "converting to float .tflite" in shown
    assert "\x1b[1mbundle" in shown  # the summary table, labels in bold
    assert "• " not in shown


def test_build_in_a_pipe_prints_lines_and_no_escape_codes(tiny_float_tflite, tmp_path):
    result = run_edgeopt("build", tiny_float_tflite, "--calib", "random", "-o", tmp_path / "d",
                         env=_terminal_env())
    assert result.returncode == 0, result.stderr
    assert ESC not in result.stderr and ESC not in result.stdout
    assert "• converting to float .tflite" in result.stderr.splitlines()
    assert result.stdout.startswith("bundle ")


def test_build_json_is_quiet(tiny_float_tflite, tmp_path):
    result = run_edgeopt("build", tiny_float_tflite, "--calib", "random", "-o", tmp_path / "d",
                         "--json", env=_terminal_env())
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert json.loads(result.stdout)["bundle"] == str(tmp_path / "d")


def test_a_long_count_in_a_log_prints_a_line_per_tenth():
    """bench reports every timed run; a CI log gets ten lines for 1000 runs, not 1000."""
    from edgeopt.terminal import StepProgress

    stream = io.StringIO()
    with StepProgress(stream) as progress:
        progress("timing tiny.tflite")
        for done in range(1, 1001):
            progress(f"tiny.tflite ({done}/1000)")
    lines = stream.getvalue().splitlines()
    assert lines[0] == "• timing tiny.tflite" and lines[-1] == "• tiny.tflite (1000/1000)"
    assert len(lines) == 11
