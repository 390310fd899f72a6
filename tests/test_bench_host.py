"""`edgeopt bench` on this host: the real LiteRT interpreter and onnxruntime."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import assert_user_error
from edgeopt.devices.runners.measurement import read_records
from edgeopt.devices.runners.stats import summarize_ms

DESIGN_FIELDS = ("device", "runs", "latency_ms", "init_ms", "power_mw", "energy_mj")
LATENCY_FIELDS = ("mean", "median", "p90", "p99", "min", "max", "std")


FAST = ("--min-secs", "0")


@pytest.fixture
def bench(capsys):
    """`edgeopt bench ARGS` in-process, through the edgeopt group's error handling."""
    from edgeopt.cli import cli

    def run(*args):
        extra = () if "--min-secs" in args else FAST
        code = cli.main(["bench", *map(str, args), *extra], standalone_mode=False)
        out, err = capsys.readouterr()
        return type("Result", (), {"exit_code": code, "stdout": out, "stderr": err})

    return run


def test_tflite_json_has_the_design_fields(bench, tiny_float_tflite):
    result = bench(tiny_float_tflite, "--runs", 30, "--warmup", 2, "--threads", 1, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert all(k in record for k in DESIGN_FIELDS)
    assert set(record["latency_ms"]) == set(LATENCY_FIELDS)
    lat = record["latency_ms"]
    assert 0 < lat["min"] <= lat["median"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert record["runs"] == 30 and record["warmup"] == 2 and record["threads"] == 1
    assert record["device"]["name"] == "host-cpu" and record["device"]["transport"] == "host"
    assert record["init_ms"] > 0 and record["first_ms"] > 0
    assert record["power_mw"] is None and record["energy_mj"] is None
    assert "sensor" in record["power_note"]
    assert {"init", "overall", "peak"} <= set(record["memory_mb"])
    assert len(record["model"]["sha256"]) == 64
    assert "XNNPACK" in record["tool"]
    assert result.stderr == ""  # no progress and no runtime chatter with --json


def test_min_secs_makes_runs_a_minimum(bench, tiny_float_tflite):
    record = json.loads(bench(tiny_float_tflite, "--runs", 5, "--min-secs", 0.2,
                              "--json").stdout)
    assert record["runs"] > 5  # a tiny model runs thousands of times in 0.2 s


def test_cpu_clock_with_one_thread(bench, tiny_float_tflite):
    record = json.loads(bench(tiny_float_tflite, "--runs", 20, "--threads", 1, "--clock", "cpu",
                              "--json").stdout)
    assert record["clock"] == "cpu" and record["latency_ms"]["median"] > 0


def test_onnx_runs_on_onnxruntime(bench, tiny_onnx_path):
    result = bench(tiny_onnx_path, "--runs", 20, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["tool"].startswith("onnxruntime") and record["model"]["format"] == "onnx"


def test_terminal_output_has_progress_on_stderr(bench, tiny_float_tflite):
    result = bench(tiny_float_tflite, "--runs", 10)
    assert result.exit_code == 0, result.stderr
    assert "latency" in result.stdout and "median" in result.stdout
    assert "10 runs" in result.stderr  # not a tty here: one progress line, no bar redraws


def test_check_numerics_compares_xnnpack_with_builtin_kernels(bench, tiny_float_tflite):
    result = bench(tiny_float_tflite, "--runs", 5, "--check-numerics", "--numerics-samples",
                   8, "--json")
    numerics = json.loads(result.stdout)["numerics"]
    assert numerics["samples"] == 8
    assert "XNNPACK" in numerics["candidate"] and "no delegate" in numerics["reference"]
    assert numerics["top1_agreement"] == 1.0
    assert numerics["max_abs"] < 1e-4
    assert numerics["sqnr_db"] is None or numerics["sqnr_db"] > 60


def test_check_numerics_on_onnx_compares_graph_optimizations(bench, tiny_onnx_path):
    result = bench(tiny_onnx_path, "--runs", 5, "--check-numerics", "--json")
    numerics = json.loads(result.stdout)["numerics"]
    assert "ORT_DISABLE_ALL" in numerics["reference"]
    assert numerics["top1_agreement"] == 1.0


def test_delegate_none_is_litert_without_default_delegates(bench, tiny_float_tflite):
    result = bench(tiny_float_tflite, "--runs", 5, "--delegate", "none", "--json")
    record = json.loads(result.stdout)
    assert "no delegate" in record["tool"] and record["device"]["delegate"] == "none"


def test_record_appends_lines_that_calibrate_can_read(bench, tiny_float_tflite,
                                                      tiny_onnx_path, tmp_path):
    records = tmp_path / "measurements.jsonl"
    for model in (tiny_float_tflite, tiny_onnx_path):
        assert bench(model, "--runs", 5, "--record", records, "--json").exit_code == 0
    rows = read_records(records)
    assert [r["model"]["format"] for r in rows] == ["tflite", "onnx"]
    assert all(r["latency_ms"]["median"] > 0 and len(r["model"]["sha256"]) == 64 for r in rows)


def test_two_models_give_a_results_list(bench, tiny_float_tflite, tiny_onnx_path):
    result = bench(tiny_float_tflite, tiny_onnx_path, "--runs", 5, "--json")
    data = json.loads(result.stdout)
    assert [r["model"]["file"] for r in data["results"]] == [tiny_float_tflite.name,
                                                             tiny_onnx_path.name]
    assert data["errors"] == []


def test_one_bad_model_keeps_the_others_results(bench, tiny_float_tflite, tmp_path):
    bad = tmp_path / "broken.tflite"
    bad.write_bytes(b"\0\0\0\0TFL3" + b"\xff" * 40)
    result = bench(tiny_float_tflite, bad, "--runs", 5, "--json")
    data = json.loads(result.stdout)
    assert len(data["results"]) == 1 and "broken.tflite" in data["errors"][0]
    assert_user_error(result, "1 of 2 measurements failed")


@pytest.mark.parametrize("args, fragment", [
    (["missing.tflite"], "model not found"),
    (["{keras}"], "convert it first"),
    (["{tflite}", "--device", "pixel-gpu"], "runs on the phone"),
    (["{tflite}", "--delegate", "warp-drive"], "unknown delegate"),
    (["{tflite}", "--delegate", "/nonexistent/libdelegate.so"], "delegate library not found"),
    (["{tflite}", "--device", "no-such-phone"], "unknown device"),
    (["{tflite}", "--device", "rpi5-cpu"], "another machine"),
    (["{tflite}", "--clock", "cpu"], "needs --threads 1"),
    (["{tflite}", "--benchmark-binary", "/x/benchmark_model"], "add --adb"),
    (["{onnx}", "--delegate", "gpu"], "runs on the phone"),
])
def test_user_errors_are_one_line(bench, tiny_float_tflite, tiny_keras_path, tiny_onnx_path,
                                  args, fragment):
    paths = {"{tflite}": tiny_float_tflite, "{keras}": tiny_keras_path,
             "{onnx}": tiny_onnx_path}
    assert_user_error(bench(*[paths.get(a, a) for a in args]), fragment)


def test_model_name_with_shell_characters_on_the_host(bench, tiny_float_tflite, tmp_path):
    odd = tmp_path / "a b;touch PWNED.tflite"
    shutil.copy(tiny_float_tflite, odd)
    result = bench(odd, "--runs", 3, "--json")
    assert json.loads(result.stdout)["model"]["file"] == odd.name
    assert not list(tmp_path.glob("PWNED*"))


def test_latency_summary_is_the_distribution_of_runs():
    lat = summarize_ms([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (lat.median, lat.min, lat.max) == (3.0, 1.0, 100.0)
    assert lat.mean == pytest.approx(22.0) and 4.0 < lat.p90 < 100.0


def test_numerics_inputs_that_do_not_fit_fail_before_any_run(bench, tiny_float_tflite, tmp_path):
    """--inputs of the wrong shape is refused before the benchmark runs, not after it."""
    import numpy as np

    from conftest import assert_user_error

    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, image=np.zeros((4, 8, 8, 3), np.float32))
    result = bench(tiny_float_tflite, "--runs", 5, "--check-numerics", "--inputs", wrong)
    assert_user_error(result, "has shape (4, 8, 8, 3)")
    assert "runs" not in result.stderr  # the run progress line never came
