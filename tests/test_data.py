"""Calibration and evaluation data: formats, layouts, preprocessing, and bad data."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import SAMPLES
from edgeopt.data import Preprocessing, load_dataset, split_holdout
from edgeopt.errors import DataError
from edgeopt.model import TensorSpec

NHWC = (TensorSpec("image", (-1, 32, 32, 1), "float32"),)
NCHW = (TensorSpec("image", (-1, 1, 32, 32), "float32"),)


def test_npz_keyed_by_input_name_with_labels():
    data = load_dataset(str(SAMPLES / "digits_eval.npz"), NHWC)
    assert data.count == 400 and data.labels is not None and data.labels.dtype == np.int64
    assert data.arrays["image"].shape == (400, 32, 32, 1)


def test_nhwc_array_is_transposed_for_an_nchw_input():
    data = load_dataset(str(SAMPLES / "digits_calib.npz"), NCHW)
    assert data.arrays["image"].shape == (200, 1, 32, 32)
    assert any("NHWC to NCHW" in note for note in data.notes)
    plain = load_dataset(str(SAMPLES / "digits_calib.npz"), NHWC)
    np.testing.assert_array_equal(plain.arrays["image"][3, :, :, 0],
                                  data.arrays["image"][3, 0])


def test_single_array_npz_and_npy(tmp_path):
    array = np.random.default_rng(0).random((5, 32, 32, 1), dtype=np.float32)
    np.savez(tmp_path / "one.npz", whatever=array)
    np.save(tmp_path / "one.npy", array)
    for name in ("one.npz", "one.npy"):
        data = load_dataset(str(tmp_path / name), NHWC)
        np.testing.assert_array_equal(data.arrays["image"], array)


def test_image_folder_matches_the_arrays_it_came_from():
    data = load_dataset(str(SAMPLES / "images"), NHWC)
    assert data.count == 24 and data.labels is None
    assert data.preprocessing["mean"] == [0.0] and data.preprocessing["std"] == [255.0]
    calib = np.load(SAMPLES / "digits_calib.npz")["image"]
    # the PNGs are round(x * 255) of the first calibration images
    np.testing.assert_allclose(data.arrays["image"], calib[:24], atol=0.5 / 255 + 1e-6)


def test_image_folder_mean_std_and_nchw_layout():
    data = load_dataset(str(SAMPLES / "images"), NCHW, Preprocessing((127.5,), (127.5,)))
    assert data.arrays["image"].shape == (24, 1, 32, 32)
    assert data.arrays["image"].min() >= -1 and data.arrays["image"].max() <= 1
    assert data.preprocessing["layout"] == "NCHW"


def test_image_subfolders_are_labels(tmp_path):
    from PIL import Image

    for label in ("0", "1", "2"):
        (tmp_path / label).mkdir()
        Image.fromarray(np.full((8, 8), int(label) * 50, np.uint8)).save(tmp_path / label / "a.png")
    data = load_dataset(str(tmp_path), NHWC)
    assert data.labels.tolist() == [0, 1, 2]


def test_random_data_is_flagged():
    data = load_dataset("random", NCHW)
    assert not data.representative and data.arrays["image"].shape[1:] == (1, 32, 32)


def test_holdout_split_is_disjoint_and_deterministic():
    data = load_dataset(str(SAMPLES / "digits_eval.npz"), NHWC)
    calib, held = split_holdout(data, 0.2)
    assert calib.count + held.count == 400 and held.count == 80
    again = split_holdout(data, 0.2)[1]
    np.testing.assert_array_equal(held.arrays["image"], again.arrays["image"])


@pytest.mark.parametrize("array, message", [
    (np.zeros((4, 28, 28, 1), np.float32), "has shape (4, 28, 28, 1)"),
    (np.zeros((4, 32, 32, 1), np.uint8), "normalise it to floats"),
    (np.full((4, 32, 32, 1), np.nan, np.float32), "NaN/Inf"),
    (np.zeros((0, 32, 32, 1), np.float32), "empty"),
    (np.full((2, 32, 32, 1), "a"), "takes float32"),
])
def test_bad_arrays(tmp_path, array, message):
    np.savez(tmp_path / "bad.npz", image=array)
    with pytest.raises(DataError) as info:
        load_dataset(str(tmp_path / "bad.npz"), NHWC)
    assert message in str(info.value)


def test_bad_files(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    (tmp_path / "data.csv").write_text("1,2,3")
    np.savez(tmp_path / "pickled.npz", image=np.array([{"a": 1}], dtype=object))
    np.savez(tmp_path / "wrongkey.npz", x=np.zeros((2, 32, 32, 1), np.float32),
             y=np.zeros((2, 32, 32, 1), np.float32))
    cases = {"junk.npz": "not a readable", "data.csv": "expected a .npz",
             "pickled.npz": "allow_pickle=False", "wrongkey.npz": "no array for input",
             "missing.npz": "not found"}
    for name, message in cases.items():
        with pytest.raises(DataError, match=message):
            load_dataset(str(tmp_path / name), NHWC)


def test_labels_must_match(tmp_path):
    np.savez(tmp_path / "l.npz", image=np.zeros((3, 32, 32, 1), np.float32), labels=[1, 2])
    with pytest.raises(DataError, match="2 labels for 3 samples"):
        load_dataset(str(tmp_path / "l.npz"), NHWC)


# --- image folders that do not fit the model ---------------------------------------------

def _save(path, pixels) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(pixels, np.uint8)).save(path)


def test_colour_photos_for_a_one_channel_input_are_converted_and_said(tmp_path):
    red = np.zeros((32, 32, 3), np.uint8)
    red[..., 0] = 255
    _save(tmp_path / "red.png", red)
    _save(tmp_path / "gray_as_rgb.png", np.full((32, 32, 3), 100))  # no colour: nothing to say
    data = load_dataset(str(tmp_path), NHWC)
    # Pillow's L = 0.299 R + 0.587 G + 0.114 B (ITU-R 601-2), rounded
    np.testing.assert_allclose(data.arrays["image"][1], 76 / 255, atol=1e-6)
    np.testing.assert_allclose(data.arrays["image"][0], 100 / 255, atol=1e-6)
    [warning] = data.warnings
    assert "1 of 2 images are colour" in warning and "grayscale" in warning
    assert data.preprocessing["color"] == "grayscale"


def test_grayscale_images_for_an_rgb_input_are_said(tmp_path):
    _save(tmp_path / "g.png", np.full((16, 16), 7))
    data = load_dataset(str(tmp_path), (TensorSpec("image", (-1, 16, 16, 3), "float32"),))
    assert data.arrays["image"].shape == (1, 16, 16, 3)
    assert any("grayscale but input 'image' takes RGB" in w for w in data.warnings)


def test_another_aspect_ratio_is_centre_cropped_and_said(tmp_path):
    wide = np.zeros((32, 64), np.uint8)   # 64 wide, 32 high: black edges, white centre
    wide[:, 16:48] = 255
    _save(tmp_path / "wide.png", wide)
    data = load_dataset(str(tmp_path), NHWC)
    # stretched, half the pixels would be black; the centre crop keeps only the white square
    np.testing.assert_allclose(data.arrays["image"], 1.0)
    assert data.preprocessing["resize_mode"] == "cover, centre crop"
    [warning] = data.warnings
    assert "1 of 1 images (64x32) have another aspect ratio" in warning
    assert "centre-cropped" in warning


def test_images_smaller_than_the_input_are_upscaled_and_said(tmp_path):
    _save(tmp_path / "a.png", np.full((8, 8), 255))
    _save(tmp_path / "b.png", np.full((32, 32), 255))
    data = load_dataset(str(tmp_path), NHWC)
    [warning] = data.warnings
    assert "1 of 2 images are smaller than input 'image' (32x32; smallest 8x8)" in warning


def test_images_that_fit_raise_no_warning():
    assert load_dataset(str(SAMPLES / "images"), NHWC).warnings == ()


def test_few_evaluation_samples_are_a_warning_with_the_count(tmp_path):
    from edgeopt.data import FEW_EVAL_SAMPLES, DataSpec, load_data

    for i in range(10):
        _save(tmp_path / f"{i}.png", np.full((32, 32), i * 20))
    calib, evaluation = load_data(DataSpec(str(tmp_path)), NHWC)
    assert (calib.count, evaluation.count) == (8, 2)
    [warning] = evaluation.warnings
    assert "validated on only 2 sample(s)" in warning and str(FEW_EVAL_SAMPLES) in warning
    _, enough = load_data(DataSpec(str(SAMPLES / "digits_eval.npz")), NHWC)
    assert enough.count == 80 and enough.warnings == ()


def test_class_order_is_by_name_or_by_number(tmp_path):
    for name in ("zebra", "Ant", "cat"):
        _save(tmp_path / "named" / name / "x.png", np.zeros((8, 8)))
    for name in ("10", "2", "0"):
        _save(tmp_path / "numbered" / name / "x.png", np.zeros((8, 8)))
    named = load_dataset(str(tmp_path / "named"), NHWC)
    assert named.class_names == ("Ant", "cat", "zebra") and named.labels.tolist() == [0, 1, 2]
    numbered = load_dataset(str(tmp_path / "numbered"), NHWC)
    assert numbered.labels.tolist() == [0, 2, 10] and numbered.class_names[10] == "10"


def test_one_set_of_defaults():
    """Every command's --mean/--std fall back to the same defaults as Preprocessing()."""
    from edgeopt.data import DataSpec

    assert DataSpec("x").preprocessing == Preprocessing() == Preprocessing((0.0,), (255.0,))
    assert DataSpec("x", mean=(127.5,)).preprocessing == Preprocessing((127.5,), (255.0,))


