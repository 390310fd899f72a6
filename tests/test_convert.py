"""Conversions to float .tflite, their parity checks, and onnx2tf kept offline."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest

from conftest import SAMPLES, assert_user_error, tiny_onnx
from edgeopt.converters.parity import compare_outputs
from edgeopt.model import load_model


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test."""
    attempts = []

    def refuse(self, address, *args):
        attempts.append(address)
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


def test_static_batch_rgb_onnx_converts_offline_with_our_samples(tmp_path, no_network,
                                                                  monkeypatch):
    """onnx2tf asks for its downloaded sample images for this shape; it gets ours."""
    import contextlib

    import onnx2tf.onnx2tf as main_module

    from edgeopt.converters import onnx_to_tf
    from edgeopt.converters.float_tflite import to_float_tflite

    served = []
    offline = onnx_to_tf._offline_onnx2tf

    @contextlib.contextmanager
    def spying(samples):
        with offline(samples):
            hook = main_module.download_test_image_data
            main_module.download_test_image_data = lambda: served.append(hook()) or served[-1]
            yield

    monkeypatch.setattr(onnx_to_tf, "_offline_onnx2tf", spying)
    original = main_module.download_test_image_data
    path = tiny_onnx(tmp_path / "static.onnx", dynamic_batch=False)
    samples = np.random.default_rng(0).random((4, 3, 16, 16), dtype=np.float32)
    conv = to_float_tflite(load_model(path), tmp_path, {"input": samples})
    assert main_module.download_test_image_data is original  # patched only during the call
    assert no_network == []
    assert len(served) == 1 and served[0].shape == (4, 16, 16, 3)  # ours, in NHWC
    np.testing.assert_array_equal(served[0], samples.transpose(0, 2, 3, 1))
    assert conv.input_perms == {"input": (0, 2, 3, 1)}
    assert not list(tmp_path.glob("calibration_image_sample_data*"))


def test_onnx_conversion_parity(tmp_path, tiny_onnx_path, no_network):
    from edgeopt.converters.float_tflite import to_float_tflite
    from edgeopt.runtime import LayoutAdapter, TFLiteRunner, make_runner

    handle = load_model(tiny_onnx_path)
    x = {"input": np.random.default_rng(2).random((6, 3, 16, 16), dtype=np.float32)}
    conv = to_float_tflite(handle, tmp_path, x)
    runner = LayoutAdapter(TFLiteRunner(conv.tflite, ["input"]), conv.input_perms,
                           conv.output_perms)
    parity = compare_outputs(make_runner(handle).run(x), runner.run(x))
    assert parity.cosine > 0.99999 and parity.max_abs < 1e-4


def test_convert_command_keras_and_onnx(run_cli, tmp_path, tiny_keras_path):
    for model in (tiny_keras_path, SAMPLES / "digits_cnn.onnx"):
        out = tmp_path / f"{model.stem}.tflite"
        result = run_cli("convert", model, "-o", out, "--json")
        assert result.exit_code == 0, result.stderr
        record = json.loads(result.stdout)
        assert record["parity"]["cosine"] > 0.9999
        assert load_model(out).format == "tflite"


def test_convert_errors(run_cli, tmp_path, tiny_float_tflite, tiny_onnx_path):
    assert_user_error(run_cli("convert", tiny_float_tflite, "-o", tmp_path / "x.tflite"),
                      "already is a .tflite")
    assert_user_error(run_cli("convert", tiny_onnx_path, "-o", tmp_path), "is a folder")
    assert not list(tmp_path.glob("*.tmp"))


def test_dynamic_spatial_dims_are_a_clear_error(tmp_path):
    import onnx

    from edgeopt.converters.float_tflite import to_float_tflite
    from edgeopt.errors import ConversionError

    path = tiny_onnx(tmp_path / "dyn.onnx")
    model = onnx.load(str(path))
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
    onnx.save(model, str(path))
    with pytest.raises(ConversionError, match="dynamic dimensions"):
        to_float_tflite(load_model(path), tmp_path, None)
