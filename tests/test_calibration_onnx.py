"""The `.onnx` path with onnxruntime (quantize_static/dynamic, QDQ) on tiny models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeopt.calibration.onnx_format import OnnxFormat
from edgeopt.calibration.weights import quantize_rtn
from edgeopt.errors import DataError
from edgeopt.quantize import QuantConfig, quantize_onnx


def deeper_onnx(path: Path, seed: int = 0) -> Path:
    """Conv -> Relu -> depthwise Conv -> Relu -> GAP -> Gemm(8->64) -> Relu -> Gemm(64->4)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)

    weights = [init("w1", 8, 3, 3, 3), init("b1", 8, scale=0.1), init("w2", 8, 1, 3, 3),
               init("b2", 8, scale=0.1), init("fc1", 8, 64), init("fc1b", 64, scale=0.1),
               init("fc2", 4, 64), init("fc2b", 4, scale=0.1)]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc1", "fc1b"], ["g1"]),
        helper.make_node("Relu", ["g1"], ["r3"]),
        helper.make_node("Gemm", ["r3", "fc2", "fc2b"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "deeper",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 4])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> Path:
    return deeper_onnx(tmp_path_factory.mktemp("onnxq") / "deeper.onnx")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(2)
    images = rng.random((48, 3, 16, 16), dtype=np.float32)
    return {"input": images[:32]}, {"input": images[32:]}


def initializers(content: bytes) -> dict:
    import onnx
    from onnx import numpy_helper

    return {t.name: (numpy_helper.to_array(t), t.data_type)
            for t in onnx.load_from_string(content).graph.initializer}


def test_w8a8_qdq_holds_the_cores_codes_and_runs(model_path, data):
    result = quantize_onnx(model_path, data[0], QuantConfig(method="minmax", isolate_layers=2),
                           data[1])
    fmt = OnnxFormat(model_path)
    stored = initializers(result.model)
    for layer in fmt.graph.layers:
        expected = quantize_rtn(fmt.graph.weights[layer.weight], 8).codes
        values, _ = stored[layer.weight + "_quantized"]
        zero_points, _ = stored[layer.weight + "_zero_point"]
        assert set(zero_points.tolist()) == {128}  # 8-bit weights are stored as uint8
        codes = values.astype(np.int16) - 128
        assert np.array_equal(codes if codes.shape == expected.shape else codes.T, expected)
    assert result.validation["runtime"] == "onnxruntime (CPU)"
    assert result.validation["sqnr_db"] > 25
    assert all(e["sqnr_db"] is not None for e in result.layer_report)


def test_w4a8_writes_int4_weights_except_depthwise(model_path, data):
    from onnx import TensorProto

    result = quantize_onnx(model_path, data[0], QuantConfig(scheme="w4a8", method="minmax",
                                                            layer_report=False), data[1])
    stored = initializers(result.model)
    assert stored["w1_quantized"][1] == TensorProto.INT4
    assert stored["w2_quantized"][1] == TensorProto.UINT8  # 8-bit weights: uint8 around 128
    assert stored["fc2_quantized"][1] == TensorProto.INT4
    assert result.validation["sqnr_db"] > 10


def test_weight_only_blockwise_for_dense_layers(model_path, data):
    from onnx import TensorProto

    result = quantize_onnx(model_path, data[0], QuantConfig(scheme="w4afp32", block_size=32,
                                                            layer_report=False), data[1])
    stored = initializers(result.model)
    assert stored["fc2_q"][1] == TensorProto.INT4
    assert stored["fc2_scale"][0].shape == (4, 2)        # 64 inputs in blocks of 32
    assert stored["fc1_scale"][0].shape == (64,)         # 8 inputs: per channel
    assert result.validation["sqnr_db"] > 15


@pytest.mark.parametrize("scheme", ["dynamic", "fp16"])
def test_dynamic_and_fp16_run_in_onnxruntime(model_path, data, scheme):
    result = quantize_onnx(model_path, data[0], QuantConfig(scheme=scheme, layer_report=False),
                           data[1])
    assert result.validation["sqnr_db"] > 20


def test_report_compares_after_the_relu_qdq_folds_in(model_path):
    fmt = OnnxFormat(model_path)
    first = fmt.graph.layers[0]
    assert fmt.report_tensor(first) != first.output


def test_missing_input_is_a_data_error(model_path):
    fmt = OnnxFormat(model_path)
    with pytest.raises(DataError, match="input"):
        next(fmt.capture().stream({"other": np.zeros((2, 3, 16, 16), np.float32)}, {"c1"}))
