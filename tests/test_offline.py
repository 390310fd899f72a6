"""Nothing touches the network at run time (issue 14 item 12).

The main commands run in a private network namespace whose resolver is a logging UDP
listener (tests/netns_probe.py); any DNS query one of them sends fails the test with the
names looked up. onnxruntime's telemetry client sent 8 A + 8 AAAA queries for
`mobile.events.data.microsoft.com` per `convert` of the sample before edgeopt set
ORT_DISABLE_TELEMETRY.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SAMPLES

PROBE = Path(__file__).with_name("netns_probe.py")


def _namespaces_unavailable() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip is not installed"
    done = subprocess.run(["unshare", "--net", "--mount", "true"], capture_output=True,
                          text=True)
    if done.returncode != 0:
        return f"cannot create network namespaces here: {done.stderr.strip()[:200]}"
    return None


def _commands(tmp: Path) -> list[list[str]]:
    onnx, calib = str(SAMPLES / "digits_cnn.onnx"), str(SAMPLES / "digits_calib.npz")
    return [["convert", onnx, "-o", str(tmp / "digits.tflite")],
            ["inspect", onnx],
            ["estimate", onnx, "--device", "pixel-npu"],
            ["build", onnx, "--calib", calib, "-o", str(tmp / "dist")]]


def test_main_commands_send_no_dns_query(tmp_path):
    reason = _namespaces_unavailable()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "report.json"
    args = ["\x1f".join(argv) for argv in _commands(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    subprocess.run(["unshare", "--net", "--mount", sys.executable, str(PROBE), str(out),
                    *args], check=True, timeout=3600, env=env)
    report = json.loads(out.read_text())
    assert report["probe"] and set(report["probe"]) == {"probe.invalid"}, \
        "the logging resolver did not see the probe query"
    for command in report["commands"]:
        assert command["code"] == 0, command
    looked_up = {command["argv"][0]: command["queries"] for command in report["commands"]}
    assert looked_up == {argv[0]: [] for argv in _commands(tmp_path)}
