"""`edgeopt bench --adb` through the real adb client and server, against a loopback device
(and, first, that device itself as the real client sees it).

The adb server runs on a private port for this session (ANDROID_ADB_SERVER_PORT) and is
killed at the end; each test gets a fresh device (tests/adb_device.py) that the server
reaches with `adb connect 127.0.0.1:PORT`. Nothing stands in for adb or subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from adb_device import IDLE_CURRENT_UA, RUN_CURRENT_UA, VOLTAGE_UV, LoopbackDevice

from conftest import assert_user_error

pytestmark = pytest.mark.skipif(
    shutil.which("adb") is None,
    reason="the adb client is not installed (Debian package `adb`; .ci/run installs it)")

QUICK = ("--no-power", "--runs", "5", "--min-secs", "0")
PWNED = "a b;touch PWNED.tflite"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_pids(port: int) -> list[int]:
    """The adb server listening on our private port (and no other adb)."""
    pids = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "adb" and "fork-server" in cmdline \
                and any(f"tcp:{port}" in arg for arg in cmdline):
            pids.append(proc.pid)
    return pids


@pytest.fixture(scope="session")
def adb_server(tmp_path_factory):
    """A private adb server for the session; its keys live in a temporary HOME."""
    port = _free_port()
    env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(port),
           "HOME": str(tmp_path_factory.mktemp("adb-home"))}
    subprocess.run(["adb", "start-server"], env=env, check=True, capture_output=True,
                   timeout=30)
    saved = os.environ.get("ANDROID_ADB_SERVER_PORT")
    os.environ["ANDROID_ADB_SERVER_PORT"] = str(port)
    yield env
    subprocess.run(["adb", "kill-server"], env=env, capture_output=True, timeout=30)
    for pid in _server_pids(port):  # kill-server failed: end that one process
        psutil.Process(pid).kill()
    if saved is None:
        os.environ.pop("ANDROID_ADB_SERVER_PORT", None)
    else:
        os.environ["ANDROID_ADB_SERVER_PORT"] = saved


def _adb(env, *args, timeout=15):
    return subprocess.run(["adb", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _connect(env, device: LoopbackDevice) -> LoopbackDevice:
    out = _adb(env, "connect", device.serial)
    assert "connected" in out.stdout, out
    _adb(env, "-s", device.serial, "wait-for-device", timeout=10)
    return device


@pytest.fixture
def phone(adb_server, tmp_path):
    device = _connect(adb_server, LoopbackDevice(tmp_path / "phone").start())
    yield device
    _adb(adb_server, "disconnect", device.serial)
    device.stop()




@pytest.fixture
def odd_model(tiny_float_tflite, tmp_path) -> Path:
    path = tmp_path / PWNED
    shutil.copy(tiny_float_tflite, path)
    return path


def _adb_children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.name() == "adb"]


def _device_files(device: LoopbackDevice) -> list[str]:
    root = device.sandbox.root / "data/local/tmp"
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


# --- the loopback device ----------------------------------------------------------------

@pytest.fixture
def device(adb_server, tmp_path):
    phone = _connect(adb_server, LoopbackDevice(tmp_path / "device").start())
    yield phone
    _adb(adb_server, "disconnect", phone.serial)
    phone.stop()


def test_banner_and_features(adb_server, device):
    listed = _adb(adb_server, "devices", "-l").stdout
    assert f"{device.serial}" in listed and "model:Loopback_Phone" in listed
    features = _adb(adb_server, "-s", device.serial, "features").stdout.split()
    assert {"shell_v2", "stat_v2", "fixed_push_mkdir"} <= set(features)


def test_shell_v2_keeps_stderr_and_exit_status(adb_server, device):
    out = _adb(adb_server, "-s", device.serial, "shell", "echo out; echo err >&2; exit 7")
    assert (out.returncode, out.stdout, out.stderr) == (7, "out\n", "err\n")


def test_shell_stdin_reaches_the_command(adb_server, device):
    out = subprocess.run(["adb", "-s", device.serial, "shell", "tr a-z A-Z"], input="hello\n",
                         env=adb_server, capture_output=True, text=True, timeout=15)
    assert out.stdout == "HELLO\n"


def test_device_paths_live_in_the_sandbox(adb_server, device):
    out = _adb(adb_server, "-s", device.serial, "shell",
               "cd /data/local/tmp && pwd && cat /sys/class/power_supply/battery/voltage_now")
    assert out.stdout.split() == ["/data/local/tmp", "3900000"]


def test_push_and_pull_many_chunks(adb_server, device, tmp_path):
    local = tmp_path / "blob with space.bin"
    local.write_bytes(os.urandom(700_000))  # > 10 sync DATA chunks, > 2 transport payloads
    remote = "/data/local/tmp/dir/blob with space.bin"
    assert _adb(adb_server, "-s", device.serial, "push", local, remote).returncode == 0
    assert (device.sandbox.root / remote.lstrip("/")).read_bytes() == local.read_bytes()
    back = tmp_path / "back.bin"
    assert _adb(adb_server, "-s", device.serial, "pull", remote, back).returncode == 0
    assert back.read_bytes() == local.read_bytes()


def test_sync_refuses_paths_outside_the_sandbox(adb_server, device, tmp_path):
    out = _adb(adb_server, "-s", device.serial, "pull", "/data/../../../etc/hostname",
               tmp_path / "x")
    assert out.returncode != 0


# --- edgeopt bench --adb ------------------------------------------------------------------

def test_bench_over_adb_runs_benchmark_model_and_cleans_up(bench, phone, odd_model):
    result = bench(odd_model, "--adb", phone.serial, "--runs", 12, "--threads", 2,
                   "--no-power", "--min-secs", 0, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["tool"] == "benchmark_model" and record["runs"] == 12
    assert record["device"]["transport"] == "adb" and record["device"]["serial"] == phone.serial
    assert record["device"]["product"]["model"] == "Loopback_Phone"
    assert record["latency_ms"]["mean"] > 0 and record["init_ms"] > 0
    assert record["latency_ms"]["p90"] is None  # benchmark_model does not report it
    assert "--num_threads=2" in record["device_command"]
    assert _device_files(phone) == ["benchmark_model"]          # work folder removed
    assert phone.alive_processes() == [] and _adb_children() == []


def test_model_name_never_reaches_the_device_shell_unquoted(bench, phone, odd_model):
    assert bench(odd_model, "--adb", phone.serial, *QUICK).exit_code == 0
    for command in phone.commands:
        if PWNED in command:
            assert "'--graph=/data/local/tmp/" in command and f"{PWNED}'" in command
    assert not list(phone.sandbox.root.rglob("PWNED*"))
    assert not list(Path.cwd().glob("PWNED*"))


def test_power_is_the_excess_over_idle(bench, phone, tiny_float_tflite):
    result = bench(tiny_float_tflite, "--adb", phone.serial, "--runs", 5, "--idle", 0.3,
                   "--power-secs", 0.6, "--min-secs", 0, "--json")
    record = json.loads(result.stdout)
    expected_mw = (RUN_CURRENT_UA - IDLE_CURRENT_UA) * VOLTAGE_UV / 1e9
    assert record["power_mw"] == pytest.approx(expected_mw, rel=0.05)
    assert record["energy_mj"] == pytest.approx(
        record["power_mw"] * record["latency_ms"]["mean"] / 1000, rel=0.02)
    assert record["power"]["idle_mw"] == pytest.approx(IDLE_CURRENT_UA * VOLTAGE_UV / 1e9)
    assert record["power"]["run_samples"] >= 5
    assert phone.alive_processes() == [] and _adb_children() == []


def test_no_battery_sensor_gives_null_power_with_a_note(bench, phone, tiny_float_tflite):
    phone.sandbox.remove_battery()
    result = bench(tiny_float_tflite, "--adb", phone.serial, "--runs", 5, "--min-secs", 0,
                   "--json")
    record = json.loads(result.stdout)
    assert record["power_mw"] is None and record["energy_mj"] is None
    assert "current_now" in record["power_note"]


def test_check_numerics_on_the_device_sees_the_gpu_precision(bench, phone, tiny_float_tflite):
    result = bench(tiny_float_tflite, "--adb", phone.serial, "--delegate", "gpu",
                   "--check-numerics", "--numerics-samples", 3, *QUICK, "--json")
    assert result.exit_code == 0, result.stderr
    numerics = json.loads(result.stdout)["numerics"]
    assert numerics["samples"] == 3 and "--use_gpu=true" in numerics["candidate"]
    assert "--use_xnnpack=false" in numerics["reference"]
    assert numerics["top1_agreement"] == 1.0
    assert 20 < numerics["sqnr_db"] < 120 and numerics["max_abs"] > 0  # fp16, not identical


def test_profile_picks_the_delegate_flags(bench, phone, tiny_float_tflite):
    result = bench(tiny_float_tflite, "--adb", phone.serial, "--device", "pixel-npu",
                   *QUICK, "--json")
    record = json.loads(result.stdout)
    assert "--use_nnapi=true" in record["device_command"]
    assert record["device"]["name"] == "pixel-npu"


def test_adb_alone_means_the_only_device_and_record_keeps_it(bench, phone, tiny_float_tflite,
                                                             tmp_path):
    from edgeopt.devices.runners.measurement import read_records

    records = tmp_path / "m.jsonl"
    result = bench(tiny_float_tflite, *QUICK, "--record", records, "--adb")
    assert result.exit_code == 0, result.stderr
    assert "benchmark_model" in result.stdout
    assert read_records(records)[0]["device"]["serial"] == phone.serial


def test_all_devices_in_parallel(bench, adb_server, phone, tmp_path, tiny_float_tflite):
    second = _connect(adb_server, LoopbackDevice(tmp_path / "second").start())
    try:
        result = bench(tiny_float_tflite, "--adb", "all", *QUICK, "--json")
        assert result.exit_code == 0, result.stderr
        serials = {r["device"]["serial"] for r in json.loads(result.stdout)["results"]}
        assert serials == {phone.serial, second.serial}
    finally:
        _adb(adb_server, "disconnect", second.serial)
        second.stop()


def test_a_hung_benchmark_times_out_and_is_killed(bench, phone, tiny_float_tflite):
    (phone.sandbox.root / "data/local/tmp/.benchmark_mode").write_text("hang")
    result = bench(tiny_float_tflite, "--adb", phone.serial, *QUICK, "--timeout", 2)
    assert_user_error(result, "did not finish within 2 s")
    assert result.seconds < 10
    assert phone.alive_processes() == [] and _adb_children() == []
    assert _device_files(phone) == ["benchmark_model"]


def test_a_hung_benchmark_that_announces_itself_late_is_still_killed(bench, phone,
                                                                     tiny_float_tflite):
    """On a loaded device the run's `@pid` line may come after the timeout (the stall
    seen in CI): the harness still learns the pid and kills the run."""
    (phone.sandbox.root / "data/local/tmp/.benchmark_mode").write_text("hang")

    def slow_start(command: str) -> None:
        if "@pid" in command and "--graph=" in command:
            time.sleep(2.5)  # the shell runs, but its output reaches the host late

    phone.on_command = slow_start
    result = bench(tiny_float_tflite, "--adb", phone.serial, *QUICK, "--timeout", 2)
    assert_user_error(result, "did not finish within 2 s")
    # the kill was sent; on a loaded machine the killed run may take a moment to be gone
    # (CI at load 4 once saw it still listed), but it must go
    deadline = time.monotonic() + 5
    while phone.alive_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert phone.alive_processes() == [] and _adb_children() == []


def test_a_device_that_disconnects_mid_run(bench, phone, odd_model, tiny_float_tflite):
    (phone.sandbox.root / "data/local/tmp/.benchmark_mode").write_text("disconnect")
    started = phone.sandbox.root / "data/local/tmp/.benchmark_started"

    def unplug():
        deadline = time.monotonic() + 20
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        phone.drop_connections()

    threading.Thread(target=unplug, daemon=True).start()
    result = bench(odd_model, tiny_float_tflite, "--adb", phone.serial, *QUICK,
                   "--timeout", 3, "--json")
    assert result.exit_code == 2 and result.seconds < 10
    data = json.loads(result.stdout)
    assert data["results"] == [] and "lost the connection" in data["errors"][0]
    assert len(data["errors"]) == 1  # the second model was not tried on a vanished device
    assert _adb_children() == []
    deadline = time.monotonic() + 10  # the device's own `timeout` ends the orphaned run
    while phone.alive_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert phone.alive_processes() == []


def test_results_already_measured_are_kept(bench, adb_server, phone, tmp_path,
                                           tiny_float_tflite):
    broken = _connect(adb_server, LoopbackDevice(tmp_path / "broken").start())
    (broken.sandbox.root / "data/local/tmp/.benchmark_mode").write_text("fail")
    records = tmp_path / "m.jsonl"
    try:
        result = bench(tiny_float_tflite, "--adb", "all", *QUICK, "--record", records,
                       "--json")
    finally:
        _adb(adb_server, "disconnect", broken.serial)
        broken.stop()
    data = json.loads(result.stdout)
    assert [r["device"]["serial"] for r in data["results"]] == [phone.serial]
    assert broken.serial in data["errors"][0] and "Failed to apply delegate" in data["errors"][0]
    assert_user_error(result, "1 of 2 measurements failed")
    assert len(records.read_text().splitlines()) == 1


def test_missing_benchmark_model_says_what_to_do(bench, phone, tiny_float_tflite):
    (phone.sandbox.root / "data/local/tmp/benchmark_model").unlink()
    assert_user_error(bench(tiny_float_tflite, "--adb", phone.serial, "--runner",
                            "benchmark_model", *QUICK), "give --benchmark-binary")


def _python_with_litert(device: LoopbackDevice) -> None:
    """Give the device a python3 that has numpy and LiteRT, as a Linux board would."""
    python3 = device.sandbox.root / "system/bin/python3"
    python3.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    python3.chmod(0o755)


def test_python_runner_when_there_is_no_benchmark_model(bench, phone, odd_model):
    (phone.sandbox.root / "data/local/tmp/benchmark_model").unlink()
    _python_with_litert(phone)
    result = bench(odd_model, "--adb", phone.serial, "--check-numerics", "--numerics-samples",
                   2, *QUICK, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["tool"].startswith("edgeopt remote_bench.py")
    assert record["latency_ms"]["p90"] is not None and record["latency_ms"]["p99"] is not None
    assert record["numerics"]["top1_agreement"] == 1.0
    assert not list(phone.sandbox.root.rglob("PWNED*")) and _device_files(phone) == []


def test_python_runner_without_litert_says_what_is_missing(bench, phone, tiny_float_tflite):
    python3 = phone.sandbox.root / "system/bin/python3"
    python3.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")  # no site-packages
    python3.chmod(0o755)
    result = bench(tiny_float_tflite, "--adb", phone.serial, "--runner", "python", *QUICK)
    assert_user_error(result, "needs numpy and one of ai_edge_litert")


def test_a_local_benchmark_binary_is_pushed(bench, phone, tiny_float_tflite, tmp_path):
    binary = phone.sandbox.root / "data/local/tmp/benchmark_model"
    local = tmp_path / "my_benchmark_model"
    shutil.move(binary, local)
    result = bench(tiny_float_tflite, "--adb", phone.serial, "--benchmark-binary", local,
                   *QUICK, "--json")
    assert result.exit_code == 0, result.stderr
    assert "/data/local/tmp/edgeopt-" in json.loads(result.stdout)["device_command"]
    assert _device_files(phone) == []


def test_unknown_serial_is_a_clear_error(bench, adb_server, tiny_float_tflite):
    assert_user_error(bench(tiny_float_tflite, "--adb", "127.0.0.1:1", *QUICK),
                      "127.0.0.1:1")


def test_onnx_is_refused_over_adb(bench, phone, tiny_onnx_path):
    assert_user_error(bench(tiny_onnx_path, "--adb", phone.serial, *QUICK),
                      "benchmark_model runs .tflite")


def test_a_local_delegate_library_is_pushed_with_its_options(bench, phone, tiny_float_tflite,
                                                             tmp_path):
    library = tmp_path / "libvendor_delegate.so"
    library.write_bytes(b"\x7fELF not really")
    result = bench(tiny_float_tflite, "--adb", phone.serial, "--delegate", library,
                   "--delegate-option", "backend_type=htp", *QUICK, "--json")
    assert result.exit_code == 0, result.stderr
    command = json.loads(result.stdout)["device_command"]
    assert "/libvendor_delegate.so" in command and "--external_delegate_path=/data/" in command
    assert "--external_delegate_options=backend_type:htp" in command


# --- a device that vanishes, stalls or talks garbage (tests/adb_device.py Faults) ----------

@pytest.fixture
def private_temp(tmp_path, monkeypatch) -> Path:
    """TMPDIR of the in-process bench: what it leaves there is ours to count."""
    import tempfile

    folder = tmp_path / "host-tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _gone_cleanly(temp: Path) -> None:
    """No adb client left running here, no local temporary file of ours."""
    assert _adb_children() == []
    assert sorted(p.name for p in temp.iterdir()) == []


def test_a_device_that_vanishes_mid_push(bench, phone, tiny_float_tflite, private_temp):
    phone.faults.vanish_after_push_bytes = 1  # after the first chunk of the model
    result = bench(tiny_float_tflite, "--adb", phone.serial, *QUICK, "--timeout", 5)
    assert_user_error(result, f"device {phone.serial}: `adb push` failed")
    assert result.seconds < 20 and phone.pushed_bytes > 0
    _gone_cleanly(private_temp)


def test_a_device_that_stalls_mid_push(bench, phone, tiny_float_tflite, private_temp):
    phone.faults.stall_after_push_bytes = 1
    result = bench(tiny_float_tflite, "--adb", phone.serial, *QUICK, "--timeout", 3)
    assert_user_error(result, "`adb push` did not answer within 3 s")
    assert result.seconds < 20
    _gone_cleanly(private_temp)


def test_a_device_that_stalls_when_a_shell_opens(bench, phone, tiny_float_tflite,
                                                 private_temp):
    phone.faults.stall_on_open = "shell"
    result = bench(tiny_float_tflite, "--adb", phone.serial, *QUICK, "--timeout", 3)
    assert_user_error(result, "`adb shell` did not answer within 3 s")
    assert result.seconds < 20 and phone.commands == []
    _gone_cleanly(private_temp)


@pytest.mark.parametrize("service", ["shell", "sync:"])
def test_a_device_that_answers_with_garbage(bench, phone, tiny_float_tflite, private_temp,
                                           service):
    phone.faults.garbage_on_open = service
    result = bench(tiny_float_tflite, "--adb", phone.serial, *QUICK, "--timeout", 5)
    assert_user_error(result, f"device {phone.serial}")
    assert phone.garbage_sent >= 1 and result.seconds < 30
    _gone_cleanly(private_temp)


@pytest.mark.parametrize("mode, why", [
    ("garbage", "its output is not text"),
    ("nonsense", "the timing lines it printed hold no usable figures"),
    ("flood", ""),  # 24 MB on one line: only the last 8 MiB of it are kept
])
def test_garbage_from_benchmark_model(bench, phone, odd_model, private_temp, mode, why):
    (phone.sandbox.root / "data/local/tmp/.benchmark_mode").write_text(mode)
    result = bench(odd_model, "--adb", phone.serial, *QUICK, "--timeout", 20)
    assert_user_error(result, "benchmark_model failed: it printed no timings"
                      + (f" ({why}" if why else ""))
    assert _device_files(phone) == ["benchmark_model"]  # the work folder was removed
    assert phone.alive_processes() == [] and _adb_children() == []


ODD_MODELS = ["a b;touch PWNED $(touch PWNED) `touch PWNED` 'q' \"d\".tflite",
              "new\nline.tflite", "-leading-dash.tflite"]


def test_hostile_model_names_over_adb(bench, phone, tiny_float_tflite, tmp_path, monkeypatch):
    import shlex

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # `-leading-dash.tflite` reaches edgeopt as a relative path
    for name in ODD_MODELS:
        shutil.copy(tiny_float_tflite, work / name)
    result = bench("--adb", phone.serial, *QUICK, "--json", "--", *ODD_MODELS)
    assert result.exit_code == 0, result.stderr
    records = json.loads(result.stdout)["results"]
    assert sorted(r["model"]["file"] for r in records) == sorted(ODD_MODELS)
    for command in phone.commands:
        for name in ODD_MODELS:
            if name.split(";")[0] in command:
                assert any(word.endswith("/" + name) for word in shlex.split(command))
    assert not list(phone.sandbox.root.rglob("PWNED*")) and not list(tmp_path.rglob("PWNED*"))
    assert _device_files(phone) == ["benchmark_model"]
