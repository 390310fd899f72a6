"""The real `adb` client, run as a subprocess with argument lists and hard timeouts.

    >>> phone = AdbClient(serial="R5CT30XXXX")
    >>> phone.shell("getprop ro.product.model", timeout=10).stdout
    'Pixel 8\\n'

Nothing here builds a host shell command: every call is an argv list. The device side is
a shell, and `adb shell` joins its arguments with spaces without quoting them (like ssh),
so callers pass one script in which every value went through `shlex.quote`
(see device_scripts.py). Clients run in process groups of their own (processes.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from edgeopt.devices.runners.processes import first_error_line, run_tracked, spawn_tracked
from edgeopt.errors import DeviceError


class AdbError(DeviceError):
    """adb failed: no such device, device offline, connection lost, a push that failed."""


class AdbTimeout(AdbError):
    """An adb call did not finish in time; its client was killed."""


def adb_binary(explicit: str | None = None) -> str:
    """The adb client to run: `explicit`, $ADB, or `adb` on PATH."""
    name = explicit or os.environ.get("ADB") or "adb"
    found = shutil.which(name)
    if not found:
        raise AdbError(f"the adb client '{name}' was not found; install Android platform-tools "
                       "(Debian/Ubuntu: apt-get install adb) or set $ADB")
    return found


@dataclass(frozen=True)
class AdbClient:
    """One device (serial None: the only one) through one adb server (port None: default)."""

    serial: str | None = None
    binary: str = "adb"
    server_port: int | None = None

    def argv(self, *args: str) -> list[str]:
        head = [self.binary]
        if self.server_port:
            head += ["-P", str(self.server_port)]
        if self.serial:
            head += ["-s", self.serial]
        return head + list(args)

    def spawn(self, *args: str) -> subprocess.Popen:
        """Start a client whose output is read as it comes (text, stderr separate)."""
        return spawn_tracked(self.argv(*args))

    def run(self, *args: str, timeout: float, check: bool = True) -> subprocess.CompletedProcess:
        """Run to completion within `timeout` seconds; a failure raises AdbError."""
        try:
            result = run_tracked(self.argv(*args), timeout)
        except subprocess.TimeoutExpired:
            raise AdbTimeout(f"{self.who()}: `adb {args[0]}` did not answer within "
                             f"{timeout:g} s") from None
        if check and result.returncode != 0:
            raise AdbError(f"{self.who()}: `adb {args[0]}` failed: "
                           f"{first_error_line(result.stderr + result.stdout)}")
        return result

    def who(self) -> str:
        return f"device {self.serial}" if self.serial else "the adb device"

    def shell(self, script: str, timeout: float, check: bool = True):
        """Run one device shell script (already quoted) and wait for it."""
        return self.run("shell", script, timeout=timeout, check=check)

    # Local paths go to adb absolute: a file named `-z...` would otherwise be an option.
    def push(self, local: Path, remote: str, timeout: float) -> None:
        self.run("push", os.path.abspath(local), remote, timeout=timeout)

    def pull(self, remote: str, local: Path, timeout: float) -> None:
        self.run("pull", remote, os.path.abspath(local), timeout=timeout)

    def push_many(self, files: list[Path], remote_dir: str, timeout: float) -> None:
        """Several files into an existing device folder, in one client run."""
        self.run("push", *map(os.path.abspath, files), remote_dir.rstrip("/") + "/",
                 timeout=timeout)

    def pull_many(self, remotes: list[str], local_dir: Path, timeout: float) -> None:
        """Several device files into an existing local folder, in one client run."""
        self.run("pull", *remotes, os.path.abspath(local_dir), timeout=timeout)

    @staticmethod
    def stream_broke(returncode: int, stderr_lines: list[str]) -> bool:
        """adb reports the device's exit status, except when the stream itself broke."""
        return any(line.startswith("error:") for line in stderr_lines)

    def state(self, timeout: float = 5.0) -> str:
        """`device`, `offline`, `unauthorized`... or `missing` when adb does not list it."""
        try:
            result = self.run("get-state", timeout=timeout, check=False)
        except AdbTimeout:
            return "unresponsive"
        return result.stdout.strip() or "missing"


def list_devices(client: AdbClient, timeout: float = 15.0) -> list[tuple[str, str, dict]]:
    """(serial, state, {product, model, device, ...}) of every device the server knows."""
    result = AdbClient(binary=client.binary, server_port=client.server_port).run(
        "devices", "-l", timeout=timeout)
    rows = []
    for line in result.stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 2:
            props = dict(p.split(":", 1) for p in parts[2:] if ":" in p)
            rows.append((parts[0], parts[1], props))
    return rows


def resolve_serials(selector: str, client: AdbClient) -> list[str]:
    """`--adb SERIAL`, `--adb` alone (''): the only device, `--adb all`: every device."""
    if selector not in ("", "all"):
        return [selector]
    rows = list_devices(client)
    ready = [serial for serial, state, _ in rows if state == "device"]
    others = ", ".join(f"{s} ({state})" for s, state, _ in rows if state != "device")
    if not ready:
        detail = f"; not ready: {others}" if others else ""
        raise AdbError(f"no adb device is connected{detail} (adb devices lists none in state "
                       "'device'; for a device over TCP: adb connect HOST:PORT)")
    if selector == "" and len(ready) > 1:
        raise AdbError(f"{len(ready)} adb devices are connected ({', '.join(ready)}): choose "
                       "one with --adb SERIAL, or all with --adb all")
    return ready
