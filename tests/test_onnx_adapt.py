"""Issue 20: an .onnx rewritten before the build — an input pinned to one value
(`--input-value`, folding the `If` it decides) and a dynamically quantized model
dequantized into its float model — on tiny models built here, with real onnxruntime,
onnxslim and onnx2tf."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import assert_user_error
from edgeopt.converters.onnx_adapt import adapt_onnx
from edgeopt.converters.onnx_dequantize import dequantize, is_dynamically_quantized
from edgeopt.converters.onnx_pin import held_inputs, value_decided_ifs
from edgeopt.converters.onnx_to_tf import check_convertible
from edgeopt.errors import ConfigError, ConversionError
from edgeopt.model import load_model
from edgeopt.runtime import OnnxRunner
from edgeopt.validate import cosine_similarity

RATE = 16000


def _branch(name: str, weight: str):
    from onnx import TensorProto as T
    from onnx import helper as h

    return h.make_graph([h.make_node("MatMul", ["x", weight], [f"{name}_y"])], name, [],
                        [h.make_tensor_value_info(f"{name}_y", T.FLOAT, [1, 4])])


def rate_model(path, seed: int = 0):
    """x [1, 8] and a scalar sample rate `sr`: `If sr == 16000` picks one of two weights
    (silero-vad's 8 kHz / 16 kHz branches), then Relu."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(seed)
    inits = [nh.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w16"),
             nh.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w8"),
             nh.from_array(np.array(RATE, np.int64), "rate")]
    nodes = [h.make_node("Equal", ["sr", "rate"], ["is16"]),
             h.make_node("If", ["is16"], ["z"], name="rate_if",
                         then_branch=_branch("then", "w16"), else_branch=_branch("else", "w8")),
             h.make_node("Relu", ["z"], ["y"])]
    graph = h.make_graph(nodes, "rate", [h.make_tensor_value_info("x", T.FLOAT, [1, 8]),
                                         h.make_tensor_value_info("sr", T.INT64, [])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 4])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def float_model(path, hidden: int = 8):
    """Conv -> Relu -> MatMul + bias -> LSTM: each op onnxruntime quantizes dynamically."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)

    def const(name, shape, scale):
        return nh.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [const("W", (4, 1, 3, 3), 0.5), const("B", (4,), 0.1), const("M", (144, 16), 0.2),
             const("MB", (16,), 0.1), const("LW", (1, 4 * hidden, 4), 0.3),
             const("LR", (1, 4 * hidden, hidden), 0.3), const("LB", (1, 8 * hidden), 0.1),
             nh.from_array(np.array([1, -1], np.int64), "flat"),
             nh.from_array(np.array([4, 1, 4], np.int64), "seq"),
             nh.from_array(np.zeros((1, 1, hidden), np.float32), "h0")]
    nodes = [h.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"]), h.make_node("Reshape", ["r", "flat"], ["f"]),
             h.make_node("MatMul", ["f", "M"], ["m"]), h.make_node("Add", ["m", "MB"], ["y"]),
             h.make_node("Reshape", ["y", "seq"], ["s"]),
             h.make_node("LSTM", ["s", "LW", "LR", "LB", "", "h0", "h0"], ["ly"],
                         hidden_size=hidden)]
    graph = h.make_graph(nodes, "float", [h.make_tensor_value_info("x", T.FLOAT, [1, 1, 6, 6])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 16]),
                          h.make_tensor_value_info("ly", T.FLOAT, [4, 1, 1, hidden])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def dynamic_model(tmp_path, per_channel: bool = False):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = tmp_path / "dynamic.onnx"
    quantize_dynamic(str(float_model(tmp_path / "float.onnx")), str(out),
                     weight_type=QuantType.QUInt8, per_channel=per_channel,
                     op_types_to_quantize=["Conv", "MatMul", "LSTM"])
    return out


@pytest.fixture
def rate_onnx(tmp_path):
    return rate_model(tmp_path / "rate.onnx")


def _x(count: int = 4) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((count, 8)).astype(np.float32)


# --- pinning -----------------------------------------------------------------------------

def test_value_decided_if_is_found_and_a_shape_decided_one_is_not(rate_onnx):
    import onnx

    assert value_decided_ifs(onnx.load(str(rate_onnx))) == [("rate_if", ["sr"])]
    model = onnx.load(str(rate_onnx))  # the same If on Shape(x)[0] == 1: shapes decide it
    from onnx import helper as h
    from onnx import numpy_helper as nh

    model.graph.initializer.extend([nh.from_array(np.array([0], np.int64), "zero"),
                                    nh.from_array(np.array([1], np.int64), "one")])
    model.graph.node[0].CopyFrom(h.make_node("Equal", ["batch", "one"], ["is16"]))
    model.graph.node.insert(0, h.make_node("Gather", ["shape", "zero"], ["batch"]))
    model.graph.node.insert(0, h.make_node("Shape", ["x"], ["shape"]))
    assert value_decided_ifs(model) == []


def test_the_converter_names_the_input_and_the_flag(rate_onnx):
    with pytest.raises(ConversionError, match=r"input 'sr'.*--input-value sr=VALUE"):
        check_convertible(rate_onnx)


def test_pinning_folds_the_if_and_drops_the_input(rate_onnx):
    import onnx

    handle, values = held_inputs(load_model(rate_onnx), ("sr=16000",))
    assert [s.name for s in handle.inputs] == ["x"]
    pinned = adapt_onnx(handle, values, {"x": _x()})
    model = onnx.load(str(pinned.path))
    assert [i.name for i in model.graph.input] == ["x"]
    assert not any(n.op_type == "If" for n in model.graph.node)
    original = OnnxRunner(rate_onnx).run({"x": _x(), "sr": np.full(4, RATE, np.int64)})
    np.testing.assert_allclose(OnnxRunner(pinned.path).run({"x": _x()})[0], original[0],
                               rtol=1e-6)
    record = pinned.adaptation
    assert record["pinned_inputs"] == {"sr": RATE}
    assert record["parity"]["cosine"] > 0.9999 and record["parity"]["samples"] == 4
    assert "must not feed" in record["notes"][0]
    assert rate_onnx.read_bytes() == rate_model(rate_onnx.with_name("again.onnx")).read_bytes()


def test_the_other_branch_is_the_other_value(rate_onnx):
    handle, values = held_inputs(load_model(rate_onnx), ("sr=8000",))
    pinned = adapt_onnx(handle, values, {"x": _x()})
    original = OnnxRunner(rate_onnx).run({"x": _x(), "sr": np.full(4, 8000, np.int64)})
    np.testing.assert_allclose(OnnxRunner(pinned.path).run({"x": _x()})[0], original[0],
                               rtol=1e-6)


@pytest.mark.parametrize("flag, fragment", [
    ("rate=16000", "names 'rate', but the model's inputs are x, sr"),
    ("sr=16k", "'16k' is not an integer"),
    ("sr=1.5", "'1.5' is not an integer"),
    ("sr", "expected NAME=VALUE"),
    ("x=1", "only an input that holds one value"),
])
def test_bad_values_are_one_error_line(run_cli, rate_onnx, flag, fragment):
    with pytest.raises(ConfigError):
        held_inputs(load_model(rate_onnx), (flag,))
    assert_user_error(run_cli("inspect", rate_onnx, "--input-value", flag), fragment)


def test_pinning_needs_an_onnx_model(run_cli, tiny_keras_path):
    assert_user_error(run_cli("inspect", tiny_keras_path, "--input-value", "x=1"),
                      "pins an input of an .onnx model")


def test_inspect_shows_the_pinned_model(run_cli, rate_onnx):
    result = run_cli("inspect", rate_onnx, "--input-value", "sr=16000", "--json")
    record = json.loads(result.stdout)
    assert [i["name"] for i in record["inputs"]] == ["x"]
    assert "If" not in record["op_histogram"]
    assert record["model"] == str(rate_onnx)
    assert record["onnx_rewrite"]["pinned_inputs"] == {"sr": RATE}


@pytest.mark.slow
def test_a_value_decided_if_builds_for_the_npu_once_pinned(run_cli, rate_onnx, tmp_path):
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.random.default_rng(2).standard_normal((40, 8)).astype(np.float32),
             sr=np.array(RATE, np.int64))
    assert_user_error(run_cli("build", rate_onnx, "--device", "pixel-npu", "--calib", calib,
                              "-o", tmp_path / "refused"), "--input-value sr=")
    assert not (tmp_path / "refused").exists()
    result = run_cli("build", rate_onnx, "--device", "pixel-npu", "--calib", calib,
                     "--input-value", "sr=16000", "-o", tmp_path / "out", "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["x"]
    assert manifest["onnx_rewrite"]["pinned_inputs"] == {"sr": RATE}
    assert manifest["source"]["file"] == "rate.onnx"
    assert any("must not feed" in note for note in manifest["notes"])
    assert manifest["validation"]["sqnr_db"] > 20


# --- dequantizing ------------------------------------------------------------------------

@pytest.mark.parametrize("per_channel", [False, True])
def test_dynamic_quantization_is_undone(tmp_path, per_channel):
    import onnx
    from onnx import numpy_helper as nh

    path = dynamic_model(tmp_path, per_channel)
    model = onnx.load(str(path))
    assert is_dynamically_quantized(model)
    assert dequantize(model) == {"ConvInteger": 1, "MatMulInteger": 1, "DynamicQuantizeLSTM": 1}
    onnx.checker.check_model(model)
    assert {n.op_type for n in model.graph.node} >= {"Conv", "MatMul", "LSTM"}
    assert not is_dynamically_quantized(model)
    weights = {t.name: nh.to_array(t) for t in model.graph.initializer}
    for t in onnx.load(str(tmp_path / "float.onnx")).graph.initializer:
        if t.name in ("W", "M", "LW", "LR"):  # each weight back, within half a step
            ref = nh.to_array(t)
            got = next(w for n, w in weights.items() if n.endswith("dequantized_weight")
                       or n.endswith(f"dequantized_{t.name[1:]}")
                       if w.shape == ref.shape and np.abs(w - ref).max() < np.ptp(ref))
            step = np.abs(ref).max() / 127  # an int8 step; a uint8 one is smaller
            assert np.abs(got - ref).max() <= step / 2 * 1.01, t.name
    x = np.random.default_rng(3).standard_normal((1, 1, 6, 6)).astype(np.float32)
    floats = OnnxRunner(tmp_path / "float.onnx").run({"x": x})
    back = OnnxRunner(model.SerializeToString()).run({"x": x})
    for ref, got in zip(floats, back):
        assert cosine_similarity(ref, got) > 0.99


def test_a_static_model_is_not_dequantized(tmp_path):
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.feeds = iter([{"x": rng.standard_normal((1, 1, 6, 6)).astype(np.float32)}
                               for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    out = tmp_path / "static.onnx"
    quantize_static(str(float_model(tmp_path / "float.onnx")), str(out), Reader(),
                    op_types_to_quantize=["Conv", "MatMul"])
    assert not is_dynamically_quantized(onnx.load(str(out)))
    assert adapt_onnx(load_model(out), {}, None).adaptation is None


def test_adapt_records_the_measured_difference(tmp_path):
    path = dynamic_model(tmp_path)
    x = np.random.default_rng(4).standard_normal((6, 1, 6, 6)).astype(np.float32)
    handle = adapt_onnx(load_model(path), {}, {"x": x})
    record = handle.adaptation
    assert record["dequantized_ops"] == {"ConvInteger": 1, "MatMulInteger": 1,
                                         "DynamicQuantizeLSTM": 1}
    assert 0.99 < record["parity"]["cosine"] < 1 and record["parity"]["max_abs"] > 0
    assert "close, not equal" in record["notes"][-1]
    assert f"{record['parity']['cosine']:.6f}" in record["notes"][-1]
    assert record["original_bytes"] == path.stat().st_size


@pytest.mark.slow
def test_a_dynamically_quantized_model_builds(run_cli, tmp_path):
    path = dynamic_model(tmp_path)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.random.default_rng(5).standard_normal((40, 1, 1, 6, 6)).astype(
        np.float32).reshape(40, 1, 6, 6))
    for args, name in ((("--device", "pixel-npu"), "npu"),
                       (("--format", "onnx", "--device", "host-cpu"), "cpu")):
        result = run_cli("build", path, *args, "--calib", calib, "-o", tmp_path / name)
        assert result.exit_code == 0, result.stderr
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        assert manifest["onnx_rewrite"]["dequantized_ops"]["DynamicQuantizeLSTM"] == 1
        assert manifest["recipe"]["scheme"] == "w8a8"
        assert any("dynamically quantized" in note for note in manifest["notes"])
