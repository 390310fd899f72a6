"""`edgeopt inspect` on each format."""

from __future__ import annotations

import json

from conftest import SAMPLES
from edgeopt.devices.profile import profile_names


def test_inspect_onnx_json(run_cli):
    result = run_cli("inspect", SAMPLES / "digits_cnn.onnx", "--json")
    assert result.exit_code == 0
    record = json.loads(result.stdout)
    assert record["format"] == "onnx"
    assert record["op_histogram"]["Conv"] == 3
    assert record["parameters"] == 93_962  # the Keras model's count_params()
    # convs: 32*1*9*32*32 + 64*32*9*16*16 + 128*64*9*8*8, dense 128*10
    assert record["macs"] == 294_912 + 4_718_592 + 4_718_592 + 1_280
    assert record["inputs"][0]["shape"] == [-1, 1, 32, 32]


def test_inspect_keras_reads_its_tflite_graph(run_cli):
    result = run_cli("inspect", SAMPLES / "digits_cnn.keras", "--json")
    record = json.loads(result.stdout)
    assert record["format"] == "keras" and record["op_histogram"]["CONV_2D"] == 3
    assert record["parameters"] == 93_962
    assert record["macs"] == 294_912 + 4_718_592 + 4_718_592 + 1_280


def test_inspect_table(run_cli, tiny_float_tflite):
    result = run_cli("inspect", tiny_float_tflite)
    assert result.exit_code == 0
    assert "CONV_2D" in result.stdout and "parameters" in result.stdout


def test_inspect_device_placement(run_cli, tiny_float_tflite):
    result = run_cli("inspect", tiny_float_tflite, "--device", "coral-usb", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    ops = record["placement"]["ops"]
    assert ops and all(op["unit"] == "cpu" and op["reason"] for op in ops)  # a float model


def test_inspect_device_all(run_cli):
    result = run_cli("inspect", SAMPLES / "digits_cnn.onnx", "--device", "all", "--json")
    assert result.exit_code == 0, result.stderr
    devices = json.loads(result.stdout)["devices"]
    assert len(devices) == len(profile_names())
    by_name = {d["device"]: d for d in devices}
    assert by_name["pixel-gpu"]["cpu_ops"] == 0  # the GPU takes a float model
    assert by_name["coral-usb"]["delegated_ops"] == 0  # the Edge TPU does not
    text = run_cli("inspect", SAMPLES / "digits_cnn.onnx", "--device", "all").stdout
    assert "placement per device" in text and "coral-usb:" in text


def test_inspect_unknown_device(run_cli, tiny_float_tflite):
    from conftest import assert_user_error

    assert_user_error(run_cli("inspect", tiny_float_tflite, "--device", "nope"), "unknown device")
