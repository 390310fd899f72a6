"""Float `.tflite` files as apps ship them (issue 20, class 2 and kin) are read as a plain
float32 graph: fp16 / int8 weights behind DEQUANTIZE and sparse weights behind DENSIFY
folded to float32 constants, MediaPipe's Convolution2DTransposeBias written as builtin
TRANSPOSE_CONV, repeated tensor names made unique, a signature added when missing.

Each tiny model is made here (the TFLite converter or the flatbuffer schema) and quantized
through `edgeopt quantize`'s own path; before edgeopt.tflite_prepare each one failed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgeopt.calibration.tflite_buffers import float_constants
from edgeopt.devices.tflite_writer import GraphWriter, options
from edgeopt.errors import ConversionError
from edgeopt.inspect import inspect_model
from edgeopt.model import load_model, tflite_interpreter
from edgeopt.quantize import QuantizeRequest, quantize_file
from edgeopt.tflite_prepare import _verify, prepare_tflite
from edgeopt.tflite_reader import read_tflite

pytestmark = pytest.mark.slow


def _keras_cnn(sparse: bool):
    from conftest import tiny_cnn

    model = tiny_cnn((8, 8, 3))
    if sparse:  # 80% zeros in the first convolution: the converter stores it sparse
        kernel, bias = model.layers[1].get_weights()
        kernel[np.random.default_rng(0).random(kernel.shape) < 0.8] = 0
        model.layers[1].set_weights([kernel, bias])
    return model


def _convert(model, fp16: bool, sparse: bool) -> bytes:
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = ([tf.lite.Optimize.EXPERIMENTAL_SPARSITY] if sparse else []) + \
        ([tf.lite.Optimize.DEFAULT] if fp16 else [])
    if fp16:
        converter.target_spec.supported_types = [tf.float16]
    return converter.convert()


def _without_signature(content: bytes) -> bytes:
    """As MediaPipe ships its models: no SignatureDef."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(content, 0))
    model.signatureDefs = None
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _run(content: bytes, x: np.ndarray) -> list[np.ndarray]:
    interpreter = tflite_interpreter(content)
    detail = interpreter.get_input_details()[0]
    interpreter.set_tensor(detail["index"], x.astype(detail["dtype"]))
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def _quantize(tmp_path, content: bytes, shape: tuple[int, ...]) -> dict:
    """`edgeopt quantize` of the file: the w8a8 model LiteRT loads, and the JSON record."""
    model, calib, out = tmp_path / "app.tflite", tmp_path / "calib.npz", tmp_path / "q.tflite"
    model.write_bytes(content)
    name = load_model(model).inputs[0].name
    np.savez(calib, **{name: np.random.default_rng(1).random((16, *shape[1:]), np.float32)})
    record = quantize_file(QuantizeRequest(model=str(model), calib=str(calib),
                                           output=str(out), method="minmax"))
    quantized = read_tflite(out.read_bytes())
    weights = [quantized.tensor(op.inputs[1]) for op in quantized.ops
               if op.op in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV")]
    assert weights and all(w.dtype == "int8" and w.quantization is not None for w in weights)
    # Weights are symmetric int8: a zero point of -128 (an activation's) makes LiteRT refuse.
    assert all(set(w.quantization.zero_point) == {0} for w in weights)
    x = np.random.default_rng(2).random((1, *shape[1:]), np.float32)
    assert all(np.isfinite(o).all() for o in _run(out.read_bytes(), x))
    return record


@pytest.mark.parametrize("sparse", [False, True], ids=["fp16", "fp16_sparse"])
def test_fp16_weights_behind_dequantize_fold_and_quantize(tmp_path, sparse):
    original = _without_signature(_convert(_keras_cnn(sparse), fp16=True, sparse=sparse))
    ops = read_tflite(original).op_histogram()
    assert ops["DEQUANTIZE"] >= 3 and (ops.get("DENSIFY", 0) >= 1) == sparse
    prepared = prepare_tflite(original)
    graph = read_tflite(prepared.content)
    assert "DEQUANTIZE" not in graph.op_histogram() and "DENSIFY" not in graph.op_histogram()
    assert not any(t.dtype == "float16" for t in graph.tensors)
    assert graph.metadata["signatures"][0]["key"] == "serving_default"
    assert any("fp16 DEQUANTIZE" in n for n in prepared.notes)
    assert any("added a signature" in n for n in prepared.notes)
    x = np.random.default_rng(3).random((1, 8, 8, 3), np.float32)
    np.testing.assert_allclose(_run(prepared.content, x)[0], _run(original, x)[0],
                               rtol=1e-5, atol=1e-6)
    record = _quantize(tmp_path, original, (1, 8, 8, 3))
    assert any("fp16 DEQUANTIZE" in n for n in record["source"]["prepared"])


def test_dense_float_model_from_sparse_weights_matches(tmp_path):
    """DENSIFY of a float32 sparse constant (no fp16) folds to the same dense weights."""
    original = _convert(_keras_cnn(True), fp16=False, sparse=True)
    assert read_tflite(original).op_histogram().get("DENSIFY") == 1
    prepared = prepare_tflite(original)
    assert "DENSIFY" not in read_tflite(prepared.content).op_histogram()
    x = np.random.default_rng(4).random((1, 8, 8, 3), np.float32)
    np.testing.assert_allclose(_run(prepared.content, x)[0], _run(original, x)[0],
                               rtol=1e-5, atol=1e-6)


def _fc_graph(weight_only: bool, duplicate_names: bool) -> bytes:
    """x [1, 6] -> FULLY_CONNECTED(w [4, 6]) -> y; w int8 behind DEQUANTIZE when asked."""
    rng = np.random.default_rng(5)
    g = GraphWriter("float32")
    x, y = g.activation((1, 6)), g.activation((1, 4))
    codes = rng.integers(-127, 128, (4, 6)).astype(np.int8)
    scales = np.array([0.01, 0.02, 0.03, 0.04], np.float32)
    if weight_only:
        q = g.tensor((4, 6), "int8", codes, scale=scales, zero_point=0, axis=0)
        w = g.activation((4, 6))
        g.op("DEQUANTIZE", [q], [w], version=2)
    else:
        w = g.tensor((4, 6), "float32", codes.astype(np.float32) * scales[:, None])
    g.op("FULLY_CONNECTED", [x, w, -1], [y], options("FullyConnectedOptions"))
    if duplicate_names:  # as openWakeWord's files repeat "arg0" across subgraphs
        for index in (x, w):
            g.tensors[index].name = "arg0"
    return g.build([x], [y])


def test_int8_weight_only_dequantize_folds_to_float(tmp_path):
    original = _fc_graph(weight_only=True, duplicate_names=False)
    prepared = prepare_tflite(original)
    assert read_tflite(prepared.content).op_histogram() == {"FULLY_CONNECTED": 1}
    assert any("int8-weight-only DEQUANTIZE" in n for n in prepared.notes)
    x = np.random.default_rng(6).random((1, 6), np.float32)
    np.testing.assert_allclose(_run(prepared.content, x)[0],
                               _run(_fc_graph(False, False), x)[0], rtol=1e-6)
    _quantize(tmp_path, original, (1, 6))


def test_repeated_tensor_names_are_made_unique(tmp_path):
    original = _fc_graph(weight_only=False, duplicate_names=True)
    prepared = prepare_tflite(original)
    names = [t.name for t in read_tflite(prepared.content).tensors]
    assert len(set(names)) == len(names) and "arg0" in names
    assert any("renamed 1 repeated" in n for n in prepared.notes)
    record = _quantize(tmp_path, original, (1, 6))
    assert record["scheme"] == "w8a8"


def test_unnamed_tensors_are_named(tmp_path):
    original = _fc_graph(weight_only=False, duplicate_names=False)
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(original, 0))
    model.subgraphs[0].tensors[1].name = None  # once an AttributeError in ai-edge-quantizer
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    unnamed = bytes(builder.Output())
    prepared = prepare_tflite(unnamed)
    assert all(t.name for t in read_tflite(prepared.content).tensors)
    assert any("named 1 unnamed" in n for n in prepared.notes)
    _quantize(tmp_path, unnamed, (1, 6))


