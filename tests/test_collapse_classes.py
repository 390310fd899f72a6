"""Issue 20's collapse classes on tiny models built here, through `edgeopt build --device
pixel-npu` (the TFLite converter, ai-edge-quantizer and LiteRT; slow). The zoo models that
showed each class: openWakeWord's melspectrogram (a log-power front end whose int8 power
spectrum underflows to the log's floor: rescued with a float tail), MediaPipe's hand
landmarks (the wrist's z, float32 round-off beside +-200: not judged) and its hand
presence score on images without a hand (a sigmoid the data does not move by one int8
step: not judged). The detector whose class scores collapse still fails:
tests/test_validate_build.py and tests/test_validate.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import assert_user_error

pytestmark = pytest.mark.slow

BANDS = 8


def _log_power_tflite(path) -> None:
    """audio [1, 64] -> a DFT-like MatMul -> power -> mel bank -> 10 log10 (floor 1e-10)
    -> max(db, max - 80) -> [1, 1, 1, BANDS]: openWakeWord's melspectrogram in small. The
    bands' power spans 70 dB (speech is loud in a few bands): one int8 scale for the mel
    power rounds the quiet bands to 0, and their log to the floor."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    dft = rng.normal(size=(64, 64)).astype(np.float32) / 8
    bank = np.abs(rng.normal(size=(64, BANDS))) * 10.0 ** -np.arange(BANDS)
    bank = bank.astype(np.float32)

    @tf.function(input_signature=[tf.TensorSpec([1, 64], tf.float32, name="audio")])
    def front_end(audio):
        spectrum = tf.matmul(audio, dft)
        mel = tf.maximum(tf.matmul(spectrum * spectrum, bank), 1e-10)
        db = 10.0 * tf.math.log(mel) / np.log(10.0)
        db = tf.maximum(db, tf.reduce_max(db) - 80.0)
        return {"db": tf.reshape(db, [1, 1, 1, BANDS])}

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [front_end.get_concrete_function()], front_end)
    path.write_bytes(converter.convert())


def _audio(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, 64)) * rng.uniform(0.5, 2, (n, 1))).astype(np.float32)


def _manifest(out) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_a_log_power_front_end_that_underflows_in_int8_is_rescued_with_a_float_tail(
        run_cli, tmp_path):
    model, data, out = tmp_path / "mel.tflite", tmp_path / "audio.npz", tmp_path / "dist"
    _log_power_tflite(model)
    np.savez(data, audio=_audio(48, 1))
    result = run_cli("build", model, "--device", "pixel-npu", "--calib", data, "-o", out)
    assert result.exit_code == 0, result.stderr
    manifest = _manifest(out)
    rescue = manifest["quantization"]["rescue"]
    assert rescue["precision"] == "float" and rescue["ops"]
    assert rescue["sqnr_db_before"] is not None and rescue["sqnr_db_before"] < 10
    islands = {f["node"]: f["reason"] for f in manifest["quantization"]["float_ops"]}
    assert set(rescue["ops"]) <= set(islands)
    assert all("collapsed (or nearly) in int8" in islands[t] for t in rescue["ops"])
    # the tail stops before the DFT, which stays int8 (two FULLY_CONNECTED in the graph)
    assert [f["op"] for f in manifest["quantization"]["float_ops"]].count("FULLY_CONNECTED") == 1
    assert not manifest["validation"]["collapsed"]
    assert any("kept float" in n and "runs no int16" in n for n in manifest["notes"])


def _images(count: int = 40) -> np.ndarray:
    return np.random.default_rng(2).random((count, 16, 16, 3), dtype=np.float32)


def _landmark_keras(path, images: np.ndarray, presence_gain: float,
                    presence_bias: float | None) -> None:
    """image -> conv -> two heads: 63 landmark values (+-200; channel 2 scaled to ~1e-6, the
    wrist's z) and a sigmoid presence score (weights times `presence_gain`; bias
    `presence_bias`, or None: centred on `images`, so the score moves over (0, 1))."""
    import keras

    keras.utils.set_random_seed(0)
    image = keras.Input((16, 16, 3), name="image")
    x = keras.layers.Conv2D(8, 3, activation="relu")(image)
    x = keras.layers.GlobalAveragePooling2D()(x)
    head = keras.layers.Dense(63, name="landmarks")
    landmarks = head(x)
    presence = keras.layers.Dense(1, activation="sigmoid", name="presence")(x)
    model = keras.Model(image, [landmarks, presence])
    kernel, bias = head.get_weights()
    kernel *= 400.0
    kernel[:, 2] *= 1e-8
    bias[2] = 0.0
    head.set_weights([kernel, bias])
    weights = model.get_layer("presence").get_weights()[0] * presence_gain
    if presence_bias is None:
        features = keras.Model(image, x).predict(images, verbose=0)
        presence_bias = -float(np.mean(features @ weights))
    model.get_layer("presence").set_weights([weights, np.array([presence_bias], np.float32)])
    model.save(path)


def test_round_off_and_an_unexercised_score_are_named_not_validated_and_not_collapses(
        run_cli, tmp_path):
    model, data, out = tmp_path / "hand.keras", tmp_path / "images.npz", tmp_path / "dist"
    _landmark_keras(model, _images(), 0.01, -12.0)  # sigmoid(-12) = 6e-6: never a hand
    np.savez(data, image=_images())
    result = run_cli("build", model, "--device", "pixel-npu", "--calib", data, "-o", out)
    assert result.exit_code == 0, result.stderr
    v = _manifest(out)["validation"]
    assert not v["collapsed"]
    landmarks, presence = v["outputs"]
    zero = [g for g in landmarks["groups"] if (g["start"], g["end"]) == (2, 3)]
    assert zero and zero[0]["collapsed"] is None
    assert "float32 round-off" in zero[0]["unjudged"]
    assert presence["collapsed"] is None
    assert "not exercised by the held-out data" in presence["unjudged"]
    assert "LOGISTIC" in presence["unjudged"]
    assert len(v["unjudged"]) == 2
    notes = _manifest(out)["notes"]
    assert sum(n.startswith("not validated: ") for n in notes) == 2
    assert "not judged" in (out / "report.html").read_text()


def test_a_score_the_data_does_move_is_judged(run_cli, tmp_path):
    model, data, out = tmp_path / "hand.keras", tmp_path / "images.npz", tmp_path / "dist"
    _landmark_keras(model, _images(), 30.0, None)
    np.savez(data, image=_images())
    result = run_cli("build", model, "--device", "pixel-npu", "--calib", data, "-o", out)
    assert result.exit_code == 0, result.stderr
    presence = _manifest(out)["validation"]["outputs"][1]
    assert presence["unjudged"] is None and presence["collapsed"] is None


def test_a_collapse_on_a_device_that_runs_no_float_op_is_one_error_naming_the_output(
        run_cli, tmp_path):
    """The Edge TPU compiler takes full-integer models only: the float-tail rescue would
    write a model the device refuses ("quantize to full integer first", said of a w8a8
    build), so the build fails on the collapse itself, naming the output and the options."""
    model, data, out = tmp_path / "mel.tflite", tmp_path / "audio.npz", tmp_path / "dist"
    _log_power_tflite(model)
    np.savez(data, audio=_audio(48, 1))
    result = run_cli("build", model, "--device", "coral-usb", "--calib", data, "-o", out)
    assert_user_error(result, "--accept-collapsed")
    assert "collapse floor" in result.stderr  # the output named, with its SQNR
    assert "full integer first" not in result.stderr
    assert not out.exists()
