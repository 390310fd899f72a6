"""`edgeopt build` end to end with the real converters and runtimes."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from conftest import SAMPLES, assert_user_error

MANIFEST_KEYS = {"schema_version", "model", "inputs", "outputs", "device", "recipe",
                 "accuracy", "placement", "estimate", "toolchain", "created"}


def _manifest(folder):
    return json.loads((folder / "manifest.json").read_text())


def _validate_schema(manifest: dict) -> None:
    """Every bundle against the JSON Schema shipped in the package."""
    import importlib.resources

    import jsonschema

    schema = json.loads(importlib.resources.files("edgeopt").joinpath(
        "manifest.schema.json").read_text())
    jsonschema.validate(manifest, schema, format_checker=jsonschema.FormatChecker())


def _build_sample(run_cli, model: str, out, *flags, evaluation: bool = True):
    """`edgeopt build samples/MODEL --calib digits_calib.npz [--eval digits_eval.npz] --json`."""
    data = ["--calib", SAMPLES / "digits_calib.npz"]
    if evaluation:
        data += ["--eval", SAMPLES / "digits_eval.npz"]
    return run_cli("build", SAMPLES / model, *data, "-o", out, "--json", *flags)


def _contents(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _check_bundle(folder, fmt: str):
    import hashlib

    manifest = _manifest(folder)
    _validate_schema(manifest)
    assert MANIFEST_KEYS <= set(manifest)
    model_file = folder / manifest["model"]["file"]
    assert model_file.suffix == f".{fmt}" and manifest["model"]["format"] == fmt
    content = model_file.read_bytes()
    assert manifest["model"]["sha256"] == hashlib.sha256(content).hexdigest()
    assert manifest["model"]["size_bytes"] == len(content)
    compiled = [manifest["compiled"]["file"]] if "compiled" in manifest else []
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [model_file.name, "manifest.json", "report.html", "edgeopt.toml", "usage", *compiled,
         ".edgeopt-bundle"])
    from edgeopt.bundle_owner import ownership_problem
    assert ownership_problem(folder) is None  # the marker vouches for every file
    snippets = {p.name for p in (folder / "usage").iterdir()}
    assert "predict.py" in snippets
    if fmt == "tflite":
        assert {"EdgeoptModel.kt", "EdgeoptModel.swift"} <= snippets
    if fmt == "tflite":
        placement = manifest["placement"]
        total = placement["delegated_ops"] + placement["cpu_ops"]
        assert total > 0 and all(isinstance(p, list) for p in placement["partitions"])
        assert "Op placement" in (folder / "report.html").read_text()
        assert manifest["estimate"]["latency_ms"] > 0 and manifest["estimate"]["energy_mj"] > 0
        assert "latency breakdown" in (folder / "report.html").read_text()
    else:  # .onnx: placed on onnxruntime's execution provider for the device, estimated
        assert manifest["placement"]["execution_provider"].endswith("ExecutionProvider")
        assert "placement_note" not in manifest and "estimate_note" not in manifest
        assert manifest["estimate"]["latency_ms"] > 0 and manifest["estimate"]["basis"]
    for package in ("tensorflow", "onnxruntime", "ai-edge-litert", "edgeopt"):
        assert package in manifest["toolchain"]
    report = (folder / "report.html").read_text()
    assert "<script" not in report and not re.search(r"(src|href)=\"?https?:", report)
    return manifest


@pytest.fixture(scope="module")
def sample_builds(sample_bundles):
    """The bundled sample built for pixel-npu (as the README does), once per session."""
    return {fmt: sample_bundles(fmt) for fmt in ("keras", "onnx")}


@pytest.mark.parametrize("fmt", ["keras", "onnx"])
def test_sample_int8_for_pixel_npu(sample_builds, fmt):
    manifest = _check_bundle(sample_builds[fmt], "tflite")
    assert manifest["device"]["name"] == "pixel-npu"
    assert manifest["recipe"]["scheme"] == "w8a8"
    acc = manifest["accuracy"]
    assert acc["metric"] == "top1_accuracy"
    assert acc["reference"] > 0.95
    assert acc["value"] >= acc["reference"] - 0.01  # within 1 point of float
    for tensor in manifest["inputs"] + manifest["outputs"]:
        assert tensor["dtype"] == "int8" and tensor["quantization"]["scale"] > 0
    assert manifest["inputs"][0]["name"] == "image"
    assert manifest["sizes"]["artifact_bytes"] <= 0.3 * manifest["sizes"]["float_tflite_bytes"]
    assert manifest["validation"]["samples"] == 400
    assert manifest["validation"]["sqnr_db"] > 15
    parity = manifest["conversion"]["parity"]
    assert parity["cosine"] > 0.9999 and parity["max_abs"] < 1e-3


def test_the_artifact_runs_in_litert_and_matches_the_manifest(sample_builds):
    from ai_edge_litert.interpreter import Interpreter

    folder = sample_builds["onnx"]
    manifest = _manifest(folder)
    interpreter = Interpreter(model_path=str(folder / manifest["model"]["file"]))
    interpreter.allocate_tensors()
    detail = interpreter.get_input_details()[0]
    quant = manifest["inputs"][0]["quantization"]
    assert detail["quantization"] == pytest.approx((quant["scale"], quant["zero_point"]))
    data = np.load(SAMPLES / "digits_eval.npz")
    x = data["image"][:50]
    correct = 0
    for image, label in zip(x, data["labels"][:50]):
        q = np.clip(np.round(image / quant["scale"]) + quant["zero_point"], -128, 127)
        interpreter.set_tensor(detail["index"], q.astype(np.int8)[None])
        interpreter.invoke()
        out = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
        correct += int(out.argmax() == label)
    assert correct >= 47


@pytest.mark.parametrize("fmt", ["keras", "onnx"])
def test_python_snippet_reproduces_the_validation(sample_builds, fmt):
    import subprocess
    import sys

    folder = sample_builds[fmt]
    out = subprocess.run([sys.executable, str(folder / "usage" / "predict.py"),
                          str(SAMPLES / "digits_eval.npz")], capture_output=True, text=True,
                         timeout=120, check=True)
    predictions = np.array(json.loads(out.stdout)["argmax"])
    accuracy = float(np.mean(predictions == np.load(SAMPLES / "digits_eval.npz")["labels"]))
    assert accuracy == pytest.approx(_manifest(folder)["accuracy"]["value"], abs=1e-6)


def test_python_snippet_preprocesses_images_like_the_build(run_cli, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "img"
    assert run_cli("build", SAMPLES / "digits_cnn.onnx", "--calib", SAMPLES / "images",
                   "-o", out).exit_code == 0
    images = sorted(str(p) for p in (SAMPLES / "images").iterdir())
    result = subprocess.run([sys.executable, str(out / "usage" / "predict.py"), *images],
                            capture_output=True, text=True, timeout=120, check=True)
    predictions = json.loads(result.stdout)["argmax"]
    # the same images through edgeopt's own loader and runner give the same answers
    from edgeopt.data import load_dataset
    from edgeopt.model import load_model
    from edgeopt.runtime import LayoutAdapter, TFLiteRunner

    manifest = _manifest(out)
    handle = load_model(SAMPLES / "digits_cnn.onnx")
    data = load_dataset(str(SAMPLES / "images"), handle.inputs)
    runner = LayoutAdapter(TFLiteRunner(out / manifest["model"]["file"], ["image"]),
                           {"image": (0, 2, 3, 1)})
    assert predictions == runner.run(data.arrays)[0].argmax(1).tolist()


def test_config_file_reproduces_the_build(sample_builds, run_cli, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(sample_builds["keras"], folder)
    before = _manifest(folder)
    result = run_cli("build", "--config", folder / "edgeopt.toml", "--json")
    assert result.exit_code == 0, result.stderr
    after = _manifest(folder)
    assert after["model"]["sha256"] == before["model"]["sha256"]
    assert after["accuracy"] == before["accuracy"]


def test_onnx_stays_onnx_with_qdq_int8(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be left in the working folder
    out = tmp_path / "onnx_bundle"
    result = _build_sample(run_cli, "digits_cnn.onnx", out, "--format", "onnx",
                           "--device", "host-cpu")
    assert result.exit_code == 0, result.stderr
    manifest = _check_bundle(out, "onnx")
    import onnx

    ops = {n.op_type for n in onnx.load(str(out / manifest["model"]["file"])).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    acc = manifest["accuracy"]
    assert acc["value"] >= acc["reference"] - 0.01
    assert manifest["validation"]["runtime"].endswith("onnxruntime (CPU)")
    assert json.loads(result.stdout)["bundle"] == str(out)
    assert [p.name for p in tmp_path.iterdir()] == ["onnx_bundle"]


def test_held_back_evaluation_and_float_io_for_host_cpu(run_cli, tmp_path, tiny_keras_path,
                                                        tiny_nhwc_data):
    out = tmp_path / "b"
    result = run_cli("build", tiny_keras_path, "--calib", tiny_nhwc_data, "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    manifest = _check_bundle(out, "tflite")
    assert manifest["data"]["evaluation_samples"] == 12  # every 5th of 64
    assert manifest["data"]["calibration_samples"] == 52
    assert manifest["inputs"][0]["dtype"] == "float32"  # host-cpu keeps float IO
    assert manifest["accuracy"]["metric"] == "top1_accuracy"


def test_coral_gets_uint8_io(run_cli, tmp_path, tiny_onnx_path, tiny_nhwc_data):
    out = tmp_path / "coral"
    result = run_cli("build", tiny_onnx_path, "--device", "coral-usb", "--calib",
                     tiny_nhwc_data, "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    manifest = _manifest(out)
    assert manifest["inputs"][0]["dtype"] == "uint8"
    assert manifest["conversion"]["input_layout_changes"] == {"input": [0, 2, 3, 1]}


def test_the_schema_rejects_a_broken_manifest(sample_builds):
    import jsonschema

    manifest = _manifest(sample_builds["keras"])
    for key, value in (("model", {"file": "x"}), ("schema_version", 2),
                       ("accuracy", {"metric": "vibes"})):
        with pytest.raises(jsonschema.ValidationError):
            _validate_schema({**manifest, key: value})


@pytest.mark.parametrize("fmt", ["keras", "onnx"])
def test_every_key_of_a_sample_manifest_is_in_the_typed_model(sample_builds, fmt):
    """The schema forbids unknown keys, top level and nested; the typed model agrees."""
    import jsonschema

    from edgeopt.manifest import ContractError, parse_manifest

    manifest = _manifest(sample_builds[fmt])
    parsed = parse_manifest(manifest)
    assert parsed.model.sha256 == manifest["model"]["sha256"]
    assert parsed.validation is not None and parsed.conversion is not None
    for broken in ({**manifest, "surprise": 1},
                   {**manifest, "validation": {**manifest["validation"], "surprise": 1}},
                   {**manifest, "sizes": {**manifest["sizes"], "surprise": 1}}):
        with pytest.raises(jsonschema.ValidationError, match="surprise"):
            _validate_schema(broken)
        with pytest.raises(ContractError, match="unknown key 'surprise'"):
            parse_manifest(broken)


def test_the_bundle_writer_refuses_a_manifest_outside_the_model(sample_builds):
    from edgeopt.bundle import manifest_bytes
    from edgeopt.manifest import ContractError

    manifest = _manifest(sample_builds["keras"])
    assert json.loads(manifest_bytes(manifest)) == manifest
    with pytest.raises(ContractError, match="manifest.model: unknown key 'path'"):
        manifest_bytes({**manifest, "model": {**manifest["model"], "path": "/tmp/x"}})


def test_saved_model_and_float_tflite_inputs(run_cli, tmp_path, tiny_float_tflite,
                                             tiny_nhwc_data):
    from conftest import tiny_cnn

    saved = tmp_path / "sm"
    tiny_cnn().export(str(saved), verbose=False)
    for model, name in ((saved, "sm_bundle"), (tiny_float_tflite, "tfl_bundle")):
        result = run_cli("build", model, "--device", "pixel-npu", "--calib", tiny_nhwc_data,
                         "-o", tmp_path / name, "--json")
        assert result.exit_code == 0, result.stderr
        manifest = _check_bundle(tmp_path / name, "tflite")
        assert manifest["inputs"][0]["dtype"] == "int8"
        assert manifest["validation"]["cosine"] > 0.95


def test_random_calibration_is_flagged(run_cli, tmp_path, tiny_onnx_path):
    out = tmp_path / "r"
    result = run_cli("build", tiny_onnx_path, "--calib", "random", "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    manifest = _manifest(out)
    assert manifest["data"]["representative"] is False
    assert any("random" in note for note in manifest["notes"])
    assert "not representative" in (out / "report.html").read_text()


def test_image_folder_preprocessing_is_recorded(run_cli, tmp_path):
    out = tmp_path / "img"
    result = run_cli("build", SAMPLES / "digits_cnn.keras", "--calib", SAMPLES / "images",
                     "--mean", "0", "--std", "255", "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    prep = _manifest(out)["preprocessing"]
    assert prep["source"] == "images" and prep["resize"] == [32, 32]
    assert prep["mean"] == [0.0] and prep["std"] == [255.0]


# --- bad input: exit 2, one line, nothing written ---------------------------------------

def test_no_calibration_data(run_cli, tmp_path, tiny_onnx_path):
    result = run_cli("build", tiny_onnx_path, "-o", tmp_path / "o")
    assert_user_error(result, "no calibration data")
    assert not (tmp_path / "o").exists()


def test_calibration_of_the_wrong_shape_or_dtype(run_cli, tmp_path, tiny_onnx_path):
    np.savez(tmp_path / "shape.npz", input=np.zeros((4, 3, 8, 8), np.float32))
    np.savez(tmp_path / "dtype.npz", input=np.zeros((4, 3, 16, 16), np.uint8))
    for name, message in (("shape.npz", "has shape (4, 3, 8, 8)"),
                          ("dtype.npz", "takes float32 but the data is uint8")):
        result = run_cli("build", tiny_onnx_path, "--calib", tmp_path / name,
                         "-o", tmp_path / "o")
        assert_user_error(result, message)
        assert not (tmp_path / "o").exists()


def test_output_folder_that_is_a_file(run_cli, tmp_path, tiny_onnx_path):
    target = tmp_path / "dist"
    target.write_text("keep me")
    assert_user_error(run_cli("build", tiny_onnx_path, "--calib", "random", "-o", target),
                      "is not a folder")
    assert target.read_text() == "keep me"


def test_output_folder_with_other_files_is_not_replaced(run_cli, tmp_path, tiny_onnx_path):
    target = tmp_path / "project"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    assert_user_error(run_cli("build", tiny_onnx_path, "--calib", "random", "-o", target),
                      "not empty")
    assert (target / "notes.txt").read_text() == "mine"


def test_failed_build_keeps_the_existing_bundle(run_cli, tmp_path, tiny_onnx_path,
                                                tiny_nhwc_data):
    out = tmp_path / "keep"
    assert run_cli("build", tiny_onnx_path, "--calib", "random", "-o", out).exit_code == 0
    before = _contents(out)
    np.savez(tmp_path / "bad.npz", input=np.full((4, 3, 16, 16), np.inf, np.float32))
    assert_user_error(run_cli("build", tiny_onnx_path, "--calib", tmp_path / "bad.npz",
                              "-o", out), "NaN/Inf")
    assert _contents(out) == before
    assert not [p for p in tmp_path.iterdir() if "staging" in p.name]


def test_pixel_npu_sample_is_fully_delegated(sample_builds):
    placement = _manifest(sample_builds["onnx"])["placement"]
    assert placement["delegate"] == "google-tensor"
    assert placement["cpu_ops"] == 0 and len(placement["partitions"]) == 1


def test_ethos_u_bundle_carries_the_vela_compiled_model(run_cli, tmp_path):
    out = tmp_path / "u55"
    result = _build_sample(run_cli, "digits_cnn.keras", out, "--device", "ethos-u55-256",
                           evaluation=False)
    assert result.exit_code == 0, result.stderr
    manifest = _check_bundle(out, "tflite")
    compiled = manifest["compiled"]
    assert compiled["for"] == "ethos-u" and compiled["figures"]["accelerator"] == "ethos-u55-256"
    assert compiled["figures"]["inference_ms"] > 0
    from edgeopt.tflite_reader import read_tflite

    ops = read_tflite(out / compiled["file"]).op_histogram()
    assert "CUSTOM" in ops  # the ethos-u operator the driver runs


def test_keras_dynamic_batch_is_fixed_for_the_edge_tpu(run_cli, tmp_path):
    out = tmp_path / "coral"
    result = _build_sample(run_cli, "digits_cnn.keras", out, "--device", "coral-usb",
                           evaluation=False)
    assert result.exit_code == 0, result.stderr
    manifest = _manifest(out)
    assert manifest["conversion"]["batch_fixed_to_1"] is True
    assert any("fixed the dynamic batch" in note for note in manifest["notes"])
    assert manifest["placement"]["cpu_ops"] == 0
    assert manifest["inputs"][0]["shape"][0] == 1 and manifest["inputs"][0]["dtype"] == "uint8"


def test_require_full_delegation(run_cli, tmp_path):
    out = tmp_path / "strict"
    result = _build_sample(run_cli, "digits_cnn.keras", out, "--device", "host-cpu",
                           "--require-full-delegation", evaluation=False)
    assert_user_error(result, "would fall back to the CPU on host-cpu")
    assert "SOFTMAX" in result.stderr and not out.exists()


def test_calibration_core_beats_the_converter_on_the_sample(sample_builds, run_cli, tmp_path):
    """The default (--method auto) is edgeopt's calibration core; `converter` the baseline."""
    core = _manifest(sample_builds["onnx"])
    assert core["recipe"]["method"].startswith("auto")
    assert core["quantization"]["layer_report"]
    assert "Quantization error by layer" in (sample_builds["onnx"] / "report.html").read_text()
    out = tmp_path / "baseline"
    result = _build_sample(run_cli, "digits_cnn.onnx", out, "--device", "pixel-npu",
                           "--method", "converter")
    assert result.exit_code == 0, result.stderr
    baseline = _check_bundle(out, "tflite")
    assert baseline["recipe"]["method"].startswith("TFLite converter")
    assert baseline["quantization"]["layer_report"] == []   # the core did not run
    assert baseline["quantization"]["float_ops"] is not None  # ...but float ops are listed
    assert core["validation"]["sqnr_db"] >= baseline["validation"]["sqnr_db"]