@pytest.mark.parametrize("command", [
    ("build", "--device", "pixel-npu", "--calib", "{bad}", "-o", "{out}"),
    ("build", "--calib", str(SAMPLES / "digits_calib.npz"), "--eval", "{bad}", "-o", "{out}"),
    ("quantize", "--calib", "{bad}", "-o", "{out}.tflite"),
    ("convert", "--calib", "{bad}", "-o", "{out}.tflite"),
    ("compress", "--prune", "0.5", "--data", "{bad}", "-o", "{out}.tflite"),
])
def test_data_of_the_wrong_shape_fails_before_any_conversion(run_cli, tmp_path, command):
    """The sample with 28x28 arrays: refused when the data is read, before converting."""
    from conftest import assert_user_error

    bad = tmp_path / "wrong.npz"
    np.savez(bad, image=np.zeros((20, 28, 28, 1), np.float32))
    args = [a.format(bad=bad, out=tmp_path / "out") for a in command]
    result = run_cli(args[0], SAMPLES / "digits_cnn.onnx", *args[1:])
    assert_user_error(result, "has shape (20, 28, 28, 1) but the model takes (N, 1, 32, 32)")
    for step in ("converting", "running the float", "quantizing", "pruning", "reading"):
        assert step not in result.stderr, result.stderr
    assert not list(tmp_path.glob("out*"))
