"""Fitting profiles to measurements: the fit recovers known factors, calibrate measures this
host with the real LiteRT interpreter and stores a profile that --device then uses, and
bench records measured on a phone feed the same fit."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_estimate import conv_chain

from edgeopt.cli.devices import calibrate_command
from edgeopt.devices.calibrate import CalibrationConfig, calibrate
from edgeopt.devices.estimator import estimate
from edgeopt.devices.fit import FitConfig, Sample, apply_values, fit_profile
from edgeopt.devices.profile import load_profile
from edgeopt.errors import ConfigError
from edgeopt.tflite_reader import read_tflite


@pytest.fixture
def user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "edgeopt" / "profiles"


def _samples(profile, blobs):
    return [Sample(f"m{i}", read_tflite(b),
                   estimate(read_tflite(b), profile, model=b).latency_s, model=b)
            for i, b in enumerate(blobs)]


def test_fit_recovers_known_efficiencies():
    base = load_profile("rpi5-cpu")
    truth = apply_values(base, {("eff", "xnnpack", "int8", "conv"): 1 / 0.21,
                                ("eff", "xnnpack", "int8", "stem"): 1 / 0.07}, "truth")
    blobs = [conv_chain("int8", size, channels, depth)
             for size, channels, depth in ((16, 8, 2), (32, 16, 3), (48, 32, 2), (64, 8, 4))]
    result = fit_profile(_samples(truth, blobs), base,
                         FitConfig(kinds=("conv", "stem"), fit_overhead=False,
                                   fit_invoke=False, fit_bandwidth=False, prior_weight=1e-6))
    assert 1 / result.values[("eff", "xnnpack", "int8", "conv")] == pytest.approx(0.21, rel=0.02)
    assert result.rms_error < 0.01 < _rms(result.prior_errors)


def _rms(errors):
    return (sum(e * e for e in errors.values()) / len(errors)) ** 0.5


def test_calibrate_host_writes_a_profile_that_host_cpu_then_uses(user_cache):
    config = CalibrationConfig("host-cpu", threads=1, quick=True, min_runs=3, min_time_s=0.01)
    result = calibrate(config)
    assert result.path == user_cache / "host-cpu.toml" and result.samples > 30
    assert result.fit.rms_error < _rms(result.fit.prior_errors)
    profile = load_profile("host-cpu")
    assert profile.path == str(result.path) and profile.description.endswith("[calibrated]")
    conv = profile.hardware.unit("xnnpack").efficiency["float32"]["conv"]
    assert conv.source.startswith("fitted by edgeopt devices calibrate host-cpu")
    assert profile.hardware.unit("xnnpack").threads.value == 1
    report = json.loads((user_cache / "host-cpu.fit.json").read_text())
    assert report["fit"]["samples"] == result.samples
    # Calibrating again starts from the shipped profile, not from the cached one.
    assert calibrate(config).path == result.path


def _record(path, device, model, median_ms):
    return {"schema_version": 1, "kind": "edgeopt.bench", "device": {"name": device},
            "model": {"path": str(model)}, "latency_ms": {"median": median_ms}}


def test_calibrate_from_bench_records_of_a_phone(user_cache, tmp_path):
    records = tmp_path / "measurements.jsonl"
    lines = []
    for i, size in enumerate((16, 32, 48, 64)):
        model = tmp_path / f"m{i}.tflite"
        model.write_bytes(conv_chain("int8", size))
        lines.append(json.dumps(_record(records, "pixel-cpu", model, 0.05 * size)))
    lines.append(json.dumps(_record(records, "rpi5-cpu", tmp_path / "m0.tflite", 9.0)))
    records.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(calibrate_command, ["pixel-cpu", "--records", str(records),
                                                    "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["samples"] == 4 and record["rms_error"] < record["prior_rms_error"]
    assert load_profile("pixel-cpu").path == str(user_cache / "pixel-cpu.toml")


def test_calibrating_a_phone_needs_its_measurements(user_cache, tmp_path):
    with pytest.raises(ConfigError, match="needs measurements taken on it"):
        calibrate(CalibrationConfig("pixel-cpu"))
    empty = tmp_path / "none.jsonl"
    empty.write_text("")
    with pytest.raises(ConfigError, match="no bench records of device 'pixel-cpu'"):
        calibrate(CalibrationConfig("pixel-cpu", records=empty))


def test_calibrate_to_a_file_says_how_to_use_it_and_changes_nothing_else(user_cache, tmp_path):
    """-o FILE outside the user cache: `--device host-cpu` keeps the shipped profile, and the
    message says so instead of claiming it now uses the file."""
    mine = tmp_path / "mine.toml"
    result = CliRunner().invoke(calibrate_command, ["host-cpu", "--quick", "-o", str(mine)])
    assert result.exit_code == 0, result.output
    assert "now uses it" not in result.output
    assert f"use it with `--device {mine}`" in result.output
    assert "`--device host-cpu` still uses the shipped one" in result.output
    assert load_profile("host-cpu").origin == "shipped"
    assert load_profile(str(mine)).description.endswith("[calibrated]")


def test_devices_marks_a_profile_from_the_user_cache(user_cache, tmp_path):
    from edgeopt.devices.listing import devices_table
    from edgeopt.devices.profile import all_profiles

    plain = devices_table([p.summary() for p in all_profiles()])
    assert "*" not in plain
    user_cache.mkdir(parents=True)
    shipped = load_profile("host-cpu").path
    (user_cache / "host-cpu.toml").write_text(open(shipped, encoding="utf-8").read())
    marked = devices_table([p.summary() for p in all_profiles()]).splitlines()
    assert [line.split()[0] for line in marked[1:] if line.split()[1] == "*"] == ["host-cpu"]
    assert marked[-1].startswith("* host-cpu: calibrated on this machine, "
                                 f"{user_cache / 'host-cpu.toml'}")


def test_readme_device_table_is_the_shipped_profiles(user_cache):
    """README shows what a fresh install prints, not a profile calibrated on this machine."""
    from conftest import ROOT
    from edgeopt.devices.listing import devices_table
    from edgeopt.devices.profile import all_profiles

    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = readme.index("    $ edgeopt devices") + 1
    shown = []
    for line in readme[start:]:
        if not line.strip():
            break
        shown.append(line[4:])
    assert shown == devices_table([p.summary() for p in all_profiles()]).splitlines()
