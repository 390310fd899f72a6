"""The simulated Edge TPU: int8 only, the compiler's prefix mapping, parameter caching in
8 MiB with streaming of the rest, IO over the host link, and the compiler-style summary."""

from __future__ import annotations

import pytest
from test_estimate import conv_chain

from edgeopt.devices import edgetpu
from edgeopt.devices.corpus_fit import prior_profile
from edgeopt.devices.edgetpu import compiler_log
from edgeopt.devices.estimator import estimate
from edgeopt.devices.profile import load_profile
from edgeopt.devices.tflite_writer import GraphWriter
from edgeopt.errors import DeviceError
from edgeopt.tflite_reader import read_tflite


def dense_model(features: int, units: int, dtype: str = "int8") -> bytes:
    from edgeopt.devices.microbench import _dense

    g = GraphWriter(dtype)
    inputs, output = _dense(g, features, units)
    return g.build(inputs, [output])


def pointwise_model(channels: int) -> bytes:
    """A 1x1 CONV_2D of channels x channels int8 weights on a 1x1 input."""
    from edgeopt.devices.microbench import _conv

    g = GraphWriter("int8")
    inputs, output = _conv(g, 1, 1, channels, channels, 1, 1)
    return g.build(inputs, [output])


@pytest.fixture(scope="module")
def coral():
    return load_profile("coral-usb")


def test_float_model_is_refused_with_the_reason(coral):
    blob = conv_chain("float32")
    with pytest.raises(DeviceError, match="coral-usb runs fully int8-quantized models only: "
                                          "3 op\\(s\\) compute in float \\(#0 CONV_2D"):
        estimate(read_tflite(blob), coral, model=blob)


def test_an_op_a_quantized_model_keeps_float_is_named_with_what_to_do(coral):
    """ddddocr's REVERSE_V2 (a bidirectional RNN) has no int8 kernel: the w8a8 build keeps
    it float, and 'quantize to full integer first' would send the user round in a circle."""
    from edgeopt.devices.tflite_writer import GraphWriter

    g = GraphWriter("int8")
    x, r = g.activation((1, 8, 8, 4)), g.activation((1, 8, 8, 4))
    g.op("RELU", [x], [r])  # an int8 op: the model is quantized
    y = g.tensor((1, 8, 8, 4), "float32")
    g.op("DEQUANTIZE", [r], [y], version=2)
    z = g.tensor((1, 8, 8, 4), "float32")
    g.op("LOGISTIC", [y], [z])
    blob = g.build([x], [z])
    with pytest.raises(DeviceError, match=r"1 op\(s\) compute in float \(#2 LOGISTIC\); "
                                          r"they stayed float in this quantized model") as err:
        estimate(read_tflite(blob), coral, model=blob)
    assert "pixel-npu" in str(err.value) and "full integer first" not in str(err.value)


def test_int8_model_maps_and_caches_its_parameters(coral):
    blob = conv_chain("int8")
    graph = read_tflite(blob)
    est = estimate(graph, coral, model=blob)
    record = est.to_json()
    assert all(op["unit"] == "tpu" for op in record["ops"])
    assert record["on_chip_param_bytes"] == graph.param_bytes()
    assert record["off_chip_param_bytes"] == 0
    assert est.compiler["ops_mapped"] == 3 and est.compiler["edgetpu_subgraphs"] == 1
    # Input and output cross USB, the TPU's invoke overhead is paid once.
    crossing = {t.name for t in est.transfers if t.tensor >= 0}
    assert len(crossing) == 2
    assert est.invoke_s >= coral.hardware.unit("tpu").invoke_overhead.value


def test_parameters_beyond_8_mib_stream_over_the_link(coral):
    small = dense_model(1024, 1024)            # 1 MiB of weights: cached
    # one 16 MiB tensor: streams whole (a 1x1 convolution: the compiler cuts a
    # FULLY_CONNECTED that large from the delegate, libcoral's split_fc note)
    large = pointwise_model(4096)
    small_est = estimate(read_tflite(small), coral, model=small)
    large_est = estimate(read_tflite(large), coral, model=large)
    assert small_est.params["off_chip_param_bytes"] == 0
    off_chip = large_est.params["off_chip_param_bytes"]
    assert off_chip == read_tflite(large).param_bytes()
    assert large_est.params["on_chip_param_bytes"] == 0
    link = coral.hardware.link("cpu", "tpu").bandwidth.value
    streaming = large_est.ops[0].stream_s
    assert streaming == pytest.approx(off_chip / link)
    assert large_est.latency_s > streaming
    log = compiler_log(large_est)
    assert "On-chip memory used for caching model parameters" in log
    assert "Off-chip memory used for streaming uncached model parameters: 16.02MiB" in log


def test_ops_after_the_first_unmapped_one_run_on_the_host_cpu(coral):
    blob = conv_chain("int8", tail="DEQUANTIZE")
    est = estimate(read_tflite(blob), coral, model=blob)
    units = [op.unit for op in est.ops]
    assert units == ["tpu", "tpu", "tpu", "cpu"]
    assert est.ops[3].reason and est.compiler["ops_on_cpu"] == 1
    assert est.compiler["cpu_ops"][0]["op"] == "DEQUANTIZE"
    assert "DEQUANTIZE" in compiler_log(est)


def test_fallback_op_list_when_the_delegates_have_no_edgetpu_rules(coral, monkeypatch):
    monkeypatch.setattr(edgetpu, "_delegates_placement", lambda graph, model: None)
    blob = conv_chain("int8", tail="DEQUANTIZE")
    est = estimate(read_tflite(blob), coral, model=blob)
    assert est.compiler["mapping"] == "edgetpu_ops.toml"
    assert [op.unit for op in est.ops] == ["tpu", "tpu", "tpu", "cpu"]
    assert "not supported by the Edge TPU" in est.ops[3].reason


def test_devboard_and_usb_differ_only_in_link_and_host():
    """Their prior figures; each [fit] table then follows its own device's rows."""
    blob = conv_chain("int8", size=64)
    graph = read_tflite(blob)
    usb = estimate(graph, prior_profile("coral-usb"), model=blob)
    board = estimate(graph, prior_profile("coral-devboard"), model=blob)
    assert [o.latency_s for o in usb.ops] == pytest.approx([o.latency_s for o in board.ops])


@pytest.mark.slow
def test_published_mobilenet_rows():
    """MobileNet v1/v2 224 full int8 (Keras, random weights) against coral.ai's rows."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from estimate_zoo import zoo_model

    for name, published in (("mobilenet_v1", 2.4), ("mobilenet_v2", 2.6)):
        blob = zoo_model(name, 1.0, 224, "int8", "uint8")
        for device in ("coral-usb", "coral-devboard"):
            est = estimate(read_tflite(blob), load_profile(device), model=blob)
            assert est.latency_ms == pytest.approx(published, rel=0.15), (name, device)
