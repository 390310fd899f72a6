"""The `.tflite` path with the real LiteRT runtime and ai-edge-quantizer, on a tiny CNN."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.calibration.report import render_layer_chart
from edgeopt.calibration.tflite_backend import read_graph, to_native
from edgeopt.calibration.weights import quantize_rtn
from edgeopt.quantize import QuantConfig, quantize_tflite


@pytest.fixture(scope="module")
def model(tiny_float_tflite) -> bytes:
    return tiny_float_tflite.read_bytes()


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(1)
    images = rng.random((48, 16, 16, 3), dtype=np.float32)
    return {"image": images[:32]}, {"image": images[32:]}


@pytest.fixture(scope="module")
def w8a8(model, data):
    calib, evaluation = data
    return quantize_tflite(model, calib, QuantConfig(scheme="w8a8", isolate_layers=2),
                           evaluation)


def weight_tensors(content: bytes, names: set[str]) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=content)
    interpreter.allocate_tensors()
    return {d["name"]: (interpreter.get_tensor(d["index"]), d)
            for d in interpreter.get_tensor_details() if d["name"] in names}


def test_w8a8_model_holds_the_cores_codes_and_scales(model, w8a8):
    graph = read_graph(model)
    stored = weight_tensors(w8a8.model, {layer.weight for layer in graph.layers})
    for layer in graph.layers:
        expected = quantize_rtn(graph.weights[layer.weight], 8)
        values, detail = stored[layer.weight]
        assert np.array_equal(values, to_native(layer.op, expected.codes))
        scales = detail["quantization_parameters"]["scales"]
        assert np.allclose(scales, expected.scale, rtol=1e-6)


def test_w8a8_is_full_integer_with_float_io_and_validated(w8a8):
    assert w8a8.format == "tflite" and w8a8.io_dtype == "float32"
    assert set(w8a8.precision_per_layer.values()) == {"int8"}
    validation = w8a8.validation
    assert validation["runtime"] == "LiteRT interpreter" and validation["samples"] == 16
    assert validation["sqnr_db"] > 25
    assert set(validation["candidates"]) == {"auto", "minmax", "percentile", "mse", "entropy"}
    assert w8a8.method.startswith("auto: ")


def test_layer_report_is_ranked_with_alone_effects_and_a_chart(w8a8):
    report = w8a8.layer_report
    assert [e["rank"] for e in report] == list(range(1, len(report) + 1))
    assert {"layer", "op", "precision", "sqnr_db", "cosine", "alone_output_sqnr_db",
            "weight_sqnr_db"} <= set(report[0])
    measured = [e["alone_output_sqnr_db"] for e in report if e["alone_output_sqnr_db"]]
    assert len(measured) == 2 and measured == sorted(measured)
    chart = render_layer_chart(report)
    assert chart.startswith("<figure") and "<svg" in chart and report[0]["op"] not in chart


def test_int8_io(model, data):
    result = quantize_tflite(model, data[0], QuantConfig(io_dtype="int8", method="minmax",
                                                         layer_report=False))
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=result.model)
    assert interpreter.get_input_details()[0]["dtype"] == np.int8
    assert interpreter.get_output_details()[0]["dtype"] == np.int8


def test_w4a8_stores_int4_conv_and_dense_weights_and_keeps_depthwise_int8(model, data, w8a8):
    result = quantize_tflite(model, data[0], QuantConfig(scheme="w4a8", method="minmax",
                                                         layer_report=False), data[1])
    kinds = {layer.name: layer.kind for layer in read_graph(model).layers}
    for name, precision in result.precision_per_layer.items():
        assert precision == ("int8" if kinds[name] == "depthwise" else "int4")
    assert len(result.model) < len(w8a8.model)
    assert result.validation["sqnr_db"] > 10
    assert "int4 gptq x2" in result.method and "int8 rtn x1" in result.method


@pytest.mark.parametrize("scheme", ["w4afp32", "dynamic", "fp16"])
def test_other_schemes_run_in_litert(model, data, scheme):
    result = quantize_tflite(model, data[0], QuantConfig(scheme=scheme, layer_report=False),
                             data[1])
    assert result.validation["sqnr_db"] is None or result.validation["sqnr_db"] > 15
    assert result.method.startswith(f"{scheme}: weights")


def test_accuracy_budget_meets_an_sqnr_floor_with_the_smallest_mix(model, data):
    result = quantize_tflite(model, data[0], QuantConfig(scheme="w8a8", method="minmax",
                                                         accuracy_budget=30.0,
                                                         layer_report=False), data[1])
    search = result.search
    assert search["met"] and search["steps"][0]["raised_layers"] == 0
    assert result.validation["sqnr_db"] >= 30.0
    chosen = [s for s in search["steps"] if s["meets_budget"]]
    assert min(s["size_bytes"] for s in chosen) == len(result.model)


def test_a_litert_prepare_failure_names_the_layer_it_blamed(model):
    from edgeopt.calibration.tflite_format import TFLiteFormat

    fmt = TFLiteFormat(model)
    error = RuntimeError("tensorflow/lite/kernels/conv.cc:350 ... \nNode number 1 "
                         "(DEPTHWISE_CONV_2D) failed to prepare.")
    rejected = fmt._rejected(model, error)
    assert rejected.tensor == read_graph(model).layers[1].output
    assert "LiteRT rejected" in str(rejected)


def test_capture_stream_batches_hold_every_tensor_sample_by_sample(model, data):
    """The stream joins each tensor's samples into batches (and drops them as it goes):
    every batch, the last short one too, holds every wanted tensor, each sample's values
    those of that sample run alone."""
    from ai_edge_litert.interpreter import Interpreter

    from edgeopt.calibration.tflite_backend import TFLiteCapture

    images = data[0]["image"][:11]
    graph = read_graph(model)
    wanted = set(graph.activations)
    batches = list(TFLiteCapture(model).stream({"image": images}, wanted, batch_size=4))
    assert [len(next(iter(b.values()))) for b in batches] == [4, 4, 3]
    assert all(set(b) == wanted for b in batches)
    alone = Interpreter(model_content=model, experimental_preserve_all_tensors=True)
    alone.allocate_tensors()
    details = {d["name"]: d["index"] for d in alone.get_tensor_details()}
    index = alone.get_input_details()[0]["index"]
    for i, image in enumerate(images):
        alone.set_tensor(index, image[None])
        alone.invoke()
        for name in wanted:
            assert np.array_equal(batches[i // 4][name][i % 4], alone.get_tensor(details[name])[0])
