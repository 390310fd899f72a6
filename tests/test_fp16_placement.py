"""Float models on QNN HTP run in fp16 on the NPU, as the phones run them (issue 15, item 3):
placement and cost. Models are written as .tflite directly (no TensorFlow)."""

from __future__ import annotations

import pytest
from test_estimate import conv_chain

from edgeopt.delegates import place, place_for_device
from edgeopt.devices.estimator import estimate
from edgeopt.devices.opcost import op_costs
from edgeopt.devices.profile import load_profile
from edgeopt.tflite_reader import read_tflite


@pytest.fixture(scope="module")
def float_model() -> bytes:
    return conv_chain("float32")


@pytest.fixture(scope="module")
def int8_model_with_float_tail() -> bytes:
    """Three int8 convolutions, DEQUANTIZE, then a float TANH: a float island."""
    from edgeopt.devices.microbench import _bias, _weights
    from edgeopt.devices.tflite_writer import GraphWriter, options

    g = GraphWriter("int8")
    x = first = g.activation((1, 8, 8, 3))
    cin = 3
    for i in range(3):
        y = g.activation((1, 8, 8, 8))
        g.op("CONV_2D", [x, _weights(g, (8, 3, 3, cin), 0, i), _bias(g, 8)], [y],
             options("Conv2DOptions", padding=0, strideW=1, strideH=1, dilationWFactor=1,
                     dilationHFactor=1), 3)
        x, cin = y, 8
    floats = g.tensor((1, 8, 8, 8), "float32")
    g.op("DEQUANTIZE", [x], [floats], version=2)
    out = g.tensor((1, 8, 8, 8), "float32")
    g.op("TANH", [floats], [out])
    return g.build([first], [out])


def test_float_model_is_placed_on_the_htp_in_fp16(float_model):
    placement = place_for_device(float_model, "snapdragon-npu")
    assert placement.fully_delegated
    assert {op.precision for op in placement.ops} == {"float16"}
    assert all(op.to_json()["precision"] == "float16" for op in placement.ops)


def test_precision_int8_keeps_float_on_the_cpu(float_model):
    placement = place(float_model, "qnn-htp", precision="int8")
    assert placement.delegated_ops == 0
    assert {op.rule for op in placement.ops} == {"precision_dtypes"}


def test_integer_graph_keeps_its_float_ops_on_the_cpu(int8_model_with_float_tail):
    placement = place(int8_model_with_float_tail, "qnn-htp")
    assert [op.unit for op in placement.ops] == ["npu", "npu", "npu", "npu", "cpu"]
    assert placement.ops[4].rule == "precision_dtypes"
    assert all(op.precision == "" for op in placement.ops[:3])


def test_fp16_ops_cost_at_the_npu_fp16_rate(float_model):
    graph = read_tflite(float_model)
    profile = load_profile("snapdragon-npu")
    est = estimate(graph, profile, model=float_model)
    assert est.precision == "float16" and all(row.unit == "npu" for row in est.ops)
    # Tensors keep their float32 size (costing.HALVE_FP16_BYTES: the held-out rows say so).
    for row, cost in zip(est.ops, op_costs(graph)):
        moved = sum(b for _, b in row.memory_bytes)
        assert moved == pytest.approx(cost.activation_bytes + cost.weight_bytes, rel=0.01)
    cpu = estimate(graph, profile, ["cpu"] * len(graph.ops))
    # The NPU's fp16 arithmetic, not the CPU's float32 (tiny ops: overheads dominate latency).
    assert sum(r.compute_s for r in est.ops) < sum(r.compute_s for r in cpu.ops) / 5


def test_float_on_an_fp16_only_unit_costs_fp16_whatever_the_placement_form(float_model):
    graph = read_tflite(float_model)
    profile = load_profile("snapdragon-npu")
    by_list = estimate(graph, profile, ["accelerator"] * len(graph.ops))
    by_rules = estimate(graph, profile, model=float_model)
    assert by_list.latency_s == pytest.approx(by_rules.latency_s)
    assert {row.dtype for row in by_list.ops} == {"float16"}


def test_halved_fp16_bytes_when_switched_on(float_model, monkeypatch):
    from edgeopt.devices import costing

    graph = read_tflite(float_model)
    profile = load_profile("snapdragon-npu")
    full = estimate(graph, profile, model=float_model)
    monkeypatch.setattr(costing, "HALVE_FP16_BYTES", True)
    half = estimate(graph, profile, model=float_model)
    for a, b in zip(full.ops, half.ops):
        assert sum(x for _, x in b.memory_bytes) == pytest.approx(
            sum(x for _, x in a.memory_bytes) / 2, rel=0.01)


def test_cpu_units_keep_float32(float_model):
    est = estimate(read_tflite(float_model), load_profile("host-cpu"), model=float_model)
    assert {row.dtype for row in est.ops} == {"float32"}
