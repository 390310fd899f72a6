# ruff: noqa: F811 - the fixtures imported below are test arguments of the same names
"""`edgeopt bench --find-divergence --adb` against the loopback device (tests/adb_device.py)
through the real adb client: the exposed-outputs copy is pushed with the planted delegate,
benchmark_model runs it with `--use_xnnpack=false` and with `--external_delegate_path`,
every output file is pulled, and the planted op must be named.
"""

from __future__ import annotations

import json
import shutil

import pytest
from test_adb_bench import adb_server, phone  # noqa: F401 - the loopback device fixtures
from test_divergence import _op_index, add_tflite, planted_delegate  # noqa: F401

from conftest import assert_user_error
from edgeopt.tflite_reader import read_tflite

pytestmark = pytest.mark.skipif(
    shutil.which("adb") is None,
    reason="the adb client is not installed (Debian package `adb`; .ci/run installs it)")


def _device_files(device) -> list[str]:
    root = device.sandbox.root / "data/local/tmp"
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


def test_the_planted_add_is_found_on_the_phone(bench, phone, add_tflite,
                                               planted_delegate):
    result = bench(add_tflite, "--find-divergence", "--adb", phone.serial, "--delegate",
                   planted_delegate, "--delegate-option", "op=ADD", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    first = record["first_divergence"]
    assert first["op"] == "ADD" and first["index"] == _op_index(add_tflite, "ADD")
    assert first["input_rel_error"] < 1e-5
    assert record["device"] == {"transport": "adb", "serial": phone.serial, "name": None}
    assert "--use_xnnpack=false" in record["reference"]
    assert "--external_delegate_path=" in record["candidate"]
    assert record["ops_observed"] == record["ops"] == len(read_tflite(add_tflite).ops)
    graph = read_tflite(add_tflite)
    assert set(graph.ops[record["path"][-1]["index"]].outputs) & set(graph.outputs)
    assert _device_files(phone) == ["benchmark_model"]          # work folder removed
    assert phone.alive_processes() == []


def test_the_phones_default_delegate_agrees_on_a_float_model(bench, phone,
                                                              add_tflite):
    result = bench(add_tflite, "--find-divergence", "--adb", phone.serial, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["first_divergence"] is None and record["samples"] == 2
    assert all(op["observed"] for op in record["per_op"])


def test_all_devices_is_refused(bench, phone, add_tflite):
    assert_user_error(bench(add_tflite, "--find-divergence", "--adb", "all"), "one device")