def test_signature_names_stay_when_tensors_are_renamed():
    from ai_edge_litert import schema_py_generated as schema

    original = _convert(_keras_cnn(False), fp16=False, sparse=False)
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(original, 0))
    before = read_tflite(original).metadata["signatures"][0]
    for tensor in model.subgraphs[0].tensors:  # every tensor named alike
        tensor.name = b"same"
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    after = read_tflite(prepare_tflite(bytes(builder.Output())).content).metadata["signatures"]
    assert [set(after[0]["inputs"]), set(after[0]["outputs"])] == \
        [set(before["inputs"]), set(before["outputs"])]


def _transpose_conv_graph(custom: bool) -> bytes:
    """x [1, 4, 4, 3] -> stride-2 SAME transpose convolution to [1, 8, 8, 2], plus bias:
    MediaPipe's custom op, or builtin TRANSPOSE_CONV followed by ADD."""
    import struct

    from ai_edge_litert import schema_py_generated as schema

    rng = np.random.default_rng(7)
    g = GraphWriter("float32")
    x, y = g.activation((1, 4, 4, 3)), g.activation((1, 8, 8, 2))
    w = g.tensor((2, 3, 3, 3), "float32", rng.normal(size=(2, 3, 3, 3)).astype(np.float32))
    b = g.tensor((2,), "float32", np.array([0.5, -1.25], np.float32))
    if not custom:
        shape = g.tensor((4,), "int32", np.array([1, 8, 8, 2], np.int32))
        mid = g.activation((1, 8, 8, 2))
        g.op("TRANSPOSE_CONV", [shape, w, x], [mid],
             options("TransposeConvOptions", padding=0, strideW=2, strideH=2))
        g.op("ADD", [mid, b], [y], options("AddOptions"))
        return g.build([x], [y])
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
    code.customCode, code.version = b"Convolution2DTransposeBias", 1
    g.codes[("custom", 1)] = (len(g.codes), code)
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [x, w, b], [y]
    op.customOptions = list(struct.pack("<iii", 1, 2, 2))  # TfLitePadding SAME, strides 2, 2
    g.ops.append(op)
    return g.build([x], [y])


