"""`edgeopt quantize` says how the artifact's inputs and outputs are laid out against the
source's: onnx2tf turns a 3-D [N, C, W] input into [N, W, C] (basic-pitch's audio
[1, 43844, 1] became [1, 1, 43844]) and an app that feeds the source layout is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgeopt.quantize import summary

pytestmark = pytest.mark.slow  # ~12 s: a quantize and a build of a tiny ONNX model (class 5)


def _conv1d_onnx(path, channels: int = 4, width: int = 16, filters: int = 8):
    """A Conv1D net over [N, C, W], as PyTorch writes it: Conv, Relu."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(0, 0.4, (filters, channels, 3))
                                       .astype(np.float32), "w"),
               numpy_helper.from_array(rng.normal(0, 0.1, filters).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["audio", "w", "b"], ["c"], pads=[1, 1]),
             helper.make_node("Relu", ["c"], ["features"])]
    graph = helper.make_graph(
        nodes, "conv1d", [helper.make_tensor_value_info("audio", TensorProto.FLOAT,
                                                        ["N", channels, width])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", filters, width])],
        weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """(record, artifact path, samples, source path) of a w8a8 quantize of the Conv1D net."""
    from click.testing import CliRunner

    from edgeopt.cli import cli

    folder = tmp_path_factory.mktemp("layout")
    source = _conv1d_onnx(folder / "conv1d.onnx")
    samples = np.random.default_rng(1).random((24, 4, 16), dtype=np.float32)
    np.savez(folder / "calib.npz", audio=samples)
    out = folder / "q.tflite"
    result = CliRunner().invoke(cli, ["quantize", str(source), "--calib",
                                      str(folder / "calib.npz"), "--method", "minmax",
                                      "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), out, samples, source


def test_quantize_json_records_the_moved_input_and_output(quantized):
    record = quantized[0]
    [inp], [outp] = record["layout"]["inputs"], record["layout"]["outputs"]
    assert record["layout"]["changed"] is True
    assert inp["name"] == "audio" and inp["source_shape"][1:] == [4, 16]
    assert inp["shape"] == [1, 16, 4] and inp["transpose"] == [0, 2, 1]
    assert outp["name"] == "features" and outp["shape"] == [1, 16, 8]
    assert outp["transpose"] == [0, 2, 1]


def test_the_record_is_enough_to_run_the_artifact_like_the_source(quantized):
    """Fed as the record says (transpose, signature key), the artifact runs and its output,
    moved back, follows the float source."""
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    record, artifact, samples, source = quantized
    [inp], [outp] = record["layout"]["inputs"], record["layout"]["outputs"]
    x = samples[:1]
    runner = Interpreter(str(artifact)).get_signature_runner()
    got = runner(**{inp["signature_key"]: np.transpose(x, inp["transpose"])})
    [value] = got.values()
    moved_back = np.transpose(value, np.argsort(outp["transpose"]))
    [want] = ort.InferenceSession(str(source)).run(None, {"audio": x})
    assert moved_back.shape == want.shape
    cosine = float(np.dot(moved_back.ravel(), want.ravel())
                   / np.linalg.norm(moved_back) / np.linalg.norm(want))
    assert cosine > 0.99


def test_quantize_text_output_says_the_layout_moved(quantized):
    text = summary(quantized[0])
    assert "layout    input audio: source" in text and "artifact [1, 16, 4]" in text
    assert "layout    output features: artifact [1, 16, 8]" in text


def test_an_unmoved_model_says_nothing_of_layout(run_cli, tmp_path):
    """An .onnx artifact keeps the source's layout: the record says so, the text is quiet."""
    from conftest import SAMPLES

    out = tmp_path / "q.onnx"
    result = run_cli("quantize", SAMPLES / "digits_cnn.onnx", "--calib",
                     SAMPLES / "digits_calib.npz", "--method", "minmax", "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["layout"]["changed"] is False
    assert all(row["transpose"] is None for row in record["layout"]["inputs"])
    assert not [line for line in summary(record).splitlines() if line.startswith("layout")]


def test_build_manifest_records_the_moved_output_too(run_cli, quantized, tmp_path):
    """The build manifest had conversion.input_layout_changes only: the app could not know
    that the artifact's output is [N, W, C] where the source's was [N, C, W]."""
    source, calib = quantized[3], quantized[3].parent / "calib.npz"
    result = run_cli("build", source, "--device", "pixel-npu", "--calib", calib,
                     "--method", "minmax", "-o", tmp_path / "dist", "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((tmp_path / "dist" / "manifest.json").read_text())
    conversion = manifest["conversion"]
    assert conversion["input_layout_changes"] == {"audio": [0, 2, 1]}
    assert conversion["output_layout_changes"] == {"features": [0, 2, 1]}
    assert [o["shape"] for o in manifest["outputs"]] == [[1, 16, 8]]
