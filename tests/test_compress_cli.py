"""`edgeopt compress` and `edgeopt build --prune`: real pruning, conversion, runtimes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import SAMPLES, assert_user_error

KERAS = SAMPLES / "digits_cnn.keras"
ONNX = SAMPLES / "digits_cnn.onnx"
CALIB = SAMPLES / "digits_calib.npz"
EVAL = SAMPLES / "digits_eval.npz"


def _json(result) -> dict:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_structured_pruning_halves_the_macs_and_writes_a_faster_tflite(run_cli, tmp_path):
    from edgeopt.runtime import TFLiteRunner

    out = tmp_path / "small.tflite"
    record = _json(run_cli("compress", KERAS, "--prune", "0.5", "--data", CALIB, "--eval", EVAL,
                           "-o", out, "--json"))
    assert record["macs"]["after"] <= 0.55 * record["macs"]["before"]
    assert record["parameters"]["after"] < record["parameters"]["before"]
    changed = [layer for layer in record["layers"] if layer["after"] < layer["before"]]
    assert changed, record["layers"]
    latency = record["latency"]
    assert latency["after_bytes"] == out.stat().st_size < latency["before_bytes"]
    assert latency["before_ms"] > 0 and latency["after_ms"] > 0
    data = np.load(EVAL)
    outputs = TFLiteRunner(out, ["image"]).run({"image": data["image"][:8]})[0]
    assert outputs.shape == (8, 10)
    validation = record["validation"]  # against the source on --eval, with its labels
    assert validation["samples"] == 400 and validation["data"] == str(EVAL)
    assert 0 <= validation["top1_agreement"] <= 1 and validation["reference"] > 0.9
    lossy = [w for w in record["warnings"] if "compression cost much" in w]
    assert bool(lossy) == (validation["sqnr_db"] < 15)  # said exactly when it cost that much


def test_a_compression_that_no_longer_follows_the_source_is_said():
    """ppocrv4_rec pruned 30% in one shot came out at 1.4 dB with exit 0 and no word."""
    from edgeopt.compress import _cost_warnings

    (warning,) = _cost_warnings({"sqnr_db": 1.4, "samples": 3})
    assert "1.4 dB" in warning and "3 samples" in warning and "--distill" in warning
    assert "--epochs" in _cost_warnings({"sqnr_db": 1.4, "samples": 3}, distilled=True)[0]
    assert _cost_warnings({"sqnr_db": 31.0, "samples": 3}) == []
    assert _cost_warnings(None) == []


def test_onnx_comes_back_as_onnx_with_its_node_names(run_cli, tmp_path):
    import onnx

    from edgeopt.runtime import OnnxRunner

    out = tmp_path / "small.onnx"
    record = _json(run_cli("compress", ONNX, "--prune", "0.5", "-o", out, "--json"))
    source, small = onnx.load(str(ONNX)), onnx.load(str(out))
    assert [n.name for n in small.graph.node] == [n.name for n in source.graph.node]
    assert record["output"]["size_bytes"] == out.stat().st_size < ONNX.stat().st_size
    assert "latency" not in record  # measured for .tflite outputs only
    x = np.load(EVAL)["image"][:4].transpose(0, 3, 1, 2)
    assert OnnxRunner(out).run({source.graph.input[0].name: x})[0].shape == (4, 10)


def test_two_of_four_sparsity_reports_size_and_latency(run_cli, tmp_path):
    out = tmp_path / "sparse.tflite"
    record = _json(run_cli("compress", KERAS, "--2:4", "-o", out, "--json"))
    assert record["pattern"] == "2:4" and record["sparsity"] == 0.5
    assert all(d == pytest.approx(0.5) for d in record["density"].values())
    tfl = record["tflite"]
    assert out.stat().st_size == min(tfl["dense_bytes"], tfl["sparse_bytes"])
    assert record["latency"]["after_ms"] > 0  # measured even when it is no faster


def test_label_free_distillation_records_the_accuracy_curve(run_cli, tmp_path):
    out = tmp_path / "small.keras"
    record = _json(run_cli("compress", KERAS, "--prune", "0.5", "--distill", "--data", CALIB,
                           "--epochs", "3", "-o", out, "--json"))
    distillation = record["distillation"]
    assert distillation["labels"] is False and distillation["samples"] == 200
    assert [h["epoch"] for h in distillation["history"]][0] == 0
    assert 2 <= len(distillation["history"]) <= 4
    assert all(0 <= h["agreement"] <= 1 for h in distillation["history"])
    from edgeopt.model import load_keras

    assert load_keras(out).count_params() == record["parameters"]["after"]


def test_build_prunes_before_quantizing_and_reports_it(run_cli, tmp_path):
    manifest = _json(run_cli("build", KERAS, "--calib", CALIB, "--eval", EVAL, "--prune", "0.5",
                             "-o", tmp_path / "dist", "--json"))
    compression = manifest["compression"]
    assert compression["macs"]["after"] <= 0.55 * compression["macs"]["before"]
    assert compression["size_bytes"]["after"] < compression["size_bytes"]["before"]
    # validated against the unpruned float model: the drop includes what pruning cost
    assert manifest["accuracy"]["reference"] == pytest.approx(0.9775)
    assert manifest["validation"]["samples"] == 400
    from test_build import _validate_schema

    _validate_schema(json.loads((tmp_path / "dist" / "manifest.json").read_text()))
    report = (tmp_path / "dist" / "report.html").read_text()
    assert '<section id="compression"' in report
    assert 'aria-label="channels per layer before and after pruning"' in report


def _dense_only(tmp_path):
    import keras

    inputs = keras.Input((8,), name="x")
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    path = tmp_path / "dense.keras"
    model.save(path)
    return path


@pytest.mark.parametrize("args, fragment", [
    (["--prune", "0"], "between 0 and 1"),
    (["--prune", "1.5"], "between 0 and 1"),
    (["--prune", "-0.2"], "between 0 and 1"),
    ([], "nothing to compress"),
    (["--2:4", "--prune", "0.7"], "exactly half"),
    (["--prune", "0.5", "--distill"], "--distill needs sample inputs"),
    (["--prune", "0.5", "--epochs", "0"], "--epochs"),
])
def test_bad_options_are_one_line_errors(run_cli, tmp_path, args, fragment):
    out = tmp_path / "out.tflite"
    assert_user_error(run_cli("compress", KERAS, *args, "-o", out), fragment)
    assert not out.exists()


def test_bad_outputs_and_inputs(run_cli, tmp_path, tiny_float_tflite):
    assert_user_error(run_cli("compress", KERAS, "--prune", "0.5", "-o", tmp_path / "x.txt"),
                      ".keras, .tflite or .onnx")
    assert_user_error(run_cli("compress", KERAS, "--prune", "0.5", "-o", tmp_path / "x.onnx"),
                      "needs an .onnx input")
    assert_user_error(run_cli("compress", tiny_float_tflite, "--prune", "0.5", "-o",
                              tmp_path / "x.tflite"), "trainable source")
    assert_user_error(run_cli("compress", _dense_only(tmp_path), "--prune", "0.5", "-o",
                              tmp_path / "x.tflite"), "no prunable layer")
    assert not list(tmp_path.glob("x.*"))


def test_data_of_the_wrong_shape(run_cli, tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, image=np.zeros((10, 12, 12, 3), "float32"))
    out = tmp_path / "out.keras"
    result = run_cli("compress", KERAS, "--prune", "0.5", "--distill", "--data", bad, "-o", out)
    assert_user_error(result, "shape")
    assert not out.exists()


def test_bad_prune_recipe(run_cli, tmp_path):
    recipe = tmp_path / "r.toml"
    for text, fragment in [("[prune]\n'conv.*' = 1.5\n", "ratios are numbers in [0, 1)"),
                           ("[other]\n", "needs a [prune] table"),
                           ("[prune]\n'(' = 0.5\n", "not a regex"),
                           ("not toml [", "not valid TOML")]:
        recipe.write_text(text)
        assert_user_error(run_cli("compress", KERAS, "--recipe", recipe, "-o",
                                  tmp_path / "o.keras"), fragment)


def test_recipe_sets_channel_ratios_per_layer(run_cli, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text("[prune]\n'conv2' = 0.5\n")
    record = _json(run_cli("compress", KERAS, "--recipe", recipe, "-o", tmp_path / "o.keras",
                           "--json"))
    layers = {layer["layer"]: layer for layer in record["layers"]}
    assert layers["conv2"]["after"] == layers["conv2"]["before"] // 2
    assert all(v["after"] == v["before"] for k, v in layers.items() if k != "conv2"), layers


@pytest.mark.parametrize("args, fragment", [
    (["--distill"], "--distill trains a pruned model"),
    (["--prune", "1"], "between 0 and 1"),
    (["--prune", "0.5", "--distill-epochs", "0"], "--distill-epochs': 0 is not in the range"),
])
def test_build_compression_options_are_checked_before_loading(run_cli, tmp_path, args,
                                                              fragment):
    out = tmp_path / "dist"
    assert_user_error(run_cli("build", KERAS, "--calib", CALIB, "-o", out, *args), fragment)
    assert not out.exists()


def _student(tmp_path, classes: int = 10):
    import keras

    inputs = keras.Input((32, 32, 1), name="image")
    x = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    path = tmp_path / f"student{classes}.keras"
    keras.Model(inputs, keras.layers.Dense(classes)(x)).save(path)
    return path


def test_a_user_given_student_learns_from_an_onnx_teacher(run_cli, tmp_path):
    out = tmp_path / "student_out.keras"
    record = _json(run_cli("compress", ONNX, "--student", _student(tmp_path), "--data", CALIB,
                           "--eval", EVAL, "--epochs", "2", "-o", out, "--json"))
    assert record["pattern"] == "student" and record["student"] == "student10.keras"
    history = record["distillation"]["history"]
    assert len(history) == 3 and record["validation"]["samples"] == 400
    assert out.is_file()


def test_student_errors(run_cli, tmp_path, tiny_float_tflite):
    out = tmp_path / "o.keras"
    assert_user_error(run_cli("compress", ONNX, "--student", _student(tmp_path, 7), "--data",
                              CALIB, "-o", out), "do not match the teacher's")
    assert_user_error(run_cli("compress", ONNX, "--student", tiny_float_tflite, "--data", CALIB,
                              "-o", out), "must be a .keras model")
    assert_user_error(run_cli("compress", ONNX, "--student", _student(tmp_path), "--prune",
                              "0.5", "-o", out), "leave out --prune")
    assert_user_error(run_cli("compress", ONNX, "--student", _student(tmp_path), "-o", out),
                      "needs sample inputs")
    assert not out.exists()


def test_teacher_with_dynamic_image_dims_takes_student_batches():
    """An NCHW teacher with dynamic H, W (PP-OCR's) and an NHWC student fixed by
    --input-shape: the student's batches are transposed, not refused."""
    from edgeopt.compression.teacher import input_permutation

    assert input_permutation((None, 48, 192, 3), (-1, 3, -1, -1)) == (0, 3, 1, 2)
    assert input_permutation((None, 32, 32, 1), (-1, 32, 32, 1)) is None


def test_a_fully_convolutional_keras_model_prunes_at_the_given_input_size(run_cli, tmp_path):
    """MTCNN's P-Net is saved with an open input size ([None, None, None, 3]); pruning counts
    MACs per layer, so --input-shape fixes the size (it was an internal error)."""
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((None, None, 3), name="image")
    x = keras.layers.PReLU(shared_axes=[1, 2])(keras.layers.Conv2D(16, 3, name="c1")(inp))
    x = keras.layers.PReLU(shared_axes=[1, 2])(keras.layers.Conv2D(16, 3, name="c2")(x))
    model_path, data = tmp_path / "fcn.keras", tmp_path / "x.npz"
    keras.Model(inp, keras.layers.Conv2D(2, 1, name="head")(x)).save(model_path)
    np.savez(data, image=np.random.default_rng(0).random((16, 24, 24, 3), dtype=np.float32))
    out = tmp_path / "small.keras"
    record = _json(run_cli("compress", model_path, "--prune", "0.3", "--data", data,
                           "--input-shape", "image:1,24,24,3", "-o", out, "--json"))
    assert record["macs"]["after"] < record["macs"]["before"] and out.exists()


def test_every_output_is_compared_with_the_source_by_name(run_cli, tmp_path):
    """MTCNN's P-Net (a score map and a box map) pruned 30% printed 0.0 dB / agreement 0 from
    its first output alone: each output is now compared, by name, and the worst is warned."""
    import keras

    from edgeopt.model import load_keras
    from edgeopt.validate import sqnr_db

    keras.utils.set_random_seed(1)
    inp = keras.Input((None, None, 3), name="image")
    x = keras.layers.PReLU(shared_axes=[1, 2])(keras.layers.Conv2D(16, 3, name="c1")(inp))
    x = keras.layers.PReLU(shared_axes=[1, 2])(keras.layers.Conv2D(16, 3, name="c2")(x))
    score = keras.layers.Softmax(name="score")(keras.layers.Conv2D(2, 1, name="s")(x))
    box = keras.layers.Conv2D(4, 1, name="box")(x)
    model_path, data = tmp_path / "pnet.keras", tmp_path / "x.npz"
    keras.Model(inp, [box, score]).save(model_path)
    images = np.random.default_rng(0).random((16, 24, 24, 3), dtype=np.float32)
    np.savez(data, image=images)
    out = tmp_path / "small.keras"
    result = run_cli("compress", model_path, "--prune", "0.5", "--data", data,
                     "--input-shape", "image:1,24,24,3", "-o", out, "--json")
    record = _json(result)
    rows = {row["name"]: row for row in record["validation"]["outputs"]}
    assert sorted(rows) == ["box", "score"]
    source, pruned = load_keras(model_path), load_keras(out)
    for name, want, got in zip(["box", "score"], source(images), pruned(images)):
        assert rows[name]["sqnr_db"] == pytest.approx(sqnr_db(np.asarray(want),
                                                              np.asarray(got)), abs=0.05)
    worst = min(rows.values(), key=lambda row: row["sqnr_db"])
    lossy = [w for w in record["warnings"] if "compression cost much" in w]
    assert bool(lossy) == (worst["sqnr_db"] < 15)
    assert all(f"output '{worst['name']}'" in w for w in lossy)


def test_the_summary_prints_each_output_and_no_zero_agreement_for_a_box_map():
    from edgeopt.compress import CompressResult, render_summary

    record = {"output": {"size_bytes": 2048}, "source": {"size_bytes": 4096},
              "pattern": "structured", "macs": {"before": 10, "after": 5},
              "parameters": {"before": 8, "after": 4}, "layers": [], "warnings": [],
              "validation": {"samples": 16, "top1_agreement": None, "sqnr_db": 6.6,
                             "metric": "sqnr_db", "outputs": [
                                 {"name": "box", "sqnr_db": 0.1, "cosine": 0.42},
                                 {"name": "score", "sqnr_db": 13.3, "cosine": 0.97,
                                  "top1_agreement": 0.96}]}}
    text = render_summary(CompressResult("small.keras", record))
    assert "top-1 agreement 0.000" not in text and "pooled output SQNR 6.6 dB" in text
    assert "box" in text and "SQNR 0.1 dB" in text and "top-1 agreement 0.960" in text
