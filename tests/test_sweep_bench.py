"""`edgeopt sweep --bench host` and `--adb SERIAL`: every candidate's artifact measured with
the bench runners (LiteRT, onnxruntime on this machine; the loopback phone of
tests/adb_device.py through the real adb client), the front on the measured latencies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import test_adb_bench

from conftest import assert_user_error
from edgeopt.sweep_report import front_bases, front_of, pareto_fronts

adb_server, phone = test_adb_bench.adb_server, test_adb_bench.phone  # the loopback phone

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
needs_adb = pytest.mark.skipif(shutil.which("adb") is None, reason="the adb client is not "
                               "installed (Debian package `adb`; .ci/run installs it)")


def _sweep(run_cli, *args) -> dict:
    result = run_cli("sweep", *map(str, args), "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _points(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "points").glob("*.json"))}


def _dominated(p: dict, others: list[dict]) -> bool:
    """Worse or equal on measured latency and quality than another point, worse on one."""
    lp, qp = p["measured"]["latency_ms"], p["figures"]["quality"]
    return any(q["measured"]["latency_ms"] <= lp and q["figures"]["quality"] >= qp and
               (q["measured"]["latency_ms"] < lp or q["figures"]["quality"] > qp)
               for q in others if q is not p)


@pytest.mark.slow
def test_bench_host_measures_onnx_and_tflite_onto_one_measured_front(run_cli, tmp_path):
    space = tmp_path / "sweep.toml"
    space.write_text(f'models = ["{SAMPLES / "digits_cnn.onnx"}"]\ndevices = ["host-cpu"]\n'
                     'formats = ["onnx", "tflite"]\nschemes = ["float"]\n'
                     f'[build]\ncalib = "{SAMPLES / "digits_calib.npz"}"\n'
                     f'eval = "{SAMPLES / "digits_eval.npz"}"\n')
    out = tmp_path / "out"
    record = _sweep(run_cli, space, "-o", out, "--bench", "host")
    points = record["points"]
    assert record["built"] == 2 and record["benched"] == 2
    assert sorted(p["figures"]["format"] for p in points) == ["onnx", "tflite"]
    for p in points:
        bench = p["bench"]["host"]
        assert bench["error"] is None and bench["runs"] >= 50 and bench["latency_ms"] > 0
        assert bench["record"]["model"]["format"] == p["figures"]["format"]
        low, high = p["measured"]["spread_ms"]
        assert low <= p["measured"]["latency_ms"] <= high
        assert p["figures"]["latency_ms"] > 0  # the estimate stays beside the measurement
    assert record["front_latency"] == {"host-cpu": "measured"}
    front = [p for p in points if p["key"] in record["fronts"]["host-cpu"]]
    assert front and all(not _dominated(p, points) for p in front)
    assert all(_dominated(p, points) for p in points if p not in front)

    before = _points(out)
    again = _sweep(run_cli, space, "-o", out, "--bench", "host")
    assert (again["built"], again["benched"]) == (0, 0) and _points(out) == before
    text = run_cli("sweep", str(space), "-o", str(out)).stdout  # no --bench: kept measurements
    assert "latency (measured)" in text and "the front compares the measured latency" in text
    page = (out / "report.html").read_text()
    assert "measured latency (ms)" in page and "median of" in page


def _point(label: str, quality: float, estimate: float, measured: float | None) -> dict:
    point = {"key": label, "label": label, "status": "ok", "config": {"device": "d"},
             "figures": {"metric": "top1_accuracy", "quality": quality,
                         "latency_ms": estimate, "size_bytes": 10}}
    if measured is not None:
        point["measured"] = {"latency_ms": measured}
    return point


def test_a_front_compares_measured_latencies_only_when_every_point_has_one():
    # the estimate ranks a ahead of b, the measurement b ahead of a
    a, b = _point("a", 0.9, 1.0, 3.0), _point("b", 0.9, 2.0, 2.0)
    assert front_bases([a, b]) == {"d": "measured"}
    assert [p["label"] for p in pareto_fronts([a, b])["d"]] == ["b"]
    c = _point("c", 0.5, 0.5, None)  # not measured: the whole device goes by the estimate
    assert front_bases([a, b, c]) == {"d": "estimate"}
    assert [p["label"] for p in front_of([a, b, c])] == ["c", "a"]


def test_a_bad_bench_target_is_one_error(run_cli, tmp_path, tiny_keras_path, tiny_nhwc_data):
    space = tmp_path / "sweep.toml"
    space.write_text(f'models = ["{tiny_keras_path}"]\ndevices = ["host-cpu"]\n'
                     f'[build]\ncalib = "{tiny_nhwc_data}"\n')
    result = run_cli("sweep", str(space), "-o", str(tmp_path / "out"), "--adb", " ")
    assert_user_error(result, "--adb needs the phone's serial")
    assert not (tmp_path / "out").exists()


@needs_adb
def test_an_unconnected_phone_is_one_error_before_any_build(run_cli, adb_server, tmp_path,
                                                            tiny_keras_path, tiny_nhwc_data):
    space = tmp_path / "sweep.toml"
    space.write_text(f'models = ["{tiny_keras_path}"]\ndevices = ["pixel-cpu"]\n'
                     f'[build]\ncalib = "{tiny_nhwc_data}"\n')
    result = run_cli("sweep", str(space), "-o", str(tmp_path / "out"), "--adb",
                     "127.0.0.1:9")
    assert_user_error(result, "--adb 127.0.0.1:9: no such device is connected")
    assert not (tmp_path / "out").exists()


@needs_adb
@pytest.mark.slow
def test_adb_measures_the_phone_candidates_and_host_the_host_ones(
        run_cli, phone, tmp_path, tiny_keras_path, tiny_nhwc_data):
    space = tmp_path / "sweep.toml"
    space.write_text(f'models = ["{tiny_keras_path}"]\ndevices = ["host-cpu", "pixel-cpu"]\n'
                     f'schemes = ["w8a8"]\n[build]\ncalib = "{tiny_nhwc_data}"\n')
    out, target = tmp_path / "out", f"adb:{phone.serial}"
    mode = phone.sandbox.root / "data/local/tmp/.benchmark_mode"
    mode.write_text("fail")  # benchmark_model fails on the phone: the build stays
    record = _sweep(run_cli, space, "-o", out, "--bench", "host", "--adb", phone.serial)
    by_device = {p["config"]["device"]: p for p in record["points"]}
    assert record["benched"] == 2 and set(by_device) == {"host-cpu", "pixel-cpu"}
    failed = by_device["pixel-cpu"]
    assert failed["status"] == "ok" and failed["bench"][target]["error"]
    assert "measured" not in failed and list(by_device["host-cpu"]["bench"]) == ["host"]
    assert record["front_latency"] == {"host-cpu": "measured", "pixel-cpu": "estimate"}

    before = _points(out)
    again = _sweep(run_cli, space, "-o", out, "--bench", "host", "--adb", phone.serial)
    assert again["benched"] == 0 and _points(out) == before  # a failed bench waits for:
    mode.write_text("normal")
    retried = _sweep(run_cli, space, "-o", out, "--adb", phone.serial, "--retry-failed")
    assert (retried["built"], retried["benched"]) == (0, 1)
    on_phone = next(p for p in retried["points"] if p["config"]["device"] == "pixel-cpu")
    measured = on_phone["bench"][target]
    assert measured["error"] is None and measured["tool"] == "benchmark_model"
    assert measured["record"]["device"]["serial"] == phone.serial
    assert measured["statistic"] == "mean"  # benchmark_model reports no median
    assert on_phone["measured"]["latency_ms"] > 0 and measured["energy_mj"] is not None
    assert retried["front_latency"] == {"host-cpu": "measured", "pixel-cpu": "measured"}
    assert phone.alive_processes() == []
