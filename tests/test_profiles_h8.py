"""Profiles claim what the data supports (issue 15, items 2 and 4): one profile per SoC the
corpus covers, priors say so, the numbers the issue found wrong are fixed or marked
assumed (intervals: tests/test_devices_intervals.py), energy says what it is, and the
new stand-in networks have their published sizes."""

from __future__ import annotations

import numpy as np
import pytest
from test_estimate import conv_chain

from edgeopt.devices.corpus import load_corpus
from edgeopt.devices.corpus_fit import prior_profile, prior_text
from edgeopt.devices.corpus_map import PROFILE_ROWS, profile_rows
from edgeopt.devices.estimator import estimate
from edgeopt.devices.fitted import PRIOR_BASIS
from edgeopt.devices.profile import all_profiles, load_profile, profile_names
from edgeopt.devices.render import render_comparison, render_estimate
from edgeopt.devices.result import ENERGY_BASIS, ENERGY_INTERVAL
from edgeopt.devices.standins import StandIn, keras_model, standin_for
from edgeopt.errors import DeviceError
from edgeopt.tflite_reader import read_tflite


def test_every_mapped_profile_ships_and_has_rows_of_one_chip_family():
    rows = load_corpus()
    for name, wanted in PROFILE_ROWS.items():
        assert name in profile_names()
        mine = profile_rows(rows, name)
        assert mine, name
        assert {r.soc for r in mine} <= set(wanted.socs)
    socs = {soc for f in PROFILE_ROWS.values() for soc in f.socs}
    assert {"Snapdragon 8 Gen 2", "Snapdragon 8 Gen 3", "Snapdragon 8 Elite",
            "Snapdragon 845", "Snapdragon 855", "Broadcom BCM2711",
            "Broadcom BCM2712"} <= socs


def test_profiles_without_rows_are_priors_and_say_so():
    for profile in all_profiles():
        if profile.name not in PROFILE_ROWS:
            assert profile.fit is None, profile.name
            assert profile.basis == PRIOR_BASIS
            assert profile.summary()["basis"] == PRIOR_BASIS
    # the Tensor G3 profiles have no public row: Pixel 3 / 4 rows have their own profiles
    assert {"pixel-cpu", "pixel-gpu", "pixel-npu"}.isdisjoint(PROFILE_ROWS)
    assert {"pixel3-cpu", "pixel3-gpu", "pixel4-cpu", "pixel4-gpu"} <= set(PROFILE_ROWS)


def test_snapdragon_onnx_runtime_rows_are_not_fitted_to_the_litert_profile():
    rows = profile_rows(load_corpus(), "snapdragon-npu")
    assert rows and {r.runtime_detail for r in rows} <= {"tflite", "qnn_dlc",
                                                         "qnn_context_binary"}


def test_the_numbers_the_issue_found_wrong_are_fixed_or_marked_assumed():
    snap = prior_profile("snapdragon-npu").tables()
    assert snap.units["npu"].peak_ops["int8"].source.startswith("assumed")
    assert snap.units["npu"].invoke_overhead.source.startswith("assumed")
    gpu = load_profile("pixel-gpu").tables().units["gpu"].peak_ops["float16"]
    assert "MP7" in gpu.source and gpu.value == pytest.approx(7 * 890e6 * 128, rel=0.01)
    npu = load_profile("pixel-npu").tables().units["npu"].peak_ops["int8"]
    assert npu.source.startswith("assumed, invented")
    for profile in all_profiles():
        for unit in profile.tables().units.values():
            for figure in unit.energy_per_op.values():
                if "Horowitz" in figure.source:
                    assert "assumed" in figure.source, (profile.name, figure.source)


def test_prior_invoke_overheads_stay_below_the_smallest_measured_model():
    smallest = min(r.latency_ms for r in profile_rows(load_corpus(), "snapdragon-npu")
                   if r.model == "squeezenet1_1" and r.precision == "int8")
    for name in ("snapdragon-npu", "snapdragon-8gen2-npu", "snapdragon-8elite-npu"):
        hw = prior_profile(name).tables()
        assert sum(u.invoke_overhead.value for u in hw.units.values()) < smallest / 1e3


