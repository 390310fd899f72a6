"""Our footprint on a device: a private work folder, the processes we started there, and
scripts run with a timeout that kills them on both ends.

    >>> space = Workspace(AdbClient("R5CT30XXXX"), "/data/local/tmp/edgeopt-1a2b3c4d")
    >>> run = run_script(space, benchmark_script(...), 600, "benchmark_model")
    >>> run.text, run.start, run.end
    >>> cleanup(space)       # kill what may still run (by pid), remove the folder

A script announces its shell's pid with an `@pid` line first; a pid is remembered for
cleanup only while its process may still be running on the device (the client timed out,
or the stream broke), so a recycled pid is never killed.
"""

from __future__ import annotations

import posixpath
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from edgeopt.devices.runners import device_scripts as scripts
from edgeopt.devices.runners.benchmark_output import BenchmarkModelOutput, parse_benchmark_output
from edgeopt.devices.runners.processes import kill_group
from edgeopt.errors import DeviceError

CLEANUP_TIMEOUT_S = 5.0
PID_GRACE_S = 3.0  # how long a timed-out script may take to announce its pid


class BenchmarkRunError(DeviceError):
    """The run failed, hung or lost its device; `partial` keeps what it printed so far."""

    def __init__(self, message: str, partial: BenchmarkModelOutput | None = None):
        super().__init__(message)
        self.partial = partial


class DeviceClient(Protocol):
    """How the remote flow (workspace, remote, power, android) reaches one device: adb
    (`adb.AdbClient`) and ssh (`ssh.SshClient`) implement it. Scripts are already quoted;
    a failure raises the client's DeviceError subclass, naming the device (`who`)."""

    @property
    def serial(self) -> str | None:
        """The device's id for records (adb serial, ssh target); None: the only device."""
        ...

    def who(self) -> str:
        """The device for messages ("device R5CT30XXXX", "ssh host pi@board")."""
        ...

    def shell(self, script: str, timeout: float,
              check: bool = True) -> subprocess.CompletedProcess:
        """Run a shell script on the device and wait at most `timeout` s; with `check`, a
        non-zero status raises."""
        ...

    def spawn(self, kind: str, script: str, /) -> subprocess.Popen:
        """Start `kind` ("shell") with `script`, output read as it comes (text, stderr apart)."""
        ...

    def push(self, local: Path, remote: str, timeout: float) -> None:
        """Copy a local file to a device path."""
        ...

    def pull(self, remote: str, local: Path, timeout: float) -> None:
        """Copy a device file to a local path."""
        ...

    def push_many(self, files: list[Path], remote_dir: str, timeout: float) -> None:
        """Copy several local files into an existing device folder."""
        ...

    def pull_many(self, remotes: list[str], local_dir: Path, timeout: float) -> None:
        """Copy several device files into an existing local folder."""
        ...

    def state(self, timeout: float = 5.0) -> str:
        """"device" when reachable, else what is wrong ("offline", "unresponsive", ...)."""
        ...

    def stream_broke(self, returncode: int, stderr_lines: list[str]) -> bool:
        """Whether a spawned client lost the device (rather than the script failing)."""
        ...


@dataclass
class Workspace:
    """Our folder on the device and the device processes we started that may still run."""

    client: DeviceClient
    root: str
    live_pids: list[int] = field(default_factory=list)
    supply: str | None = None
    charging: bool = False

    def path(self, *names: str) -> str:
        return posixpath.join(self.root, *names)


@dataclass(frozen=True)
class ScriptRun:
    """A device script's output lines, each with the host time it arrived."""

    lines: tuple[tuple[float, str], ...]
    start: float            # when the script announced its pid
    end: float              # when its client returned

    @property
    def text(self) -> str:
        return "".join(line for _, line in self.lines)


# A broken device can print without end; what we keep of a run's output is bounded.
MAX_LINE_CHARS = 64 * 1024
MAX_KEPT_CHARS = 8 * 1024 * 1024


Lines = deque[tuple[float, str]]   # (host time it arrived, line)


def _collect(stream, sink: Lines, pids: list[tuple[float, int]]) -> None:
    """Timestamp each line as it arrives; beyond MAX_KEPT_CHARS the oldest lines go (the
    timings come last), and an endless line is cut into MAX_LINE_CHARS pieces."""
    kept = 0
    while line := stream.readline(MAX_LINE_CHARS):
        now = time.monotonic()
        if line.startswith("@pid ") and line.split()[1:2] and line.split()[1].isdigit():
            pids.append((now, int(line.split()[1])))
            continue
        sink.append((now, line))
        kept += len(line)
        while kept > MAX_KEPT_CHARS and len(sink) > 1:
            kept -= len(sink.popleft()[1])


def _await_pid(proc: subprocess.Popen, pids: list[tuple[float, int]]) -> None:
    """On a loaded host or device the script may not have announced its pid by the
    timeout; without it the cleanup cannot kill the run, so give it a short grace."""
    deadline = time.monotonic() + PID_GRACE_S
    while not pids and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)


def run_script(space: Workspace, script: str, timeout: float, what: str) -> ScriptRun:
    """Run a device script that announces `@pid`; on timeout kill it on both ends (the
    device side at cleanup)."""
    proc = space.client.spawn("shell", script)
    out: Lines = deque()
    err: Lines = deque()
    pids: list[tuple[float, int]] = []
    readers = [threading.Thread(target=_collect, args=(s, sink, pids), daemon=True)
               for s, sink in ((proc.stdout, out), (proc.stderr, err))]
    for reader in readers:
        reader.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _await_pid(proc, pids)
        kill_group(proc)
        for reader in readers:  # the `@pid` line may still sit unread in the pipe
            reader.join(timeout=5)
        space.live_pids.extend(pid for _, pid in pids)
        raise BenchmarkRunError(
            f"{space.client.who()}: {what} did not finish within {timeout:g} s; stopped it",
            parse_benchmark_output("".join(x for _, x in out), require_timings=False)) from None
    ended = time.monotonic()
    for reader in readers:
        reader.join(timeout=5)
    kill_group(proc)
    if space.client.stream_broke(proc.returncode, [line for _, line in err]):
        space.live_pids.extend(pid for _, pid in pids)  # it may still run on the device
    return ScriptRun(tuple(sorted(out + err)), pids[0][0] if pids else ended, ended)


def cleanup(space: Workspace) -> str | None:
    """Kill what still runs, remove the folder; a note (not an error) when that fails."""
    try:
        space.client.shell(scripts.cleanup_script(space.root, space.live_pids),
                           timeout=CLEANUP_TIMEOUT_S)
        return None
    except DeviceError as exc:  # adb or ssh: the device may be gone
        return f"could not clean up {space.root} on the device: {exc}"
