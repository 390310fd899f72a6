"""`edgeopt sweep`'s search space: the file, its errors, `--dry-run` (nothing is built)."""

from __future__ import annotations

import json

import pytest

from conftest import SAMPLES, assert_user_error
from edgeopt.errors import ConfigError
from edgeopt.sweep_cache import candidate_key, read_payload
from edgeopt.sweep_space import load_space


def _space(tmp_path, text: str):
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return path


SAMPLE_SPACE = f"""
models = ["{SAMPLES / 'digits_cnn.keras'}"]
devices = ["pixel-npu", "host-cpu"]
schemes = ["default", "w8a8", "float"]
prune = [0, 0.5]
distill = [false, true]

[build]
calib = "{SAMPLES / 'digits_calib.npz'}"
"""


def test_the_space_expands_to_the_combinations_the_devices_take(tmp_path):
    space = load_space(_space(tmp_path, SAMPLE_SPACE))
    labels = [c.label for c in space.candidates]
    # pixel-npu: w8a8 only ('default' resolves to it: one candidate); host-cpu also float;
    # distillation only with pruning.
    assert len(labels) == len(set(labels)) == 3 + 2 * 3
    assert "digits_cnn.keras pixel-npu tflite w8a8 prune=0.5+distill" in labels
    assert "digits_cnn.keras host-cpu tflite float" in labels
    assert not any("pixel-npu tflite float" in label for label in labels)
    refused = dict(space.excluded)
    assert "full-integer" in refused["digits_cnn.keras pixel-npu tflite float"]
    config = space.config(space.candidates[0], "out")
    assert config.calib == str(SAMPLES / "digits_calib.npz") and config.output == "out"


def test_paths_are_relative_to_the_sweep_file(tmp_path, tiny_keras_path):
    folder = tmp_path / "spaces"
    folder.mkdir()
    (folder / "m.keras").write_bytes(tiny_keras_path.read_bytes())
    space = load_space(_space(folder, 'models = ["m.keras"]\ndevices = ["host-cpu"]\n'
                                      '[build]\ncalib = "random"\n'))
    assert space.candidates[0].model == str((folder / "m.keras").resolve())
    assert space.shared["calib"] == "random"


@pytest.mark.parametrize("text, fragment", [
    ('models = ["{m}"]\ndevices = ["host-cpu"]\nprecision = ["w8a8"]\n', "unknown key 'precision'"),
    ('models = ["{m}"]\ndevices = ["host-cpu"]\n[build]\nworkers = 2\n',
     "unknown key 'build.workers'"),
    ('models = ["{m}"]\ndevices = ["pixel-9000"]\n', "pixel-9000"),
    ('models = ["{m}"]\ndevices = []\n', "'devices' is empty"),
    ('devices = ["host-cpu"]\n', "'models' is missing"),
    ('models = ["{m}"]\ndevices = ["pixel-npu"]\nschemes = ["float"]\n', "no candidate"),
    ('models = ["nowhere.keras"]\ndevices = ["host-cpu"]\n', "not found"),
    ('models = ["{m}"]\ndevices = ["host-cpu"]\nprune = [1.5]\n', "prune"),
])
def test_a_bad_sweep_file_is_one_error_naming_the_file(run_cli, tmp_path, text, fragment):
    path = _space(tmp_path, text.format(m=SAMPLES / "digits_cnn.keras"))
    result = run_cli("sweep", path, "-o", tmp_path / "out", "--dry-run")
    assert_user_error(result, fragment)
    assert str(path) in result.stderr
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError):
        load_space(path)


def test_dry_run_lists_every_candidate_with_its_key(run_cli, tmp_path):
    path = _space(tmp_path, SAMPLE_SPACE)
    result = run_cli("sweep", path, "-o", tmp_path / "out", "--dry-run", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert len(record["candidates"]) == 9 and not any(c["built"] for c in record["candidates"])
    assert len({c["key"] for c in record["candidates"]}) == 9
    assert record["excluded"] and all(e["reason"] for e in record["excluded"])
    text = run_cli("sweep", path, "-o", tmp_path / "out", "--dry-run").stdout
    assert "9 candidates, 0 already built" in text
    assert not (tmp_path / "out").exists()


def test_the_key_follows_content_not_names(tmp_path):
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    a.write_bytes(b"same bytes")
    b.write_bytes(b"same bytes")
    assert read_payload(a).sha256 == read_payload(b).sha256
    key = candidate_key({"scheme": "w8a8"}, {"model": read_payload(a).sha256})
    assert key == candidate_key({"scheme": "w8a8"}, {"model": read_payload(b).sha256})
    b.write_bytes(b"other bytes")
    assert key != candidate_key({"scheme": "w8a8"}, {"model": read_payload(b).sha256})
    assert key != candidate_key({"scheme": "float"}, {"model": read_payload(a).sha256})
