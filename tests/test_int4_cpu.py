"""Issue 20 class 10: int4 weights on a CPU run on LiteRT's builtin kernels, not XNNPACK.

The estimate costs an int4-weight convolution on the CPU's builtin kernel and says so, the
build warns when the user asks for an int4 scheme on a CPU device, and a CPU device never
gets an int4 scheme by default.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import tiny_cnn
from edgeopt.calibration.schemes import INT4_WEIGHT_SCHEMES, default_scheme
from edgeopt.config import BuildConfig
from edgeopt.devices.estimator import estimate
from edgeopt.devices.profile import load_profile
from edgeopt.pipeline import resolve_scheme
from edgeopt.tflite_reader import read_tflite

CPU_DEVICES = ("host-cpu", "pixel-cpu", "rpi5-cpu")


@pytest.mark.parametrize("device", CPU_DEVICES)
def test_a_cpu_device_never_gets_int4_weights_by_default(device):
    profile = load_profile(device)
    scheme = resolve_scheme(BuildConfig(model="m.keras", device=device), profile)
    assert scheme not in INT4_WEIGHT_SCHEMES
    assert default_scheme("int8", "cpu") == "w8a8"


@pytest.mark.slow
def test_w4a8_on_a_cpu_is_costed_on_the_builtin_kernels_and_warned(run_cli, tmp_path):
    tiny_cnn(input_shape=(16, 16, 8)).save(tmp_path / "tiny.keras")
    rng = np.random.default_rng(10)
    np.savez(tmp_path / "calib.npz", image=rng.random((20, 16, 16, 8), dtype=np.float32))
    result = run_cli("build", tmp_path / "tiny.keras", "--device", "host-cpu", "--scheme",
                     "w4a8", "--calib", tmp_path / "calib.npz", "-o", tmp_path / "b", "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    notes = " ".join(manifest["notes"])
    assert "scheme w4a8 on a CPU" in notes
    assert "int4-weight op(s) (CONV_2D) run on the CPU's builtin kernels" in notes

    model = (tmp_path / "b" / manifest["model"]["file"]).read_bytes()
    graph = read_tflite(model)
    found = estimate(graph, load_profile("host-cpu"), model=model)
    convs = [row for row in found.ops if row.op == "CONV_2D"]
    assert convs and all(row.unit == "cpu" for row in convs)
    assert any("builtin kernels" in n for n in found.notes)


@pytest.mark.slow
def test_w8a8_on_a_cpu_gets_no_int4_note(run_cli, tmp_path):
    tiny_cnn(input_shape=(16, 16, 8)).save(tmp_path / "tiny.keras")
    rng = np.random.default_rng(11)
    np.savez(tmp_path / "calib.npz", image=rng.random((20, 16, 16, 8), dtype=np.float32))
    result = run_cli("build", tmp_path / "tiny.keras", "--device", "host-cpu", "--calib",
                     tmp_path / "calib.npz", "-o", tmp_path / "b", "--json")
    assert result.exit_code == 0, result.stderr
    notes = json.loads((tmp_path / "b" / "manifest.json").read_text())["notes"]
    assert not any("int4" in n for n in notes)
