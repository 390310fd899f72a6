"""edgeopt never writes to an input (issue 14 item 4).

onnxslim cannot simplify an opset-1 graph, and edgeopt then handed the user's own path to
onnx2tf, which saved its shape-inferred graph over it: `estimate`, `convert` and `build`
all changed the file's sha256. Third-party tools now get a private copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLES


def opset1_onnx(path: Path) -> Path:
    """Conv + MaxPool at opset 1 (onnxruntime still runs both; onnxslim gives up)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = np.random.default_rng(0).normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["out"], kernel_shape=[1, 1])]
    graph = helper.make_graph(
        nodes, "opset1", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(weights, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 1)])
    model.ir_version = 4
    onnx.save(model, str(path))
    return path


def _calib(path: Path) -> Path:
    np.savez(path, input=np.random.default_rng(1).random((64, 3, 8, 8), dtype=np.float32))
    return path


def _fingerprint(path: Path) -> tuple[str, int, int]:
    info = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), info.st_mtime_ns, info.st_mode


def test_onnxslim_failure_does_not_hand_onnx2tf_the_users_file(tmp_path, run_cli):
    model = opset1_onnx(tmp_path / "opset1.onnx")
    calib = _calib(tmp_path / "calib.npz")
    before = _fingerprint(model)
    for args in (["estimate", model, "--device", "pixel-npu"],
                 ["convert", model, "-o", tmp_path / "out.tflite"],
                 ["build", model, "--calib", calib, "-o", tmp_path / "dist"]):
        result = run_cli(*args)
        assert result.exit_code == 0, (args[0], result.stderr)
        assert _fingerprint(model) == before, f"{args[0]} changed {model.name}"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "calib.npz", "dist", "opset1.onnx", "out.tflite"]


def _read_only_wrapper(folder: Path) -> list[str]:
    """As root, permissions do not stop a write: a read-only bind mount of the folder in a
    private mount namespace does. As anyone else, chmod is enough."""
    if os.geteuid() != 0:
        return []
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("running as root without mount namespaces: cannot make a folder read-only")
    return ["unshare", "--mount", "sh", "-c",
            'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"',
            str(folder)]


def test_main_commands_succeed_on_a_read_only_input_folder(tmp_path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    model = opset1_onnx(inputs / "opset1.onnx")
    calib = _calib(inputs / "calib.npz")
    keras = inputs / "digits.keras"
    shutil.copyfile(SAMPLES / "digits_cnn.keras", keras)
    for path in (model, calib, keras):
        path.chmod(0o444)
    inputs.chmod(0o555)
    before = {p.name: _fingerprint(p) for p in inputs.iterdir()}
    out = tmp_path / "out"
    out.mkdir()
    commands = [["inspect", model], ["estimate", model, "--device", "pixel-npu"],
                ["convert", model, "-o", out / "a.tflite"],
                ["build", model, "--calib", calib, "-o", out / "dist"],
                ["convert", keras, "-o", out / "k.tflite"]]
    wrapper = _read_only_wrapper(inputs)
    try:
        for argv in commands:
            done = subprocess.run([*wrapper, sys.executable, "-m", "edgeopt.cli",
                                   *map(str, argv)], capture_output=True, text=True,
                                  timeout=900)
            assert done.returncode == 0, (argv[0], done.stderr[-2000:])
        assert {p.name: _fingerprint(p) for p in inputs.iterdir()} == before
        assert stat.S_IMODE(inputs.stat().st_mode) == 0o555
    finally:
        inputs.chmod(0o755)
