"""The QDQ `.onnx` that edgeopt writes: it holds the core's numbers, and onnxruntime's
int8 kernels compute what its QuantizeLinear/DequantizeLinear nodes say."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeopt.calibration import onnx_static, onnx_writer
from edgeopt.calibration.config import Mode, Precision
from edgeopt.calibration.onnx_format import OnnxFormat
from edgeopt.calibration.plan import LayerPlan, QuantPlan
from edgeopt.calibration.weights import quantize_rtn
from edgeopt.quantize import QuantConfig, quantize_onnx


def _initializers(model) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _session(content: bytes, optimized: bool):
    import onnxruntime as ort

    options = ort.SessionOptions()
    if not optimized:  # QuantizeLinear/DequantizeLinear run as written: the reference
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(content, options, providers=["CPUExecutionProvider"])


def _run(content: bytes, x: np.ndarray, optimized: bool) -> np.ndarray:
    run = _session(content, optimized)
    return run.run(None, {run.get_inputs()[0].name: x})[0]


def _sqnr_db(reference: np.ndarray, other: np.ndarray) -> float:
    noise = float(np.sum((reference - other) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(np.sum(reference ** 2) / noise)


@pytest.fixture(scope="module")
def tiny(tiny_onnx_path) -> OnnxFormat:
    return OnnxFormat(tiny_onnx_path)


def _plan(fmt: OnnxFormat) -> QuantPlan:
    """Round-to-nearest int8 weights and a distinct range per activation tensor."""
    layers = {la.name: LayerPlan(Precision.INT8, quantize_rtn(fmt.graph.weights[la.weight], 8))
              for la in fmt.graph.layers}
    ranges = {name: (-0.5 - 0.25 * i, 1.0 + 0.5 * i)
              for i, name in enumerate(fmt.graph.activations)}
    return QuantPlan(Mode.STATIC, 8, ranges, layers)


def test_qdq_scales_and_zero_points_are_the_cores_ranges(tiny):
    import onnx

    plan = _plan(tiny)
    model = onnx.load_from_string(onnx_writer.write(tiny.float_model, tiny.graph, plan))
    inits = _initializers(model)
    checked = 0
    for node in model.graph.node:
        tensor = node.input[0]
        if node.op_type != "QuantizeLinear" or node.input[1] != f"{tensor}_scale":
            continue  # a scale shared from the producer (MaxPool, Flatten) is checked there
        lo, hi = plan.activation_ranges[tensor]
        scale, zero_point = inits[node.input[1]], inits[node.input[2]]
        assert float(scale) == pytest.approx((hi - lo) / 255, rel=1e-6), tensor
        assert int(zero_point) == round(np.iinfo(zero_point.dtype).min - lo / scale), tensor
        checked += 1
    assert checked >= 3
    for layer in tiny.graph.layers:
        quant = plan.layers[layer.name].weight
        np.testing.assert_allclose(inits[f"{layer.weight}_scale"], quant.scale, rtol=1e-6)
        stored = inits[f"{layer.weight}_quantized"]
        stored = stored if stored.shape == quant.codes.shape else stored.T  # Gemm (K, N)
        zero_points = inits[f"{layer.weight}_zero_point"]
        codes = stored.astype(np.int16) - zero_points.reshape(-1, *[1] * (stored.ndim - 1))
        assert np.array_equal(codes, quant.codes), layer.name


def saturating_onnx(path: Path) -> Path:
    """One Conv over 16 channels with large positive weights, fed by inputs near 1.

    Pairs of uint8 x int8 products then exceed int16, which VPMADDUBSW (onnxruntime's x86
    kernel without VNNI) saturates: the shape of the digits sample's first conv, distilled.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    weight = rng.uniform(0.6, 1.0, (4, 16, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])], "saturating",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.zeros(4, np.float32),
                                                                       "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def saturating(tmp_path_factory):
    path = saturating_onnx(tmp_path_factory.mktemp("sat") / "saturating.onnx")
    rng = np.random.default_rng(4)
    x = np.clip(rng.uniform(0.7, 1.3, (24, 16, 8, 8)), 0, 1).astype(np.float32)
    return path, x


def _agrees_with_its_qdq_nodes(content: bytes, x: np.ndarray) -> float:
    return _sqnr_db(_run(content, x, optimized=False), _run(content, x, optimized=True))


def test_the_cores_qdq_model_computes_what_its_nodes_say(saturating):
    path, x = saturating
    result = quantize_onnx(path, {"x": x[:16]}, QuantConfig(method="minmax", layer_report=False),
                           {"x": x[16:]})
    assert _agrees_with_its_qdq_nodes(result.model, x) > 35
    assert result.validation["sqnr_db"] > 30


def test_onnxruntimes_own_qdq_model_computes_what_its_nodes_say(saturating, tmp_path):
    path, x = saturating
    out = tmp_path / "q.onnx"
    onnx_static.qdq_int8(path, out, {"x": x[:16]})
    assert _agrees_with_its_qdq_nodes(out.read_bytes(), x) > 35
