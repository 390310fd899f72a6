"""Loading: format from content, safe loading, and one-line errors for broken files."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from conftest import assert_user_error, tiny_cnn
from edgeopt.errors import ModelLoadError
from edgeopt.model import detect_format, load_model


def test_formats_detected_from_content_not_name(tmp_path, tiny_onnx_path, tiny_keras_path,
                                                 tiny_float_tflite):
    for source, fmt in ((tiny_onnx_path, "onnx"), (tiny_keras_path, "keras"),
                        (tiny_float_tflite, "tflite")):
        renamed = tmp_path / f"model_{fmt}.bin"
        shutil.copy(source, renamed)
        assert detect_format(renamed) == fmt
        assert load_model(renamed).format == fmt


def test_signatures(tiny_onnx_path, tiny_keras_path, tiny_float_tflite):
    onnx_handle = load_model(tiny_onnx_path)
    assert onnx_handle.inputs[0].name == "input"
    assert onnx_handle.inputs[0].shape == (-1, 3, 16, 16)
    assert onnx_handle.outputs[0].shape == (-1, 4)
    keras_handle = load_model(tiny_keras_path)
    assert keras_handle.inputs[0].shape == (-1, 16, 16, 3)
    assert keras_handle.inputs[0].dtype == "float32"
    tflite_handle = load_model(tiny_float_tflite)
    assert tflite_handle.inputs[0].shape == (1, 16, 16, 3)
    assert tflite_handle.inputs[0].quantization is None


def test_saved_model_folder(tmp_path):
    model = tiny_cnn()
    model.export(str(tmp_path / "sm"), verbose=False)
    handle = load_model(tmp_path / "sm")
    assert handle.format == "saved_model"
    assert handle.inputs[0].shape[1:] == (16, 16, 3)


def test_folder_that_is_not_a_saved_model(tmp_path):
    with pytest.raises(ModelLoadError, match="not a SavedModel"):
        load_model(tmp_path)


def test_keras_lambda_layer_refused_in_safe_mode(tmp_path):
    import keras

    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2)(inputs))
    path = tmp_path / "lambda.keras"
    model.save(path)
    with pytest.raises(ModelLoadError, match="safe mode"):
        load_model(path)


def _with_external_data(tmp_path, tiny_onnx_path, location: str):
    import onnx

    model = onnx.load(str(tiny_onnx_path))
    weight = next(t for t in model.graph.initializer if t.name == "w")
    weight.ClearField("raw_data")
    weight.data_location = onnx.TensorProto.EXTERNAL
    entry = weight.external_data.add()
    entry.key, entry.value = "location", location
    path = tmp_path / "model" / "ext.onnx"
    path.parent.mkdir(exist_ok=True)
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "../../etc/passwd"])
def test_external_data_outside_the_model_folder_refused(tmp_path, tiny_onnx_path, location):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 4096)
    path = _with_external_data(tmp_path, tiny_onnx_path, location)
    with pytest.raises(ModelLoadError, match="outside the model's folder"):
        load_model(path)


def test_external_data_symlink_escaping_refused(tmp_path, tiny_onnx_path):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 4096)
    path = _with_external_data(tmp_path, tiny_onnx_path, "weights.bin")
    os.symlink(tmp_path / "secret.bin", path.parent / "weights.bin")
    with pytest.raises(ModelLoadError, match="outside the model's folder"):
        load_model(path)


def test_external_data_inside_the_folder_loads(tmp_path, tiny_onnx_path):
    import onnx

    model = onnx.load(str(tiny_onnx_path))
    folder = tmp_path / "ok"
    folder.mkdir()
    onnx.save(model, str(folder / "m.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="m.data", size_threshold=0)
    handle = load_model(folder / "m.onnx")
    assert handle.format == "onnx"


# --- broken files through the CLI: exit 2, one line, nothing written ----------------------

def _broken_files(tmp_path, tiny_onnx_path, tiny_float_tflite):
    rng = np.random.default_rng(7)
    files = {
        "random.onnx": rng.bytes(5000),
        "random.tflite": rng.bytes(5000),
        "truncated.onnx": tiny_onnx_path.read_bytes()[:300],
        "truncated.tflite": tiny_float_tflite.read_bytes()[:400],
        "empty.onnx": b"",
        "text.keras": b"this is not a model at all\n" * 10,
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    return list(files)


@pytest.mark.parametrize("command", ["build", "inspect"])
def test_broken_models_are_one_line_errors(tmp_path, run_cli, tiny_onnx_path, tiny_float_tflite,
                                           command):
    for name in _broken_files(tmp_path, tiny_onnx_path, tiny_float_tflite):
        out = tmp_path / f"out_{name}"
        args = [command, tmp_path / name]
        if command == "build":
            args += ["--calib", "random", "-o", out]
        assert_user_error(run_cli(*args))
        assert not out.exists()


def test_missing_model(run_cli, tmp_path):
    assert_user_error(run_cli("inspect", tmp_path / "nope.onnx"), "model not found")
    assert_user_error(run_cli("build", tmp_path / "nope.onnx", "--calib", "random",
                              "-o", tmp_path / "o"), "model not found")


def test_minus_one_dims_are_dynamic(tmp_path, tiny_onnx_path):
    """paddle2onnx writes dim_value -1 for a dynamic dim (PP-OCR's models do); -2 is corrupt."""
    import onnx

    model = onnx.load(str(tiny_onnx_path))
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = -1
    path = tmp_path / "minus_one.onnx"
    onnx.save(model, str(path))
    assert load_model(path).inputs[0].shape[0] < 0
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -2
    onnx.save(model, str(path))
    with pytest.raises(ModelLoadError, match="negative"):
        load_model(path)
