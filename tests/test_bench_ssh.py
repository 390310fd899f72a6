"""`edgeopt bench --ssh`: Linux boards over the system ssh client.

Two set-ups:
- a real sshd on loopback when one can run here (an `sshd` binary and its privilege
  separation user; Debian package openssh-server); otherwise that test is skipped;
- a stand-in `ssh` that runs the remote command with the local /bin/sh, for the transport
  code paths (quoting through `sh -c`, push and pull through `cat`, a lost connection).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import assert_user_error, wrapped_python

QUICK = ("--runs", "5", "--min-secs", "0", "--no-power")
PWNED = "a b;touch PWNED.tflite"


@pytest.fixture
def board_python(tmp_path) -> Path:
    """A folder whose python3 has numpy and LiteRT, like a board set up for edgeopt."""
    return wrapped_python(tmp_path / "board-bin").parent


@pytest.fixture
def stand_in_ssh(tmp_path, board_python, monkeypatch) -> Path:
    """`ssh [options] HOST COMMAND` -> `/bin/sh -c COMMAND` here (what sshd does on a board)."""
    ssh = tmp_path / "ssh"
    ssh.write_text(f"""#!/bin/sh
for last in "$@"; do :; done
if [ -e {tmp_path}/unplugged ]; then echo "Connection closed by remote host" >&2; exit 255; fi
PATH={board_python}:/usr/bin:/bin exec /bin/sh -c "$last"
""")
    ssh.chmod(0o755)
    monkeypatch.setenv("EDGEOPT_SSH", str(ssh))
    return ssh


def test_ssh_runs_the_python_runner_and_cleans_up(bench, stand_in_ssh, tiny_float_tflite,
                                                  tmp_path):
    odd = tmp_path / PWNED
    shutil.copy(tiny_float_tflite, odd)
    result = bench(odd, "--ssh", "pi@board.local", "--check-numerics", "--numerics-samples", 2,
                   *QUICK, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["device"]["transport"] == "ssh" and record["device"]["serial"] == "pi@board.local"
    assert record["tool"].startswith("edgeopt remote_bench.py")
    assert record["latency_ms"]["p99"] is not None and record["numerics"]["samples"] == 2
    workdir = re.search(r"/tmp/edgeopt-[0-9a-f]{8}", record["device_command"]).group(0)
    assert not Path(workdir).exists()                          # work folder removed
    assert not list(tmp_path.rglob("PWNED*")) and not list(Path("/tmp").glob("PWNED*"))


def test_ssh_host_that_cannot_be_reached(bench, stand_in_ssh, tiny_float_tflite, tmp_path):
    (tmp_path / "unplugged").touch()
    assert_user_error(bench(tiny_float_tflite, "--ssh", "board.local", *QUICK),
                      "Connection closed")


def _sshd() -> str | None:
    found = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists()
                                     else None)
    try:
        pwd.getpwnam("sshd")  # the privilege separation user root's sshd needs
    except KeyError:
        return None if os.geteuid() == 0 else found
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def loopback_sshd(tmp_path, board_python):
    sshd = _sshd()
    if sshd is None:
        pytest.skip("no usable sshd here (Debian package openssh-server, with its 'sshd' "
                    "privilege separation user when run as root)")
    keys = tmp_path / "keys"
    keys.mkdir()
    for name in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", keys / name],
                       check=True)
    shutil.copy(keys / "user.pub", keys / "authorized_keys")
    port = _free_port()
    (keys / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {keys}/host\nPidFile none\n"
        f"AuthorizedKeysFile {keys}/authorized_keys\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PermitRootLogin prohibit-password\nSetEnv PATH={board_python}:/usr/bin:/bin\n")
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", keys / "sshd_config"],
                            stderr=subprocess.PIPE)
    time.sleep(0.5)
    yield f"{pwd.getpwuid(os.geteuid()).pw_name}@127.0.0.1:{port}", keys / "user"
    proc.kill()
    proc.wait()


def test_ssh_through_a_real_sshd(bench, loopback_sshd, tiny_float_tflite):
    target, key = loopback_sshd
    result = bench(tiny_float_tflite, "--ssh", target, "--ssh-option", f"IdentityFile={key}",
                   "--ssh-option", "StrictHostKeyChecking=no", "--ssh-option",
                   "UserKnownHostsFile=/dev/null", *QUICK, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["device"]["transport"] == "ssh"