def test_w4a8_build_for_the_cpu(run_cli, tmp_path):
    out = tmp_path / "w4"
    result = _build_sample(run_cli, "digits_cnn.keras", out, "--device", "host-cpu",
                           "--scheme", "w4a8")
    assert result.exit_code == 0, result.stderr
    manifest = _check_bundle(out, "tflite")
    assert manifest["recipe"]["scheme"] == "w4a8"
    assert manifest["accuracy"]["value"] >= manifest["accuracy"]["reference"] - 0.01
    assert "int4" in set(manifest["quantization"]["precision_per_layer"].values())


def test_scheme_the_device_cannot_run(run_cli, tmp_path, tiny_onnx_path):
    assert_user_error(run_cli("build", tiny_onnx_path, "--device", "coral-usb", "--scheme",
                              "fp16", "--calib", "random", "-o", tmp_path / "o"),
                      "full-integer models only")
    assert_user_error(run_cli("build", tiny_onnx_path, "--device", "pixel-npu", "--format",
                              "onnx", "--calib", "random", "-o", tmp_path / "o"),
                      "does not run .onnx")


def _odd_onnx(path, inputs, nodes, outputs):
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, "odd", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_models_the_data_path_cannot_feed_are_clear_errors(run_cli, tmp_path):
    from onnx import TensorProto, helper

    scalar = _odd_onnx(tmp_path / "scalar.onnx",
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
                        helper.make_tensor_value_info("k", TensorProto.FLOAT, [])],
                       [helper.make_node("Mul", ["x", "k"], ["y"])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    # a scalar input (silero-vad's sample rate) takes a value per sample: it builds
    built = run_cli("build", scalar, "--calib", "random", "-o", tmp_path / "scalar_out")
    assert built.exit_code == 0, built.stderr
    dynamic = _odd_onnx(tmp_path / "dynamic.onnx",
                        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T"])],
                        [helper.make_node("Relu", ["x"], ["y"])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "T"])])
    assert_user_error(run_cli("build", dynamic, "--calib", "random", "-o", tmp_path / "o"),
                      "--input-shape x:1")
    assert not (tmp_path / "o").exists()


