"""Host processes of the remote runners (adb and ssh clients): each in a process group of
its own, remembered until reaped, killed as a group when it overruns its timeout.

    >>> proc = spawn_tracked(["adb", "-s", serial, "shell", script])
    >>> result = run_tracked(["adb", "push", local, remote], timeout=30)
    >>> stop_all()      # Ctrl-C: end every client still running, and nothing else
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading

_running: set[subprocess.Popen] = set()
_running_lock = threading.Lock()


def spawn_tracked(argv: list[str], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                  text: bool = True) -> subprocess.Popen:
    """Start a client (stderr piped; text mode unless binary data flows)."""
    extra = {"text": True, "errors": "replace"} if text else {}
    proc = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                            start_new_session=True, **extra)
    with _running_lock:
        _running.add(proc)
    return proc


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a client and anything it started in its process group, and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    with _running_lock:
        _running.discard(proc)


def run_tracked(argv: list[str], timeout: float, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, text: bool = True) -> subprocess.CompletedProcess:
    """Run to completion; on timeout kill the group and raise subprocess.TimeoutExpired."""
    proc = spawn_tracked(argv, stdin, stdout, text)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill_group(proc)
    if not text and isinstance(err, bytes):
        err = err.decode(errors="replace")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def stop_all() -> None:
    """Kill every client this process still runs (Ctrl-C, or an error elsewhere)."""
    with _running_lock:
        procs = list(_running)
    for proc in procs:
        kill_group(proc)


def first_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() or "fail" in ln.lower()]
    return (errors or lines or ["no output"])[0]
