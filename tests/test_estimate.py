"""The latency/energy estimator: roofline per op, placement forms, transfers, JSON, CLI.

Models are written directly as .tflite (edgeopt.devices.tflite_writer), so these tests
need no TensorFlow; one test goes through a Keras model to check the int8 assumption.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from edgeopt.cli.estimate import command as estimate_command
from edgeopt.devices import assignment
from edgeopt.devices.estimator import estimate
from edgeopt.devices.profile import load_profile, profile_names
from edgeopt.devices.tflite_writer import GraphWriter
from edgeopt.errors import DeviceError
from edgeopt.tflite_reader import read_tflite


def conv_chain(dtype: str = "int8", size: int = 32, channels: int = 16, depth: int = 3,
               tail: str | None = None) -> bytes:
    """``depth`` 3x3 convolutions (+ an optional unary op ``tail`` at the end)."""
    from edgeopt.devices.microbench import _bias, _weights
    from edgeopt.devices.tflite_writer import options

    g = GraphWriter(dtype)
    x = first = g.activation((1, size, size, 3))
    cin = 3
    for i in range(depth):
        y = g.activation((1, size, size, channels))
        inputs = [x, _weights(g, (channels, 3, 3, cin), 0, i), _bias(g, channels)]
        g.op("CONV_2D", inputs, [y], options("Conv2DOptions", padding=0, strideW=1, strideH=1,
                                             dilationWFactor=1, dilationHFactor=1),
             3 if dtype == "int8" else 1)
        x, cin = y, channels
    if tail:
        y = g.tensor((1, size, size, channels), "float32") if tail == "DEQUANTIZE" \
            else g.activation((1, size, size, channels))
        g.op(tail, [x], [y], version=2 if tail == "DEQUANTIZE" else 1)
        x = y
    return g.build([first], [x])


@pytest.fixture(scope="module")
def int8_model() -> bytes:
    return conv_chain("int8")


@pytest.fixture(scope="module")
def float_model() -> bytes:
    return conv_chain("float32")


def test_estimate_json_has_the_design_fields(int8_model):
    est = estimate(read_tflite(int8_model), load_profile("rpi5-cpu"), model=int8_model)
    record = est.to_json()
    assert {"device", "latency_ms", "energy_mj", "placement", "ops"} <= set(record)
    assert record["device"] == "rpi5-cpu" and record["latency_ms"] > 0
    assert {"delegate", "delegated_ops", "cpu_ops", "partitions"} <= set(record["placement"])
    assert [op["index"] for op in record["ops"]] == [0, 1, 2]
    for op in record["ops"]:
        assert {"index", "op", "unit", "latency_ms", "energy_mj"} <= set(op)
    total = sum(op["latency_ms"] for op in record["ops"]) + record["breakdown_ms"]["invoke"]
    assert total + record["breakdown_ms"]["transfers"] == pytest.approx(record["latency_ms"],
                                                                       rel=1e-3)
    assert record["energy_mj"] > sum(op["energy_mj"] for op in record["ops"])  # + idle power
    json.dumps(record)


def test_more_work_takes_longer_and_costs_more_energy():
    profile = load_profile("pixel-cpu")
    small, big = conv_chain("int8", 16), conv_chain("int8", 64)
    a = estimate(read_tflite(small), profile, model=small)
    b = estimate(read_tflite(big), profile, model=big)
    assert b.latency_s > 2 * a.latency_s and b.energy_j > 2 * a.energy_j
    compute = [sum(o.compute_s for o in e.ops) for e in (a, b)]
    assert compute[1] == pytest.approx(16 * compute[0], rel=0.01)  # 16x the MACs


def test_faster_devices_are_faster(int8_model):
    graph = read_tflite(int8_model)
    rpi = estimate(graph, load_profile("rpi5-cpu"), model=int8_model)
    npu = estimate(graph, load_profile("snapdragon-npu"), model=int8_model)
    u55 = estimate(graph, load_profile("ethos-u55-256"), model=int8_model)
    assert u55.latency_s > rpi.latency_s
    npu_ops = sum(o.latency_s for o in npu.ops)
    assert npu_ops < sum(o.latency_s for o in rpi.ops)


def test_given_placement_costs_switches_and_transfers(int8_model):
    graph = read_tflite(int8_model)
    profile = load_profile("pixel-npu")
    on_npu = estimate(graph, profile, {0: "npu", 1: "npu", 2: "npu"})
    split = estimate(graph, profile, {0: "npu", 1: "cpu", 2: "npu"})
    assert [op.unit for op in split.ops] == ["npu", "cpu", "npu"]
    assert split.placement["partitions"] == [[0], [2]]
    switches = [t for t in split.transfers if t.tensor == -1]
    assert len(switches) == 2
    link = profile.hardware.link("cpu", "npu")
    assert all(t.latency_s == link.latency.value for t in switches)
    crossing = [t for t in split.transfers if t.tensor >= 0]
    assert {(t.source, t.target) for t in crossing} == {("cpu", "npu"), ("npu", "cpu")}
    assert split.latency_s > on_npu.latency_s
    by_list = estimate(graph, profile, ["accelerator", "cpu", "accelerator"])
    assert by_list.latency_s == pytest.approx(split.latency_s)


def test_unknown_unit_in_a_placement(int8_model):
    with pytest.raises(DeviceError, match="unknown unit 'dsp'.*units npu, cpu"):
        estimate(read_tflite(int8_model), load_profile("pixel-npu"), {0: "dsp"})


def test_default_placement_when_the_delegates_give_none(monkeypatch, float_model):
    monkeypatch.setattr(assignment, "_delegates_placement", lambda graph, profile, model: None)
    est = estimate(read_tflite(float_model), load_profile("snapdragon-npu"))
    # The NPU profile computes int8 and float16 only: float32 ops fall back to the CPU.
    assert est.placement["cpu_ops"] == 3 and all(o.unit == "cpu" for o in est.ops)
    assert "computes int8, float16, not float32" in est.ops[0].reason
    assert any("no delegate placement" in n for n in est.notes)


def test_delegates_placement_is_used(float_model):
    est = estimate(read_tflite(float_model), load_profile("host-cpu"), model=float_model)
    assert all(o.unit == "xnnpack" for o in est.ops)
    assert est.placement["delegate"] == "xnnpack" and est.placement["delegated_ops"] == 3


def test_cpu_fallback_ops_cost_on_the_cpu_unit(int8_model):
    graph = read_tflite(int8_model)
    profile = load_profile("pixel-gpu")
    est = estimate(graph, profile, {0: "gpu", 1: "gpu", 2: "cpu"})
    fallback = est.ops[2]
    assert fallback.unit == "cpu" and fallback.reason
    peak = profile.hardware.unit("cpu").peak_ops["int8"].value
    assert fallback.compute_s >= (2 * graph.ops[2].macs) / peak


def test_cli_single_device_and_all(int8_model, tmp_path):
    path = tmp_path / "model.tflite"
    path.write_bytes(int8_model)
    runner = CliRunner()
    result = runner.invoke(estimate_command, [str(path), "--device", "ethos-u55-256", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["device"] == "ethos-u55-256" and len(record["ops"]) == 3
    result = runner.invoke(estimate_command, [str(path), "--device", "all"])
    assert result.exit_code == 0, result.output
    for name in ("host-cpu", "coral-usb", "pixel-npu", "ethos-u65-512"):
        assert name in result.output
    result = runner.invoke(estimate_command, [str(path), "--device", "all", "--json"])
    devices = json.loads(result.output)["devices"]
    assert len(devices) == len(profile_names()) and all("latency_ms" in d for d in devices)
    text = runner.invoke(estimate_command, [str(path), "--device", "rpi5-cpu", "--top", "1"])
    assert "CONV_2D" in text.output and "ms" in text.output


def test_cli_float_model_on_all_devices_reports_why_coral_cannot(float_model, tmp_path):
    path = tmp_path / "float.tflite"
    path.write_bytes(float_model)
    result = CliRunner().invoke(estimate_command, [str(path), "--device", "all", "--json"])
    devices = {d["device"]: d for d in json.loads(result.output)["devices"]}
    assert "fully int8" in devices["coral-usb"]["error"]
    assert devices["host-cpu"]["latency_ms"] > 0


def test_user_profile_path_as_device(int8_model, tmp_path):
    from test_devices import GOOD

    profile = tmp_path / "board.toml"
    profile.write_text(GOOD.replace('delegate = "ethos-u"', 'delegate = "nnapi"'))
    est = estimate(read_tflite(int8_model), load_profile(str(profile)), model=int8_model)
    assert est.device == "my-board" and est.latency_ms > 0


def test_keras_model_is_estimated_as_int8_on_an_int8_device(tiny_keras_path):
    result = CliRunner().invoke(estimate_command, [str(tiny_keras_path), "--device",
                                                   "pixel-npu", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert any("int8 assumed" in n for n in record["notes"])
    assert record["precision"] == "int8"


def test_cli_estimates_an_rgb_onnx_model_offline(tiny_onnx_path, run_cli):
    """onnx2tf wants sample images for a 3-channel input: the estimate gives it random ones
    (found by the fuzz suite: every RGB ONNX estimate used to fail)."""
    result = run_cli("estimate", tiny_onnx_path, "--device", "pixel-npu", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["latency_ms"] > 0 and record["device"] == "pixel-npu"
