"""The kernel-level view (issue 15, nn-Meter's fused kernels): which ops of a converter-made
.tflite fuse into which kernel and what the kernel moves; the kernel fit recovers a
synthetic device's known values; estimates from a kernel-fitted profile keep their basis
and interval, and their fused ops say where their time went."""

from __future__ import annotations

import dataclasses
import os

import pytest
from test_corpus_fit import SHAPES, _device_rows
from test_estimate import conv_chain

from edgeopt.devices.corpus_fit import fit_samples, predict_s, prior_profile, write_fit
from edgeopt.devices.estimator import estimate
from edgeopt.devices.fitted import parse_fit
from edgeopt.devices.kernel_fit import EFFICIENCY_CEILING, fit_kernel, with_kernel_fit
from edgeopt.devices.kernel_model import kernel_time
from edgeopt.devices.kernels import group_kernels
from edgeopt.devices.opcost import op_costs, tensor_bytes
from edgeopt.devices.profile import load_profile
from edgeopt.tflite_reader import read_tflite


def _convert(build) -> bytes:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    layers = keras.layers
    inputs = keras.Input((16, 16, 3), batch_size=1)
    model = keras.Model(inputs, build(layers, inputs))
    return tf.lite.TFLiteConverter.from_keras_model(model).convert()


def _block(layers, x):
    y = layers.Activation("sigmoid")(layers.Conv2D(8, 3, padding="same")(x))
    z = layers.DepthwiseConv2D(3, padding="same", activation="relu6")(y)
    z = layers.Add()([layers.Conv2D(8, 1)(z), y])       # residual: y has two readers
    w = layers.Dense(4)(layers.GlobalAveragePooling2D()(z))
    return layers.Softmax()(w)


@pytest.fixture(scope="module")
def block_graph():
    return read_tflite(_convert(_block))


def _kernels(graph):
    costs = op_costs(graph)
    return group_kernels(graph, costs, ["cpu"] * len(graph.ops))


def test_ops_fuse_into_the_kernels_a_delegate_runs(block_graph):
    g = block_graph
    got = [(k.kind, [g.ops[i].op for i in k.ops]) for k in _kernels(g)]
    assert got == [("conv", ["CONV_2D", "LOGISTIC"]),                 # activation folded
                   ("dwsep", ["DEPTHWISE_CONV_2D", "CONV_2D", "ADD"]),  # dw + pw + residual
                   ("pool", ["MEAN"]), ("dense", ["FULLY_CONNECTED"]), ("other", ["SOFTMAX"])]


def test_a_kernel_moves_its_inputs_weights_and_outputs_not_its_intermediates(block_graph):
    g = block_graph
    first = _kernels(g)[0]
    conv, logistic = (g.ops[i] for i in first.ops)
    expected = sum(tensor_bytes(g.tensors[t]) for t in conv.inputs if t >= 0)
    expected += tensor_bytes(g.tensors[logistic.outputs[0]])
    assert first.bytes_moved == expected       # the conv's own output never leaves
    costs = {c.index: c for c in op_costs(g)}
    assert first.arithmetic == costs[conv.index].ops + costs[logistic.index].ops


def test_an_output_read_twice_is_not_folded_into(block_graph):
    """y (the LOGISTIC output) is read by the depthwise conv and the ADD: the depthwise
    starts a kernel of its own and the ADD joins the later producer (the pointwise)."""
    g = block_graph
    kernels = _kernels(g)
    dwsep = kernels[1]
    assert g.ops[dwsep.anchor].op == "DEPTHWISE_CONV_2D"
    assert dwsep.bytes_moved > tensor_bytes(g.tensors[g.ops[dwsep.anchor].inputs[0]])


def _squeeze_excitation(layers, x):
    y = layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    gate = layers.GlobalAveragePooling2D(keepdims=True)(y)
    gate = layers.Conv2D(8, 1, activation="sigmoid")(layers.Conv2D(2, 1, activation="relu")(gate))
    return layers.Conv2D(4, 1)(layers.Multiply()([y, gate]))


