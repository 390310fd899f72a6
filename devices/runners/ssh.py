"""Linux boards over the system ssh client: the same remote flow as adb (remote.py).

    >>> board = SshClient("pi@raspberrypi.local")
    >>> m = run_ssh(RemoteBenchmark(Path("model.tflite"), target="pi@raspberrypi.local",
    ...                             remote_root="/tmp"))

Every call is an argv list for `ssh`; the remote command is one `sh -c` word quoted with
shlex.quote, so the login shell of the board's user never parses a path. Files go through
`cat` on the remote end (`cat > PATH` to push, `cat PATH` to pull): no scp, whose remote
paths are shell-parsed by older servers. BatchMode: no password prompt can hang a run.
Host, user, port, keys: whatever `ssh HOST` uses (~/.ssh/config), or HOST as user@host:port.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgeopt.devices.runners.measurement import Measurement
from edgeopt.devices.runners.processes import first_error_line, run_tracked, spawn_tracked
from edgeopt.devices.runners.remote import RemoteBenchmark, run_remote
from edgeopt.errors import DeviceError

OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
           "-o", "ServerAliveCountMax=2")
LOST = 255  # ssh's own exit status: the connection (not the remote command) failed


class SshError(DeviceError):
    """ssh failed: host unreachable, authentication refused, connection lost."""


def _split_port(target: str) -> tuple[str, list[str]]:
    host, sep, port = target.rpartition(":")
    if sep and port.isdigit() and "]" not in port:
        return host, ["-p", port]
    return target, []


@dataclass(frozen=True)
class SshClient:
    target: str                      # host, user@host or user@host:port
    binary: str = "ssh"
    options: tuple[str, ...] = ()    # extra ssh options (-F config, -i key, ...)

    @property
    def serial(self) -> str:
        return self.target

    def who(self) -> str:
        return f"ssh host {self.target}"

    def __post_init__(self):
        # ssh reads a host that starts with '-' as an option (-oProxyCommand=... runs a
        # command here); `--` below stops that too, this says why plainly.
        if not self.target or self.target.startswith("-") or any(
                c.isspace() or ord(c) < 32 for c in self.target):
            raise SshError(f"--ssh {self.target!r} is not a host: give HOST, USER@HOST or "
                           "USER@HOST:PORT (ssh options go in --ssh-option or ~/.ssh/config)")

    def argv(self, script: str) -> list[str]:
        host, port = _split_port(self.target)
        return [self.binary, *OPTIONS, *port, *self.options, "--", host,
                "sh -c " + shlex.quote(script)]

    def spawn(self, kind: str, script: str) -> subprocess.Popen:
        """Start `sh -c SCRIPT` on the board (kind: "shell", as for adb); output is read as
        it comes."""
        if kind != "shell":
            raise ValueError(f"ssh runs shell scripts only, not {kind!r}")
        return spawn_tracked(self.argv(script))

    def _run(self, script: str, timeout: float, check: bool = True, **io):
        try:
            result = run_tracked(self.argv(script), timeout, **io)
        except subprocess.TimeoutExpired:
            raise SshError(f"{self.who()} did not answer within {timeout:g} s") from None
        if check and result.returncode != 0:
            raise SshError(f"{self.who()}: {first_error_line(result.stderr)}")
        return result

    def shell(self, script: str, timeout: float, check: bool = True):
        return self._run(script, timeout, check)

    def push(self, local: Path, remote: str, timeout: float) -> None:
        with open(local, "rb") as source:
            self._run(f"cat > {shlex.quote(remote)}", timeout, stdin=source, text=False)

    def pull(self, remote: str, local: Path, timeout: float) -> None:
        with open(local, "wb") as target:
            self._run(f"cat {shlex.quote(remote)}", timeout, stdout=target, text=False)

    def push_many(self, files: list[Path], remote_dir: str, timeout: float) -> None:
        for path in files:
            self.push(path, f"{remote_dir.rstrip('/')}/{Path(path).name}", timeout)

    def pull_many(self, remotes: list[str], local_dir: Path, timeout: float) -> None:
        for remote in remotes:
            self.pull(remote, Path(local_dir) / Path(remote).name, timeout)

    def state(self, timeout: float = 10.0) -> str:
        try:
            return "device" if self._run("true", timeout, check=False).returncode == 0 \
                else "unreachable"
        except SshError:
            return "unresponsive"

    @staticmethod
    def stream_broke(returncode: int, stderr_lines: list[str]) -> bool:
        return returncode == LOST


def ssh_binary(explicit: str | None = None) -> str:
    """The ssh client to run: `explicit`, $EDGEOPT_SSH, or `ssh` on PATH."""
    found = shutil.which(explicit or os.environ.get("EDGEOPT_SSH") or "ssh")
    if not found:
        raise SshError("the ssh client was not found; install OpenSSH (apt-get install "
                       "openssh-client)")
    return found


def _product(client: SshClient) -> dict:
    try:
        out = client.shell("uname -srm; cat /proc/device-tree/model 2>/dev/null", timeout=15)
    except SshError:
        return {}
    lines = [ln.strip("\x00 ") for ln in out.stdout.splitlines() if ln.strip("\x00 ")]
    return {"uname": lines[0] if lines else "", "model": lines[1] if len(lines) > 1 else ""}


def run_ssh(config: RemoteBenchmark, ssh: str | None = None, options: tuple[str, ...] = (),
            progress: Callable[[str], None] = lambda _m: None) -> Measurement:
    """Measure `config.model` on the board `config.target` (remote_root: e.g. /tmp)."""
    client = SshClient(config.target, ssh_binary(ssh), options)
    return run_remote(config, client, "ssh", _product(client), progress)
