"""Tiny models built in code, seeded data, and a way to run the CLI in-process."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# A profile calibrated on this machine (in the user cache) must not change what tests see.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="edgeopt-test-cache-")

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str
    seconds: float = 0.0


@pytest.fixture
def run_cli(capsys):
    """Run `edgeopt ARGS` in this process; returns exit code, stdout, stderr, seconds."""
    import time

    from edgeopt.cli import cli

    def run(*args: str) -> CliResult:
        start = time.monotonic()
        code = cli.main([str(a) for a in args], standalone_mode=False)
        out, err = capsys.readouterr()
        return CliResult(code, out, err, time.monotonic() - start)

    return run


@pytest.fixture
def bench(run_cli):
    """`edgeopt bench ARGS` in-process, through the edgeopt group's error handling."""
    return lambda *args: run_cli("bench", *args)


def run_edgeopt(*args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    """Run `edgeopt ARGS` in a fresh interpreter."""
    return subprocess.run([sys.executable, "-m", "edgeopt.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, **kwargs)


def wrapped_python(folder: Path) -> Path:
    """`folder/python3`: this interpreter, as a board's python3 with numpy and LiteRT.

    A wrapper script that execs `sys.executable`, not a symlink to it: a venv's python
    found through a link outside the venv does not see the venv (`sys.prefix` is the base
    interpreter's, without TensorFlow or LiteRT).
    """
    import shlex

    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def assert_user_error(result, fragment: str = "") -> None:
    """Exit 2, exactly one `edgeopt: error:` line on stderr, no traceback."""
    code = result.exit_code if hasattr(result, "exit_code") else result.returncode
    err = result.stderr
    assert code == 2, (code, err)
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("•")]
    assert len(lines) == 1 and lines[0].startswith("edgeopt: error: "), err
    assert "Traceback" not in err
    assert fragment.lower() in lines[0].lower(), lines[0]


def tiny_cnn(input_shape=(16, 16, 3), classes: int = 4, seed: int = 0):
    """Conv -> depthwise -> pool -> dense classifier with deterministic weights."""
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import keras

    keras.utils.set_random_seed(seed)
    inputs = keras.Input(input_shape, name="image")
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.DepthwiseConv2D(3, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(classes, activation="softmax", name="probs")(x)
    return keras.Model(inputs, outputs)


def tiny_onnx(path: Path, channels: int = 3, size: int = 16, classes: int = 4,
              dynamic_batch: bool = True, seed: int = 0) -> Path:
    """A PyTorch-style NCHW ONNX classifier: Conv, Relu, GlobalAveragePool, Flatten, Gemm."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights = [
        numpy_helper.from_array(rng.normal(0, 0.3, (8, channels, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b"),
        numpy_helper.from_array(rng.normal(0, 0.5, (classes, 8)).astype(np.float32), "fc"),
        numpy_helper.from_array(np.zeros(classes, np.float32), "fcb"),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    batch = "N" if dynamic_batch else 1
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, channels, size, size])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, classes])],
        weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


# The bundled sample's builds that several tests read: README's first command for each
# source format (the .onnx one compared on every device, as in the tour), and the plainest
# build (calibration data only, the default device).
SAMPLE_BUILDS = {
    "keras": ("digits_cnn.keras", "--device", "pixel-npu", "--eval", "digits_eval.npz"),
    "onnx": ("digits_cnn.onnx", "--device", "pixel-npu,all", "--eval", "digits_eval.npz"),
    "plain": ("digits_cnn.keras",),
}


@pytest.fixture(scope="session")
def sample_bundles(tmp_path_factory):
    """`sample_bundles(kind)`: the bundle of `SAMPLE_BUILDS[kind]`, built once per session.

    Shared by every test that asks for it, so read it only; a test that changes a bundle
    copies it first (`shutil.copytree`).
    """
    from edgeopt.cli import cli

    built: dict[str, Path] = {}

    def bundle(kind: str) -> Path:
        if kind not in built:
            model, *flags = SAMPLE_BUILDS[kind]
            flags = [str(SAMPLES / f) if f.endswith(".npz") else f for f in flags]
            out = tmp_path_factory.mktemp(f"sample-{kind}") / "dist"
            code = cli.main(["build", str(SAMPLES / model), "--calib",
                             str(SAMPLES / "digits_calib.npz"), *flags, "-o", str(out),
                             "--json"], standalone_mode=False)
            assert code == 0, f"the sample build {kind} failed"
            built[kind] = out
        return built[kind]

    return bundle


@pytest.fixture(scope="session")
def tiny_keras_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("keras") / "tiny.keras"
    tiny_cnn().save(path)
    return path


@pytest.fixture(scope="session")
def tiny_onnx_path(tmp_path_factory) -> Path:
    return tiny_onnx(tmp_path_factory.mktemp("onnx") / "tiny.onnx")


@pytest.fixture(scope="session")
def tiny_nhwc_data(tmp_path_factory) -> Path:
    """64 seeded 16x16x3 images in [0, 1], NHWC, with labels."""
    rng = np.random.default_rng(1)
    path = tmp_path_factory.mktemp("data") / "calib.npz"
    np.savez(path, image=rng.random((64, 16, 16, 3), dtype=np.float32),
             labels=rng.integers(0, 4, 64))
    return path


@pytest.fixture(scope="session")
def tiny_float_tflite(tmp_path_factory, tiny_keras_path) -> Path:
    from edgeopt.converters.float_tflite import to_float_tflite
    from edgeopt.model import load_model

    folder = tmp_path_factory.mktemp("tflite")
    conv = to_float_tflite(load_model(tiny_keras_path), folder)
    path = folder / "tiny_float.tflite"
    path.write_bytes(conv.tflite)
    return path


@pytest.fixture(scope="module")
def torch_heads(tmp_path_factory):
    """tests/torch_models.TwoHeads saved as a `.pt2` beside its samples: (pt2, npz)."""
    pytest.importorskip("torch")
    from torch_models import heads_files

    return heads_files(tmp_path_factory.mktemp("heads"))


@pytest.fixture(scope="module")
def heads_pt2(torch_heads):
    return torch_heads[0]


@pytest.fixture(scope="module")
def heads_calib(torch_heads):
    return torch_heads[1]