def test_a_model_its_runtime_cannot_run_is_a_clear_error(run_cli, tmp_path):
    from onnx import TensorProto, helper

    bad = _odd_onnx(tmp_path / "reshape.onnx",
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
                    [helper.make_node("Constant", [], ["s"], value=helper.make_tensor(
                        "s", TensorProto.INT64, [2], [4, 4])),
                     helper.make_node("Reshape", ["x", "s"], ["y"])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])])
    assert_user_error(run_cli("build", bad, "--calib", "random", "-o", tmp_path / "o"),
                      "onnxruntime could not run the model")


def test_images_that_do_not_fit_are_said_in_the_manifest_and_on_the_terminal(run_cli, tmp_path):
    """Colour photos of another aspect ratio for a 1-channel model, and too few of them to
    validate on: the build goes on and says all three, with the counts."""
    from PIL import Image

    from conftest import tiny_onnx

    model = tiny_onnx(tmp_path / "gray.onnx", channels=1)
    rng = np.random.default_rng(0)
    for i in range(10):
        (tmp_path / "photos").mkdir(exist_ok=True)
        pixels = rng.integers(0, 256, (24, 40, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / "photos" / f"{i}.jpg")
    result = run_cli("build", model, "--device", "host-cpu", "--format", "onnx", "--calib",
                     tmp_path / "photos", "-o", tmp_path / "dist")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((tmp_path / "dist" / "manifest.json").read_text())
    notes = manifest["notes"]
    for fragment in ("10 of 10 images are colour", "10 of 10 images (40x24) have another "
                     "aspect ratio", "validated on only 2 sample(s)"):
        assert any(fragment in n for n in notes), notes
        assert fragment in result.stdout + result.stderr
    assert manifest["preprocessing"]["resize_mode"] == "cover, centre crop"


def test_python_snippet_without_inputs_prints_its_usage(sample_builds):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, str(sample_builds["onnx"] / "usage" / "predict.py")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.startswith("usage: python usage/predict.py")
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_class_folders_name_the_classes_in_the_manifest_and_the_snippet(run_cli, tmp_path):
    """Subfolders sorted by name are the label indices; predict.py prints their names."""
    import subprocess
    import sys

    from PIL import Image

    from conftest import tiny_onnx

    model = tiny_onnx(tmp_path / "pets.onnx", channels=3, size=16, classes=4)
    rng = np.random.default_rng(2)
    names = ["bird", "cat", "dog", "fish"]
    for name in reversed(names):  # creation order must not matter
        (tmp_path / "images" / name).mkdir(parents=True)
        for i in range(10):
            pixels = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "images" / name / f"{i}.png")
    out = tmp_path / "dist"
    result = run_cli("build", model, "--device", "host-cpu", "--format", "onnx", "--calib",
                     tmp_path / "images", "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    labels = _manifest(out)["labels"]
    assert labels["names"] == names and "sorted by name" in labels["source"]
    images = [str(tmp_path / "images" / n / "0.png") for n in names]
    printed = json.loads(subprocess.run([sys.executable, str(out / "usage" / "predict.py"),
                                         *images], capture_output=True, text=True,
                                        timeout=120, check=True).stdout)
    assert printed["labels"] == [names[i] for i in printed["argmax"]]
