"""Config files: ./edgeopt.toml or --config supply every command's defaults, flags win,
paths are relative to the file, bad keys name the key and the file, --dry-run says where
each value came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import SAMPLES, assert_user_error


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A working folder with a model and data one level down, and no config yet."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "net.onnx").write_bytes(b"not read by --dry-run")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _dry_run(run_cli, *args) -> dict:
    result = run_cli(*args, "--dry-run", "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_edgeopt_toml_in_the_working_folder_supplies_build_defaults(run_cli, project):
    (project / "edgeopt.toml").write_text(
        '[build]\nmodel = "models/net.onnx"\ndevice = "coral-usb"\ncalib = "random"\n'
        "mean = 127.5\nstd = [127.5]\naccuracy-budget = 1.5\n")
    config = _dry_run(run_cli, "build", "--device", "pixel-npu")
    assert config["model"] == str(project / "models" / "net.onnx")
    assert config["device"] == "pixel-npu" and config["calib"] == "random"
    assert config["mean"] == [127.5] and config["accuracy_budget"] == 1.5
    sources = config["sources"]
    file = str(project / "edgeopt.toml")
    assert sources["device"] == "command line" and sources["model"] == file
    assert sources["accuracy_budget"] == file and sources["seed"] == "default"
    assert config["config_file"] == file


def test_config_flag_replaces_the_local_file_and_paths_follow_the_file(run_cli, project):
    (project / "edgeopt.toml").write_text('model = "models/net.onnx"\ndevice = "coral-usb"\n')
    other = project / "conf" / "ci.toml"
    other.parent.mkdir()
    other.write_text('[build]\nmodel = "../models/net.onnx"\noutput = "../out"\n'
                     'device = "profiles/board.toml"\nrecipe = "w8a8"\n')
    for args in (("build", "--config", other), ("--config", other, "build")):
        config = _dry_run(run_cli, *args)
        assert config["model"] == str(project / "models" / "net.onnx")
        assert config["output"] == str(project / "out")
        assert config["device"] == str(other.parent / "profiles" / "board.toml")
        assert config["recipe"] == "w8a8"  # a built-in name, not a path


def test_text_dry_run_is_toml_with_the_source_of_each_value(run_cli, project):
    (project / "edgeopt.toml").write_text('[build]\nmodel = "models/net.onnx"\nseed = 3\n')
    result = run_cli("build", "--device", "pixel-npu,all", "--dry-run")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"# config file: {project / 'edgeopt.toml'}" in lines
    assert any(ln.startswith("# builds for pixel-npu; also estimates on: coral-devboard")
               for ln in lines)
    assert 'model = "models/net.onnx"  # ' + str(project / "edgeopt.toml") in lines
    assert 'device = "pixel-npu,all"  # command line' in lines
    assert 'format = "tflite"  # default' in lines
    assert tomllib.loads(result.stdout)["build"]["seed"] == 3


def test_a_bundle_config_rebuilds_from_any_folder(run_cli, project, monkeypatch):
    from dataclasses import asdict

    from edgeopt.config import BuildConfig

    config = BuildConfig(model=str(SAMPLES / "digits_cnn.onnx"), device="pixel-npu",
                         output=str(project / "dist"), calib=str(SAMPLES / "digits_calib.npz"),
                         mean=(0.5,), input_shapes=("image:1,1,32,32",), seed=4,
                         eval_fraction=0.25, labels=str(SAMPLES / "labels.txt"),
                         prune=0.5, prune_recipe=str(project / "prune.toml"))
    file = project / "dist" / "edgeopt.toml"
    file.parent.mkdir()
    file.write_text(config.to_toml(file.parent))
    monkeypatch.chdir(SAMPLES)
    resolved = _dry_run(run_cli, "build", "--config", file)
    assert {k: resolved[k] for k in asdict(config)} == json.loads(json.dumps(asdict(config)))
    assert resolved["sources"]["seed"] == str(file) and resolved["sources"]["scheme"] == "default"


@pytest.mark.parametrize("text, fragment", [
    ('[build]\nmodel = "m.onnx"\nbogus = 1\n', "unknown key 'bogus' in [build]"),
    ('[build]\nmodel = "m.onnx"\nseed = "three"\n', "[build] seed must be a number"),
    ('[build]\nmodel = "m.onnx"\nseed = 1.5\n', "[build] seed must be an integer"),
    ('[build]\nmodel = "m.onnx"\nmean = ["a"]\n', "[build] mean: invalid value"),
    ('[build]\nmodel = "m.onnx"\ndistill = "yes"\n', "[build] distill must be true or false"),
    ('[build]\nmodel = 3\n', "[build] model: invalid value"),
    ('[bench]\nrunz = 3\n', "unknown key 'runz' in [bench]"),
    ('[bench]\nruns = "many"\n', "[bench] runs"),
    ('[devices.calibrate]\nnope = 1\n', "unknown key 'nope' in [devices.calibrate]"),
    ('[teleport]\nx = 1\n', "unknown table [teleport]"),
    ("[build\n", "cannot read config file"),
])
def test_bad_config_files_name_the_key_and_the_file(run_cli, project, text, fragment):
    (project / "edgeopt.toml").write_text(text)
    result = run_cli("build", "--dry-run")
    assert_user_error(result, fragment)
    assert "edgeopt.toml" in result.stderr


def test_other_commands_take_their_table_as_defaults(run_cli, project):
    recipes = project / "conf" / "recipes"
    recipes.mkdir(parents=True)
    recipe = (SAMPLES.parent / "calibration" / "recipes" / "w4-dense-block32.toml").read_text()
    (recipes / "mine.toml").write_text(recipe.replace('"w4-dense-block32"', '"mine"'))
    (project / "conf" / "edgeopt.toml").write_text(
        '[quantize]\ncalib = "data.npz"\noutput = "q.onnx"\nmethod = "mse"\n'
        'recipe = "recipes/mine.toml"\n')
    args = ("--config", project / "conf" / "edgeopt.toml", "quantize", "models/net.onnx")
    config = _dry_run(run_cli, *args)  # --calib and -o are required: the file gave them
    assert config["method"] == "mse" and config["recipe"] == "mine"
    assert config["scheme"] == "w4afp32"
    file = str(project / "conf" / "edgeopt.toml")
    assert config["sources"]["method"] == file and config["sources"]["scheme"] == "default"
    assert config["sources"]["model"] == "command line"
    assert _dry_run(run_cli, *args, "--method", "percentile")["method"] == "percentile"


def test_device_lists(project):
    from edgeopt.config import device_names, primary_device
    from edgeopt.devices.profile import profile_names

    assert device_names("pixel-npu") == ("pixel-npu",)
    assert device_names("coral-usb, pixel-npu") == ("coral-usb", "pixel-npu")
    everything = device_names("all")
    assert everything[0] == "host-cpu" and set(everything) == set(profile_names())
    assert device_names("pixel-npu,all")[0] == "pixel-npu" and len(everything) == len(
        device_names("pixel-npu,all"))
    assert primary_device("all,rpi5-cpu") == "rpi5-cpu"


def test_unknown_devices_in_a_list_fail_before_the_build(run_cli, project):
    assert_user_error(run_cli("build", "models/net.onnx", "--device", "pixel-npu,toaster",
                              "--calib", "random"), "unknown device 'toaster'")


def _complete(words: str) -> list[str]:
    env = {**os.environ, "_EDGEOPT_COMPLETE": "bash_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
    out = subprocess.run([sys.executable, "-m", "edgeopt.cli"], env=env, capture_output=True,
                         text=True, timeout=60)
    return [line.split(",", 1)[1] for line in out.stdout.splitlines() if "," in line]


def test_completion_offers_device_names():
    assert {"pixel-npu", "pixel-gpu", "pixel-cpu"} <= set(_complete("edgeopt build m --device pix"))
    assert "pixel-npu,coral-usb" in _complete("edgeopt inspect m -d pixel-npu,cor")
    assert "all" in _complete("edgeopt build m --device ")


def test_bench_runs_with_the_file_defaults(run_cli, project, tiny_float_tflite):
    (project / "edgeopt.toml").write_text(
        "[bench]\nruns = 7\nmin-secs = 0\nwarmup = 1\nno-power = true\n")
    result = run_cli("bench", tiny_float_tflite, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["runs"] == 7
    result = run_cli("bench", tiny_float_tflite, "--runs", "3", "--json")
    assert json.loads(result.stdout)["runs"] == 3


@pytest.mark.parametrize("text, fragment", [
    ('[build]\nbogus = 1\n', "unknown key 'bogus' in [build]"),
    ('[build]\nseed = "three"\n', "[build] seed must be a number"),
    ('[inspect]\ndevice = 3\n', "[inspect] device: invalid value"),
    ('[estimate]\ntop = -1\n', "[estimate] top"),
])
def test_every_command_checks_the_whole_file(run_cli, project, tiny_onnx_path, text, fragment):
    """`--config F inspect` used to ignore unknown keys and wrong types in [build]."""
    config = project / "conf.toml"
    config.write_text(text)
    assert_user_error(run_cli("--config", config, "inspect", tiny_onnx_path), fragment)
    assert str(config) in run_cli("--config", config, "inspect", tiny_onnx_path).stderr


def test_paths_in_any_table_are_relative_to_the_file(run_cli, project, tiny_keras_path):
    """[compress] data and student were read relative to the current folder, while
    [build] calib was relative to the file: the file's type of value now decides."""
    conf = project / "conf"
    conf.mkdir()
    (conf / "edgeopt.toml").write_text('[compress]\ndata = "missing.npz"\nprune = 0.5\n'
                                       'output = "small.tflite"\n')
    result = run_cli("--config", conf / "edgeopt.toml", "compress", tiny_keras_path)
    assert_user_error(result, str(conf / "missing.npz"))
    assert not (project / "small.tflite").exists() and not (conf / "small.tflite").exists()


@pytest.mark.parametrize("make, fragment", [
    (lambda p: Path("/dev/zero"), "is not a regular file"),
    (lambda p: (os.mkfifo(p / "fifo"), p / "fifo")[1], "is not a regular file"),
    (lambda p: (p / "big.toml").write_text("# " + "x" * (5 << 20)) and p / "big.toml",
     "over the"),
    (lambda p: (p / "deep.toml").write_text("x = " + "[" * 50000 + "]" * 50000)
     and p / "deep.toml", "cannot read config file"),
])
def test_config_files_are_small_regular_files(run_cli, project, make, fragment):
    """`--config /dev/zero` read 8 GiB, a FIFO blocked, deep nesting crashed (issue 14),
    also after a library raised the recursion limit (TensorFlow's importers do)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200_000)
    try:
        result = run_cli("--config", make(project), "devices")
    finally:
        sys.setrecursionlimit(limit)
    assert_user_error(result, fragment)
