"""Fitting profiles to published latencies (issue 15): the fit recovers a known synthetic
device, the cross validation never lets a family see its own rows, the [fit] table is laid
over the prior when a profile loads, and stand-ins are read from the corpus rows and
built once."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
from test_estimate import conv_chain

from edgeopt.devices.corpus import Measurement, load_corpus
from edgeopt.devices.corpus_fit import (
    RowSample,
    cross_validate,
    fit_method,
    fit_samples,
    predict_s,
    prior_profile,
    write_fit,
)
from edgeopt.devices.estimator import estimate
from edgeopt.devices.fit import Sample, apply_values
from edgeopt.devices.fitted import PRIOR_BASIS, scale_times
from edgeopt.devices.profile import all_profiles, load_profile, parse_profile
from edgeopt.devices.standins import StandIn, build, cached, input_size, standin_for
from edgeopt.errors import DeviceError
from edgeopt.tflite_reader import read_tflite

SHAPES = {"alpha": ((16, 8, 2), (32, 16, 3)), "beta": ((48, 32, 2), (24, 16, 4)),
          "gamma": ((64, 8, 4), (40, 24, 2))}


def _row(model: str, family: str, latency_ms: float) -> Measurement:
    return Measurement(model, family, "", "int8", "", "synthetic", "synthetic", "tflite", "",
                       "cpu", "cpu", 4, latency_ms, None, None, None, "test", "", "")


@pytest.fixture(scope="module")
def models():
    """(family, model, blob, graph) of small int8 conv chains in three families."""
    out = []
    for family, shapes in SHAPES.items():
        for size, channels, depth in shapes:
            blob = conv_chain("int8", size, channels, depth)
            out.append((family, f"{family}-{size}", blob, read_tflite(blob)))
    return out


def _device_rows(models, truth) -> list[RowSample]:
    """Rows 'measured' on a synthetic device: the estimate of each model on ``truth``."""
    rows = []
    for family, name, blob, graph in models:
        measured = predict_s([Sample(name, graph, 1.0, model=blob)], truth)[0]
        rows.append(RowSample(_row(name, family, measured * 1e3),
                              Sample(name, graph, measured, model=blob)))
    return rows


def _scaled(profile, factor):
    return dataclasses.replace(profile, hardware=scale_times(profile.tables(), factor, "truth"))


def test_scale_fit_recovers_a_known_device_factor(models):
    prior = prior_profile("rpi5-cpu")
    rows = _device_rows(models, _scaled(prior, 1.6))
    fitted, _, scale = fit_method([r.sample for r in rows], prior, "scale")
    assert scale == pytest.approx(1.6, rel=1e-6)
    assert predict_s([r.sample for r in rows], fitted) == pytest.approx(
        [r.sample.measured_s for r in rows], rel=1e-6)


def test_opclass_fit_recovers_known_efficiencies(models):
    prior = prior_profile("rpi5-cpu")
    truth = apply_values(prior, {("eff", "xnnpack", "int8", "conv"): 1 / 0.15}, "truth")
    rows = _device_rows(models, truth)
    fitted, values, _ = fit_method([r.sample for r in rows], prior, "opclass")
    measured = [r.sample.measured_s for r in rows]
    before = predict_s([r.sample for r in rows], prior)
    after = predict_s([r.sample for r in rows], fitted)
    # the weak pull towards the prior keeps a few per cent of error with six rows
    assert max(abs(a / m - 1) for a, m in zip(after, measured)) < 0.05
    assert max(abs(b / m - 1) for b, m in zip(before, measured)) > 0.3
    assert 1 / values[("eff", "xnnpack", "int8", "conv")] == pytest.approx(0.15, rel=0.12)


def test_cross_validation_never_sees_the_held_out_familys_rows(models):
    prior = prior_profile("rpi5-cpu")
    rows = _device_rows(models, _scaled(prior, 1.6))
    # alpha's rows measured 3x slower: its own CV estimates must not move, the others must
    slower = [dataclasses.replace(r, sample=dataclasses.replace(
        r.sample, measured_s=r.sample.measured_s * 3)) if r.row.model_family == "alpha" else r
        for r in rows]
    for method in ("scale", "opclass"):
        plain, changed = (cross_validate(x, prior, method) for x in (rows, slower))
        for r, a, b in zip(rows, plain, changed):
            if r.row.model_family == "alpha":
                assert a == pytest.approx(b, rel=1e-9)
            else:
                assert b != pytest.approx(a, rel=0.01)


def test_fit_table_is_laid_over_the_prior_when_the_profile_loads(models, tmp_path):
    prior = prior_profile("rpi5-cpu")
    rows = _device_rows(models, _scaled(prior, 1.6))
    result = fit_samples("rpi5-cpu", prior, rows)
    path = write_fit(result, tmp_path)
    loaded = load_profile(str(path))
    assert loaded.basis == result.chosen.basis
    assert loaded.basis.startswith(f"fitted: {len(rows)} rows, CV median error ")
    chosen = result.methods[result.chosen.method]
    samples = [r.sample for r in rows]
    assert predict_s(samples, loaded) == pytest.approx(predict_s(samples, chosen.profile),
                                                        rel=1e-4)
    bare = parse_profile(path, fitted=False)
    assert bare.basis == PRIOR_BASIS
    assert predict_s(samples, bare) == pytest.approx(predict_s(samples, prior), rel=1e-9)
    low, high = loaded.fit.interval(10.0)
    assert low <= high
    # estimates carry the basis and the p10-p90 interval; a prior says it is unvalidated
    record = estimate(rows[0].sample.graph, loaded, model=rows[0].sample.model).to_json()
    assert record["basis"] == loaded.basis
    assert record["interval_ms"] == pytest.approx(
        [v * 1e3 for v in loaded.fit.interval(record["latency_ms"] / 1e3)], rel=1e-4)
    bare_record = estimate(rows[0].sample.graph, bare, model=rows[0].sample.model).to_json()
    assert (bare_record["basis"], bare_record["interval_ms"]) == (PRIOR_BASIS, None)
    # writing again replaces the table instead of adding a second one
    again = write_fit(dataclasses.replace(result, prior=loaded), tmp_path)
    assert again.read_text().count("[fit]") == 1


def test_a_bad_fit_table_names_the_file_and_the_table(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(open(prior_profile("coral-usb").path).read() + '\n[fit]\nmethod = "magic"\n')
    with pytest.raises(DeviceError, match="bad.toml.*'fit'"):
        load_profile(str(path))


def test_every_shipped_profile_loads_and_states_its_basis():
    for profile in all_profiles():
        assert profile.basis == PRIOR_BASIS or profile.basis.startswith(("fitted: ",
                                                                         "validated: "))
        assert profile.summary()["basis"] == profile.basis


def test_standins_follow_the_rows_input_head_and_precision():
    rows = load_corpus()
    by = {(r.model, r.precision, r.source.split(":")[0]): r for r in rows}
    regnet = next(r for r in rows if r.model == "regnet_y_800mf" and r.precision == "int8")
    # Keras 3 ships no RegNet constructor: standin_nets.py defines torchvision's; AI
    # Hub's "1x3x224" reads as 224x224
    spec = standin_for(regnet)
    assert (spec.builder, spec.height, spec.width) == ("RegNetY800MF", 224, 224)
    assert input_size(regnet.input_shape, "ResNet50") == (224, 224)
    small_head = next(r for r in rows if r.model == "resnet50" and "3 classes" in r.note)
    assert standin_for(small_head).classes == 3
    hosted = next(r for r in rows if r.model == "mobilenet_v1_0.5_160" and r.precision == "fp32")
    spec = standin_for(hosted)
    assert (spec.builder, spec.alpha, spec.height, spec.classes, spec.precision) == (
        "MobileNet", 0.5, 160, 1001, "float")
    assert all(standin_for(r) is None for r in rows if r.precision == "w8a16")
    assert all(standin_for(r) is None for r in rows if r.model == "mixnet_s")  # no definition
    assert by  # the corpus loaded


def test_super_resolution_standins_upscale_x4_and_resnext_convs_are_grouped():
    import keras

    from edgeopt.devices.standin_nets import NETWORKS, build_network

    sr_models = ("quicksrnetsmall", "quicksrnetlarge", "xlsr", "sesr_m5",
                 "real_esrgan_general_x4v3", "real_esrgan_x4plus", "esrgan")
    rows = {r.model: r for r in load_corpus() if r.model in sr_models}
    builders = {standin_for(rows[m]).builder for m in ("quicksrnetlarge", "xlsr", "sesr_m5",
                                                        "real_esrgan_general_x4v3",
                                                        "real_esrgan_x4plus", "esrgan")}
    assert builders == {"QuickSRNetLarge", "XLSR", "SESR_M5", "SRVGGNetCompact", "RRDBNet"}
    assert standin_for(rows["quicksrnetsmall"]).height == 128   # AI Hub's input spec
    for builder in sorted(b for b, (kind, _) in NETWORKS.items()
                          if kind in ("quicksrnet", "xlsr", "sesr", "srvgg")):
        model = build_network(keras, builder, keras.Input((8, 12, 3), batch_size=1), 1000)
        assert tuple(model.outputs[0].shape) == (1, 32, 48, 3), builder
    model = build_network(keras, "ResNeXt50_32x4d", keras.Input((64, 64, 3), batch_size=1),
                          10)
    grouped = [la for la in model.layers if getattr(la, "groups", 1) > 1]
    assert len(grouped) == 16 and {la.groups for la in grouped} == {32}   # one per block
    assert grouped[0].filters == 128   # 32 groups x 4 channels


@pytest.mark.slow
def test_a_standin_is_built_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEOPT_STANDIN_CACHE", str(tmp_path))
    spec = StandIn("mobilenet_v1_0.25_128", "MobileNet", 0.25, 32, 32, 10, "int8")
    assert cached(spec) is None
    path = build(spec)
    assert cached(spec) == path and path.parent == tmp_path
    graph = read_tflite(path)
    assert graph.tensors[graph.inputs[0]].shape == (1, 32, 32, 3)
    assert {"CONV_2D", "DEPTHWISE_CONV_2D"} <= {op.op for op in graph.ops}
    assert {graph.tensors[i].dtype for op in graph.ops if op.op == "CONV_2D"
            for i in op.inputs[:1]} == {"int8"}
    stamp = path.stat().st_mtime_ns
    assert build(spec) == path and path.stat().st_mtime_ns == stamp


def _edgeopt(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgeopt", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})


def test_fit_without_built_standins_is_a_one_line_error(tmp_path):
    out = _edgeopt("devices", "fit", "--profile", "coral-usb", "--cached-only", "-o",
                   str(tmp_path / "out"), EDGEOPT_STANDIN_CACHE=str(tmp_path / "empty"))
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("edgeopt: error: coral-usb: none of its")
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_fit_on_a_folder_without_measurements_is_a_one_line_error(tmp_path):
    out = _edgeopt("devices", "fit", "--measurements", str(tmp_path))
    assert out.returncode == 2 and "no measurement files" in out.stderr
