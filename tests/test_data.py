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