def test_a_broadcast_that_writes_a_larger_tensor_is_not_a_small_kernels_epilogue():
    """Squeeze-excitation: the gate (a 1x1 conv on a 1x1 map) times the 16x16 feature map.
    The MUL writes 256x the gate's elements: a pass of its own (an element-wise kernel),
    not an epilogue of the gate's conv that would cost nothing."""
    g = read_tflite(_convert(_squeeze_excitation))
    got = [(k.kind, [g.ops[i].op for i in k.ops]) for k in _kernels(g)]
    assert ("elementwise", ["MUL"]) in got
    gate_conv = next(k for k in got if k[1][:2] == ["CONV_2D", "LOGISTIC"])
    assert gate_conv == ("conv", ["CONV_2D", "LOGISTIC"])


def _grouped(layers, x):
    y = layers.Conv2D(8, 1)(x)
    y = layers.Conv2D(8, 3, padding="same", groups=8)(y)    # depthwise, as ConvNeXt writes it
    return layers.Conv2D(8, 3, padding="same", groups=2)(y)  # a grouped conv: 4 deep


def test_a_grouped_conv_one_channel_deep_is_a_depthwise_kernel():
    g = read_tflite(_convert(_grouped))
    got = [(k.kind, [g.ops[i].op for i in k.ops]) for k in _kernels(g)]
    assert got == [("conv", ["CONV_2D"]), ("depthwise", ["CONV_2D"]), ("conv", ["CONV_2D"])]


def test_a_kernel_counts_its_parameters_and_pays_for_them_where_the_fit_says(block_graph):
    g = block_graph
    kernels = _kernels(g)
    for k in kernels:
        constants = {t for i in k.ops for t in g.ops[i].inputs
                     if t >= 0 and g.tensors[t].is_constant}
        assert k.weight_bytes == sum(tensor_bytes(g.tensors[t]) for t in constants)
    conv = kernels[0]
    unit = load_profile("rpi5-cpu").tables().unit("cpu")
    values = {("keff", "cpu", conv.dtype, "gemm"): 1.0}
    plain = kernel_time(conv, unit, values)
    streamed = kernel_time(conv, unit, {**values, ("kweight", "cpu"): 1e-9})
    assert streamed.latency_s == pytest.approx(plain.latency_s + conv.weight_bytes * 1e-9)
    assert streamed.compute_s == plain.compute_s and streamed.memory_s > 0


def test_ops_on_different_units_never_share_a_kernel(block_graph):
    g = block_graph
    units = ["cpu"] * len(g.ops)
    units[1] = "npu"      # the LOGISTIC elsewhere: it cannot fold into the CPU's conv
    kernels = group_kernels(g, op_costs(g), units)
    assert [g.ops[i].op for i in kernels[0].ops] == ["CONV_2D"]
    assert {k.unit for k in kernels if 1 in k.ops} == {"npu"}


TRUTH = {"int8": (1 / 0.3, 120e-6), "float32": (1 / 0.55, 300e-6)}   # 1/efficiency, invoke


def _truth_values(unit: str) -> dict:
    values = {("kmem", unit): 1 / 20e9, ("kweight", unit): 1 / 10e9}
    for dtype, (x, invoke) in TRUTH.items():
        values[("keff", unit, dtype, "gemm")] = x
        values[("kinvoke", unit, dtype)] = invoke
    return values


# four conv chains per family and dtype: enough rows for one value per dtype and kind
CHAINS = {family: (*shapes, (shapes[0][0] + 8, shapes[1][1], 1), (shapes[1][0] + 8, 8, 3))
          for family, shapes in SHAPES.items()}


@pytest.fixture(scope="module")
def chains():
    out = []
    for family, shapes in CHAINS.items():
        for dtype in TRUTH:
            for size, channels, depth in shapes:
                blob = conv_chain(dtype, size, channels, depth)
                out.append((family, f"{family}-{size}-{dtype}", blob, read_tflite(blob)))
    return out