def test_estimates_state_energy_as_a_model_with_an_interval_and_print_with_their_basis():
    blob = conv_chain("int8", 16, 8, 2)
    fitted = load_profile("coral-usb")
    prior = load_profile("pixel-npu")
    est = estimate(read_tflite(blob), fitted, model=blob)
    record = est.to_json()
    assert record["energy_basis"] == ENERGY_BASIS and "not measured" in ENERGY_BASIS
    assert record["energy_interval_mj"] == pytest.approx(
        [record["energy_mj"] * f for f in ENERGY_INTERVAL], rel=1e-3)
    assert est.manifest_json()["energy_interval_mj"] == record["energy_interval_mj"]
    text = render_estimate(est)
    assert fitted.basis in text and "(modelled)" in text
    prior_est = estimate(read_tflite(blob), prior, model=blob)
    assert "~" in render_estimate(prior_est).splitlines()[0]
    table = render_comparison([("coral-usb", est, ""), ("pixel-npu", prior_est, "")])
    assert "prior, unvalidated" in table and "fit " in table


@pytest.mark.parametrize("builder, params", [
    # trainable parameters of the published definitions at 1000 classes
    ("ResNet18", 11_689_512), ("ResNet34", 21_797_672), ("WideResNet50", 68_883_240),
    ("SqueezeNet11", 1_235_496), ("ViTTiny16", 5_717_416),
    # torchvision's shufflenet_v2_x0_5, regnet_x_3_2gf, regnet_y_800mf, googlenet
    ("ShuffleNetV2x05", 1_366_792), ("RegNetX3_2GF", 15_296_552),
    ("RegNetY800MF", 6_432_512), ("GoogLeNet", 6_624_904)])
def test_standin_networks_have_the_published_parameter_counts(builder, params):
    model = keras_model(StandIn("x", builder, None, 224, 224, 1000, "float"))
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert trainable == params


def test_new_standins_are_read_from_the_corpus_rows():
    rows = load_corpus()
    for model, builder in (("resnet18", "ResNet18"), ("resnet34", "ResNet34"),
                           ("vit_tiny", "ViTTiny16"), ("squeezenet1_1", "SqueezeNet11"),
                           ("shufflenet_v2", "ShuffleNetV2x05"), ("regnet", "RegNetX3_2GF"),
                           ("regnet_y_800mf", "RegNetY800MF"), ("googlenet", "GoogLeNet")):
        row = next(r for r in rows if r.model == model and r.precision in ("fp16", "int8"))
        assert standin_for(row).builder == builder


def test_a_fit_table_with_a_zero_overhead_loads_and_a_zero_efficiency_does_not(tmp_path):
    # NNLS puts an unneeded overhead at exactly 0 (the Snapdragon 8 Elite fit did); the
    # loader rejected it and the written profile failed to load
    prior = prior_text(prior_profile("snapdragon-npu").path)
    table = ('\n[fit]\nmethod = "opclass"\nrows = 2\nfamilies = ["a", "b"]\ndevices = ["x"]\n'
             'cv_rows = 2\ncv_median_abs_error = 0.1\ncv_log_residual_p10 = -0.1\n'
             'cv_log_residual_p90 = 0.1\n[fit.values]\n')
    good = tmp_path / "good.toml"
    good.write_text(prior + table + '"ovh/npu/conv" = 0.0\n')
    assert load_profile(str(good)).tables().unit("npu").overhead_for("conv") == 0.0
    bad = tmp_path / "bad.toml"
    bad.write_text(prior + table + '"eff/npu/int8/conv" = 0.0\n')
    with pytest.raises(DeviceError, match="'fit'"):
        load_profile(str(bad))