def test_transpose_conv_bias_custom_op_becomes_builtin_transpose_conv(tmp_path):
    original = _transpose_conv_graph(custom=True)
    prepared = prepare_tflite(original)
    graph = read_tflite(prepared.content)
    assert graph.op_histogram() == {"TRANSPOSE_CONV": 1}
    assert any("Convolution2DTransposeBias" in n for n in prepared.notes)
    x = np.random.default_rng(8).normal(size=(1, 4, 4, 3)).astype(np.float32)
    expected = _run(_transpose_conv_graph(custom=False), x)[0]
    np.testing.assert_allclose(_run(prepared.content, x)[0], expected, rtol=1e-5, atol=1e-5)
    # The model file itself now loads, inspects and quantizes.
    path = tmp_path / "seg.tflite"
    path.write_bytes(original)
    assert load_model(path).outputs[0].shape == (1, 8, 8, 2)
    record = inspect_model(str(path))
    assert record["op_histogram"] == {"TRANSPOSE_CONV": 1}
    assert "as prepared" in record["graph_read_from"]
    _quantize(tmp_path, original, (1, 4, 4, 3))


def test_a_rewrite_that_changes_the_outputs_is_refused():
    """The check runs in the code path: a model whose weights differ is not passed off."""
    original = _fc_graph(weight_only=False, duplicate_names=False)
    other = prepare_tflite(_fc_graph(weight_only=True, duplicate_names=False)).content
    assert _verify(original, original).startswith("checked")
    wrong = bytearray(other)
    location = next(iter(float_constants(other).values()))  # the folded weight
    wrong[location.start:location.start + location.nbytes] = \
        (np.ones(location.nbytes // 4, np.float32) * 3).tobytes()
    with pytest.raises(ConversionError, match="changes output 0"):
        _verify(original, bytes(wrong))


def test_a_plain_float_model_is_read_as_it_is(tiny_float_tflite):
    content = tiny_float_tflite.read_bytes()
    prepared = prepare_tflite(content)
    assert prepared.content == content and not prepared.changed
    assert load_model(tiny_float_tflite).prepared is None


# --- already quantized: dynamic range (weights only) and full integer ---------------------

def _dense_net():
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((32,), name="features")
    x = keras.layers.Dense(64, activation="relu")(inputs)  # 2048 weights: the converter
    outputs = keras.layers.Dense(40)(x)                    # quantizes tensors of >= 1024
    return keras.Model(inputs, outputs)


def _quantized_tflite(full_integer: bool) -> bytes:
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_keras_model(_dense_net())
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if full_integer:
        rng = np.random.default_rng(9)
        converter.representative_dataset = lambda: (
            [rng.random((1, 32), np.float32)] for _ in range(16))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = converter.inference_output_type = tf.int8
    return converter.convert()


def test_dynamic_range_model_is_read_as_its_float_graph_and_quantizes(tmp_path):
    original = _quantized_tflite(full_integer=False)
    graph = read_tflite(original)
    assert any(t.is_constant and t.dtype == "int8" for t in graph.tensors)
    prepared = prepare_tflite(original)
    assert not any(t.is_constant and t.dtype == "int8"
                   for t in read_tflite(prepared.content).tensors)
    assert any("dynamic-range" in n for n in prepared.notes)
    assert any("activation rounding" in n for n in prepared.notes)
    _quantize(tmp_path, original, (1, 32))


def test_full_integer_model_builds_as_given_and_quantize_says_what_to_do(tmp_path, run_cli):
    from conftest import assert_user_error

    model, calib = tmp_path / "kws_int8.tflite", tmp_path / "calib.npz"
    model.write_bytes(_quantized_tflite(full_integer=True))
    name = load_model(model).inputs[0].name
    samples = np.random.default_rng(10).integers(-128, 128, (40, 32)).astype(np.int8)
    np.savez(calib, **{name: samples})  # the int8 input's own codes, as an app feeds it
    result = run_cli("build", model, "--device", "pixel-npu", "--calib", calib,
                     "-o", tmp_path / "dist", "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((tmp_path / "dist" / "manifest.json").read_text())
    assert manifest["recipe"]["scheme"] == "w8a8 (as given)"
    assert manifest["validation"]["cosine"] == pytest.approx(1.0)
    assert manifest["placement"] is not None and manifest["estimate"] is not None
    assert (tmp_path / "dist" / "kws_int8.tflite").read_bytes() != b""
    other = run_cli("build", model, "--device", "host-cpu", "--calib", calib, "--scheme",
                    "fp16", "-o", tmp_path / "dist16")
    assert other.exit_code == 2 and "already quantized" in other.stderr
    quantized = run_cli("quantize", model, "--calib", calib, "-o", tmp_path / "q.tflite")
    assert_user_error(quantized, "already quantized (w8a8")
    assert not (tmp_path / "q.tflite").exists()