def test_the_kernel_fit_recovers_a_synthetic_devices_values(chains):
    prior = prior_profile("rpi5-cpu")
    unit = prior.tables().main_unit
    truth = _truth_values(unit)
    rows = _device_rows(chains, with_kernel_fit(prior, truth))
    values, info = fit_kernel([r.sample for r in rows], prior)
    for key in [k for k in truth if k[0] in ("keff", "kinvoke", "kweight")]:
        assert values[key] == pytest.approx(truth[key], rel=0.02), key
    assert info["rows"] == len(rows) and info["values_per_row"] == pytest.approx(
        info["values"] / len(rows), abs=1e-3)
    assert predict_s([r.sample for r in rows], with_kernel_fit(prior, values)) == \
        pytest.approx([r.sample.measured_s for r in rows], rel=0.02)


def test_no_fitted_efficiency_beats_the_units_peak(chains):
    # a device whose int8 rows would need 1.5x the stated peak: the fit stops at the peak
    # (efficiency 1.0, value 1.0) and the other dtype's value is still recovered
    prior = prior_profile("rpi5-cpu")
    unit = prior.tables().main_unit
    truth = _truth_values(unit) | {("keff", unit, "int8", "gemm"): 1 / 1.5}
    rows = _device_rows(chains, with_kernel_fit(prior, truth))
    values, _ = fit_kernel([r.sample for r in rows], prior)
    assert values[("keff", unit, "int8", "gemm")] == pytest.approx(1.0 / EFFICIENCY_CEILING)
    assert values[("keff", unit, "float32", "gemm")] == pytest.approx(
        truth[("keff", unit, "float32", "gemm")], rel=0.05)
    assert min(v for k, v in values.items() if k[0] == "keff") >= 1.0 / EFFICIENCY_CEILING


def test_few_rows_tie_the_kernel_values(chains):
    prior = prior_profile("rpi5-cpu")
    rows = _device_rows(chains, with_kernel_fit(prior,
                                                _truth_values(prior.tables().main_unit)))[:3]
    _, few = fit_kernel([r.sample for r in rows], prior)
    _, many = fit_kernel([r.sample for r in _device_rows(
        chains, with_kernel_fit(prior, _truth_values(prior.tables().main_unit)))], prior)
    assert (few["values"], many["values"]) == (1, 5)   # one scale; per dtype + parameters
    assert few["values_per_row"] == pytest.approx(1 / 3, abs=1e-3)


def test_a_kernel_fitted_profile_keeps_its_basis_in_every_estimate(chains, tmp_path):
    prior = prior_profile("rpi5-cpu")
    rows = _device_rows(chains, with_kernel_fit(prior,
                                                _truth_values(prior.tables().main_unit)))
    result = fit_samples("rpi5-cpu", prior, rows, methods=("scale", "kernel"))
    assert result.chosen.method == "kernel"     # the truth is a kernel-model device
    path = write_fit(result, tmp_path)
    loaded = load_profile(str(path))
    assert loaded.fit.method == "kernel"
    assert parse_fit(path, {"fit": result.chosen.to_toml()}).values == pytest.approx(
        dict(result.chosen.values), rel=1e-5)
    family, name, blob, graph = chains[0]
    record = estimate(graph, loaded, model=blob).to_json()
    assert record["basis"] == loaded.basis and loaded.basis.startswith("fitted: ")
    assert record["interval_ms"][0] <= record["latency_ms"] <= record["interval_ms"][1]
    assert record["latency_ms"] == pytest.approx(rows[0].sample.measured_s * 1e3, rel=0.02)


def test_fused_ops_say_which_kernel_ran_them(block_graph, chains, tmp_path):
    prior = prior_profile("rpi5-cpu")
    unit = prior.tables().main_unit
    values = {**_truth_values(unit), ("keff", unit, "float32", "depthwise"): 5.0,
              ("kovh", unit, "elementwise"): 4e-6}
    profile = with_kernel_fit(prior, values)
    est = estimate(block_graph, profile)
    fused = [r for r in est.ops if r.bound == "fused"]
    assert {r.op for r in fused} == {"LOGISTIC", "CONV_2D", "ADD"}
    assert all("fused into op" in r.reason and r.latency_s == 0 for r in fused)
    assert est.latency_s == pytest.approx(sum(r.latency_s for r in est.ops) + est.invoke_s
                                          + sum(t.latency_s for t in est.transfers))
    assert est.invoke_s >= values[("kinvoke", unit, "float32")]
    assert dataclasses.asdict(est)["basis"] == profile.basis
