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


# What a client prints is kept up to this much per stream: a broken device can print
# without end, and the host must not hold it all.
MAX_CAPTURE = 16 * 1024 * 1024


def _drain(stream, chunks: list, limit: int) -> None:
    """Read `stream` to its end, keeping the first `limit` bytes or characters."""
    kept = 0
    while chunk := stream.read(65536):
        if kept < limit:
            chunks.append(chunk[:limit - kept])
            kept += len(chunks[-1])


def run_tracked(argv: list[str], timeout: float, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, text: bool = True) -> subprocess.CompletedProcess:
    """Run to completion; on timeout kill the group and raise subprocess.TimeoutExpired.
    Piped output is kept up to MAX_CAPTURE per stream."""
    proc = spawn_tracked(argv, stdin, stdout, text)
    captured: dict[str, list] = {"out": [], "err": []}
    readers = [threading.Thread(target=_drain, args=(stream, captured[name], MAX_CAPTURE),
                                daemon=True)
               for name, stream in (("out", proc.stdout), ("err", proc.stderr)) if stream]
    for reader in readers:
        reader.start()
    try:
        proc.wait(timeout=timeout)
    finally:
        kill_group(proc)
        for reader in readers:
            reader.join(timeout=5)
        if not any(reader.is_alive() for reader in readers):
            for stream in (proc.stdout, proc.stderr):
                if stream:
                    stream.close()
    empty = "" if text else b""
    out = empty.join(captured["out"]) if proc.stdout else None
    err = empty.join(captured["err"])
    if not text:
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
