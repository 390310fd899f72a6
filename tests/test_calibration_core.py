"""The calibration core's algorithms, on numpy data only: no runtime, no framework."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.calibration.config import Precision, QuantConfig
from edgeopt.calibration.data_checks import check_calibration
from edgeopt.calibration.estimators import choose_range
from edgeopt.calibration.gptq import gptq_quantize
from edgeopt.calibration.graphspec import CalibGraph, Layer, LayerKind
from edgeopt.calibration.observers import ObserverSet, TensorObserver
from edgeopt.calibration.plan import corrected_bias
from edgeopt.calibration.quantgrid import ActivationGrid, range_error
from edgeopt.calibration.weights import bf16_round, quantize_rtn
from edgeopt.errors import DataError


def observe(data: np.ndarray, chunks: int = 10) -> TensorObserver:
    observer = TensorObserver()
    for chunk in np.array_split(data.astype(np.float32), chunks):
        observer.update(chunk)
    return observer


def test_observer_state_is_bounded_and_exact_at_the_edges():
    rng = np.random.default_rng(0)
    observer = TensorObserver(bins=512)
    for i in range(300):  # drifting data forces the grid to slide and coarsen
        observer.update(rng.normal(i * 0.05, 1 + i * 0.01, 5000))
        assert observer.histogram().counts.size == 512
    hist = observer.histogram()
    assert observer.count == 300 * 5000
    assert hist.edges[0] <= observer.min and hist.edges[-1] >= observer.max
    assert hist.total == pytest.approx(300 * 5000)  # every value binned (below sample size)


def test_observer_subsamples_large_batches_but_keeps_exact_min_max():
    data = np.linspace(-3, 5, 1_000_001, dtype=np.float32)
    observer = TensorObserver(sample_size=4096)
    observer.update(data)
    assert (observer.min, observer.max) == (-3.0, 5.0)
    assert observer.histogram().total == 4096


def test_observer_counts_nonfinite_values_and_ignores_them():
    observer = TensorObserver()
    observer.update(np.array([1.0, np.nan, np.inf, -2.0], np.float32))
    assert observer.nonfinite == 2 and (observer.min, observer.max) == (-2.0, 1.0)


def test_observer_set_creates_one_observer_per_tensor():
    observers = ObserverSet()
    observers.update({"a": np.ones(4), "b": np.zeros(3)})
    observers.update({"a": np.full(4, 3.0)})
    assert observers["a"].max == 3.0 and observers["b"].count == 3


@pytest.mark.parametrize("lo, hi", [(0.0, 2.55), (-1.0, 3.0), (-4.0, -1.0)])
def test_activation_grid_represents_zero_exactly(lo, hi):
    grid = ActivationGrid.from_range(lo, hi)
    assert grid.fake_quant(np.array([0.0]))[0] == 0.0
    assert grid.low <= min(lo, 0) + grid.scale and grid.high >= max(hi, 0) - grid.scale


def test_estimated_error_matches_the_real_fake_quant_error():
    rng = np.random.default_rng(1)
    data = rng.laplace(0, 1, 200_000)
    hist = observe(data).histogram()
    for lo, hi in [(-3.0, 3.0), (-8.0, 12.0), (data.min(), data.max())]:
        grid = ActivationGrid.from_range(lo, hi)
        actual = float(np.mean((grid.fake_quant(data) - data) ** 2))
        assert range_error(hist, lo, hi) == pytest.approx(actual, rel=0.05)


def test_estimators_clip_heavy_tails_and_auto_takes_the_least_error():
    rng = np.random.default_rng(2)
    data = np.append(rng.normal(0, 1, 300_000), [60.0, -45.0])
    hist = observe(data).histogram()
    mm, pct, mse = (choose_range(hist, m) for m in ("minmax", "percentile", "mse"))
    assert (mm.lo, mm.hi) == (-45.0, 60.0)
    assert pct.hi < 10 and mse.error < mm.error
    auto = choose_range(hist, "auto")
    assert auto.error == min(auto.errors.values())
    assert set(auto.candidates) == {"minmax", "percentile", "mse", "entropy"}


def test_entropy_ignores_the_relu_spike_at_zero():
    rng = np.random.default_rng(3)
    data = np.maximum(rng.normal(0, 1, 300_000), 0)
    choice = choose_range(observe(data).histogram(), "entropy")
    assert choice.lo == 0.0 and 2.5 < choice.hi <= data.max()


def test_rtn_int8_codes_are_symmetric_and_within_half_a_step():
    rng = np.random.default_rng(4)
    weight = rng.normal(0, 0.2, (16, 8, 3, 3)).astype(np.float32)
    quant = quantize_rtn(weight, bits=8)
    assert quant.codes.min() >= -127 and quant.codes.max() <= 127
    assert np.all(np.abs(quant.codes.reshape(16, -1)).max(axis=1) == 127)
    step = quant.scale[:, None, None, None]
    assert np.all(np.abs(quant.dequantize() - weight) <= step / 2 + 1e-7)


@pytest.mark.parametrize("block", [32, 64, 128])
def test_int4_blockwise_scales_are_bf16_and_codes_fit_in_4_bits(block):
    rng = np.random.default_rng(5)
    weight = rng.normal(0, 1, (8, 256)).astype(np.float32)
    quant = quantize_rtn(weight, bits=4, block_size=block)
    assert quant.scale.shape == (8, 256 // block)
    assert np.array_equal(bf16_round(quant.scale), quant.scale)
    assert quant.codes.min() >= -8 and quant.codes.max() <= 7


def _layer_output_sqnr(x, weight, quant) -> float:
    ref = x @ weight.T
    err = x @ quant.dequantize().reshape(len(weight), -1).T - ref
    return 10 * np.log10((ref ** 2).sum() / (err ** 2).sum())


@pytest.mark.parametrize("block", [None, 32])
def test_gptq_beats_round_to_nearest_on_the_layer_output(block):
    rng = np.random.default_rng(6)
    x = np.maximum(rng.normal(size=(2048, 128)) @ (np.eye(128) + 0.3 * rng.normal(
        size=(128, 128))), 0)
    weight = rng.normal(0, 0.1, (64, 128))
    rtn = _layer_output_sqnr(x, weight, quantize_rtn(weight, 4, block))
    gptq = _layer_output_sqnr(x, weight, gptq_quantize(weight, x.T @ x, 4, block))
    assert gptq > rtn + 2.0


def test_bias_correction_restores_the_mean_output():
    rng = np.random.default_rng(7)
    x = rng.random((4096, 32)) + 0.5          # positive inputs: rounding shifts the mean
    weight = rng.normal(0, 0.3, (16, 32))
    bias = rng.normal(0, 0.1, 16)
    quant = quantize_rtn(weight, 4)
    layer = Layer("fc", "FULLY_CONNECTED", LayerKind.DENSE, "x", "fc", "w", "b", "NC")
    fixed = corrected_bias(layer, weight, quant, bias, x.mean(axis=0))
    ref = (x @ weight.T + bias).mean(axis=0)
    w_q = quant.dequantize()
    assert np.abs((x @ w_q.T + fixed).mean(axis=0) - ref).max() < 1e-5
    assert np.abs((x @ w_q.T + bias).mean(axis=0) - ref).max() > 1e-3


def test_nan_in_calibration_data_is_an_error_naming_the_input():
    data = np.zeros((16, 4), np.float32)
    data[3, 1] = np.nan
    with pytest.raises(DataError, match=r"'image'.*1 NaN.*sample 3"):
        check_calibration({"image": data}, "minmax")


def test_constant_and_repeated_inputs_warn():
    rng = np.random.default_rng(8)
    assert "is constant" in check_calibration({"x": np.zeros((40, 3))}, "auto")[0]
    repeated = np.repeat(rng.random((1, 5)), 40, axis=0)
    assert "same sample" in check_calibration({"x": repeated}, "auto")[0]


def test_too_few_samples_for_the_method():
    with pytest.raises(DataError, match="too few for --method entropy"):
        check_calibration({"x": np.random.default_rng(9).random((3, 4))}, "entropy")
    warnings = check_calibration({"x": np.random.default_rng(9).random((10, 4))}, "auto")
    assert "only 10 calibration samples" in warnings[0]


def fake_graph() -> CalibGraph:
    layers = (Layer("conv_a", "CONV_2D", LayerKind.CONV, "in", "conv_a", "wa", None, "NHWC"),
              Layer("dw_b", "DEPTHWISE_CONV_2D", LayerKind.DEPTHWISE, "conv_a", "dw_b", "wb",
                    None, "NHWC"),
              Layer("head", "FULLY_CONNECTED", LayerKind.DENSE, "dw_b", "head", "wc", None, "NC"))
    return CalibGraph("tflite", ("in",), ("head",), ("in", "conv_a", "dw_b", "head"), layers,
                      {}, {})


def test_scheme_precisions_keep_depthwise_int8():
    from edgeopt.calibration.precision import assign_precisions

    choices, warnings = assign_precisions(fake_graph(), QuantConfig(scheme="w4a8"))
    assert [choices[n].precision for n in ("conv_a", "dw_b", "head")] == [
        Precision.INT4, Precision.INT8, Precision.INT4]
    assert choices["conv_a"].weight_method == "gptq" and not warnings


def test_saturating_readers_cut_a_tensors_range():
    from edgeopt.calibration.graphspec import OpInfo
    from edgeopt.calibration.saturation import clamp, saturation_bounds

    ops = (OpInfo("s", "Sigmoid", ("logits",), ("p",)),
           OpInfo("r", "Relu", ("c",), ("rc",)), OpInfo("a", "Add", ("c", "rc"), ("sum",)),
           OpInfo("h", "HardSigmoid", ("g",), ("hg",), {"alpha": 1 / 6, "beta": 0.5}),
           OpInfo("k", "Clip", ("q",), ("cq",), {"min": 0.0, "max": 6.0}))
    graph = CalibGraph("onnx", ("in",), ("p",), (), (), {}, {}, ops)
    bounds = saturation_bounds(graph)
    assert clamp((-151.0, 96.0), bounds["logits"]) == (-8.0, 8.0)
    assert "c" not in bounds                        # also read by Add, which never saturates
    assert bounds["g"] == pytest.approx((-3.0, 3.0))
    assert clamp((-2.0, 9.0), bounds["q"]) == (0.0, 6.0)
    assert clamp((10.0, 20.0), (-8.0, 8.0)) == (10.0, 20.0)   # no overlap: left alone


def test_integer_io_needs_a_full_integer_scheme():
    from edgeopt.errors import ConfigError

    with pytest.raises(ConfigError, match="full-integer"):
        QuantConfig(scheme="w4afp32", io_dtype="int8")
    with pytest.raises(ConfigError, match="unknown scheme 'w3a3'"):
        QuantConfig(scheme="w3a3")
