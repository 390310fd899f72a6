"""The rewrite catalogue (edgeopt.rewrites) and the build's rewrite step: each rewrite on a
tiny float .tflite made by the TFLite converter, checked in LiteRT against the original;
the build keeps a rewrite only when the delegate runs more and the accuracy holds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgeopt import rewrites
from edgeopt.tflite_edit import opcode_name, pack, unpack


def _tflite(fn, *shapes) -> bytes:
    import tensorflow as tf

    specs = [tf.TensorSpec(s, tf.float32) for s in shapes]
    concrete = tf.function(fn, input_signature=specs).get_concrete_function()
    return tf.lite.TFLiteConverter.from_concrete_functions([concrete], fn).convert()


def _ops(content: bytes) -> list[str]:
    model = unpack(content)
    return [opcode_name(model, op)[0] for op in model.subgraphs[0].operators]


def _run(content: bytes, feeds: list[np.ndarray]) -> list[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=content)
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), feeds):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def _same_values(original: bytes, rewritten: bytes, shapes, rtol: float = 1e-6) -> None:
    rng = np.random.default_rng(0)
    feeds = [(rng.standard_normal(s) * 4).astype(np.float32) for s in shapes]
    for a, b in zip(_run(original, feeds), _run(rewritten, feeds)):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol * float(np.max(np.abs(a))))


def _retyped(content: bytes, old: str, new: str, options: str | None = None,
             axis: int | None = None, squeeze: bool = False) -> bytes:
    """The model with every `old` op written as a `new` op of the same meaning: how older
    converters and apps' shipped files write what today's converter writes otherwise."""
    from edgeopt.rewrites.edit import Edit
    from edgeopt.tflite_edit import opcode_index, schema

    model = unpack(content)
    edit = Edit(model, model.subgraphs[0])
    for op in model.subgraphs[0].operators:
        if opcode_name(model, op)[0] != old:
            continue
        op.opcodeIndex = opcode_index(model, new, 1)
        if axis is not None:  # RESHAPE -> EXPAND_DIMS(input, axis)
            op.inputs = [op.inputs[0], edit.constant_tensor(np.asarray(axis, np.int32), "axis")]
        if squeeze:  # RESHAPE -> SQUEEZE(input) along dimension 0
            op.inputs = [op.inputs[0]]
        if options is not None:
            fields = {"squeezeDims": [0]} if squeeze else {}
            kind, value = edit.options(options, **fields)
            op.builtinOptionsType = getattr(schema().BuiltinOptions, kind)
            op.builtinOptions = value
    return pack(model)


def _cases():
    import tensorflow as tf

    shape = (1, 6, 6, 4)
    return {
        "HARD_SWISH": ("hard_swish", lambda x: x * tf.nn.relu6(x + 3.0) / 6.0, [shape],
                       {"ADD", "RELU6", "MUL"}),
        "RELU_0_TO_1": ("relu_0_to_1", lambda x: tf.nn.relu(x) * 2.0, [shape],
                        {"MUL", "RELU6"}),
        "MINIMUM": ("minimum", lambda x: tf.minimum(tf.nn.relu(x), 1.5), [shape],
                    {"SUB", "RELU"}),
        "LEAKY_RELU": ("leaky_relu", lambda x: tf.nn.leaky_relu(x, 0.2), [shape],
                       {"MUL", "MAXIMUM"}),
        "NEG": ("arithmetic", lambda x: tf.nn.relu(-x), [shape], {"MUL"}),
        "SQUARE": ("arithmetic", lambda x: tf.square(x), [shape], {"MUL"}),
        "SQUARED_DIFFERENCE": ("arithmetic", lambda a, b: tf.math.squared_difference(a, b),
                               [shape, shape], {"SUB", "MUL"}),
        "EXPAND_DIMS": ("reshapes", lambda x: tf.expand_dims(tf.nn.relu(x), 1) * 2.0, [shape],
                        {"RESHAPE"}),
        "SQUEEZE": ("reshapes", lambda x: tf.squeeze(tf.nn.relu(x), 0) * 2.0, [shape],
                    {"RESHAPE"}),
    }


@pytest.mark.parametrize("op", ["HARD_SWISH", "RELU_0_TO_1", "MINIMUM", "LEAKY_RELU", "NEG",
                                "SQUARE",
                                "SQUARED_DIFFERENCE", "EXPAND_DIMS", "SQUEEZE"])
def test_each_op_rewrite_keeps_the_values(op):
    name, fn, shapes, emitted = _cases()[op]
    original = _tflite(fn, *shapes)
    if op == "RELU_0_TO_1":  # MediaPipe's models have it; today's converter writes RELU+MIN
        original = _retyped(original, "RELU", op)
    if op == "EXPAND_DIMS":
        original = _retyped(original, "RESHAPE", op, "ExpandDimsOptions", axis=1)
    if op == "SQUEEZE":
        original = _retyped(original, "RESHAPE", op, "SqueezeOptions", squeeze=True)
    assert op in _ops(original)  # the converter wrote the op the rewrite answers
    assert rewrites.wanted([(op, "op_in_table")]) == [name]
    rewritten, applied = rewrites.apply(original, [name])
    assert [a.name for a in applied] == [name] and applied[0].count >= 1
    after = _ops(rewritten)
    assert op not in after and emitted <= set(after)
    _same_values(original, rewritten, shapes)


def test_div_by_a_constant_becomes_a_multiplication_and_a_divisor_with_zero_does_not():
    import tensorflow as tf

    shape = (1, 4, 4, 3)
    divisor = np.array([2.0, 4.0, 0.5], np.float32)
    # today's converter folds x / c into x * (1/c); older files and other exporters keep it
    original = _retyped(_tflite(lambda x: tf.nn.relu(x) * tf.constant(divisor), shape),
                        "MUL", "DIV", "DivOptions")
    assert "DIV" in _ops(original)
    rewritten, applied = rewrites.apply(original, ["arithmetic"])
    assert applied and "DIV" not in _ops(rewritten)
    _same_values(original, rewritten, [shape], rtol=1e-6)
    zero = np.array([2.0, 0.0, 0.5], np.float32)
    with_zero = _retyped(_tflite(lambda x: tf.nn.relu(x) * tf.constant(zero), shape),
                         "MUL", "DIV", "DivOptions")
    assert rewrites.apply(with_zero, ["arithmetic"]) == (with_zero, [])


@pytest.mark.parametrize("mode", ["REFLECT", "SYMMETRIC"])
def test_mirror_pad_becomes_slices_and_concatenations_with_the_same_values(mode):
    import tensorflow as tf

    shape = (1, 7, 5, 3)
    pads = [[0, 0], [2, 1], [1, 3], [0, 0]]
    original = _tflite(lambda x: tf.pad(tf.nn.relu(x) + x, pads, mode=mode), shape)
    assert "MIRROR_PAD" in _ops(original)
    rewritten, applied = rewrites.apply(original, ["mirror_pad"])
    assert applied and {"SLICE", "CONCATENATION"} <= set(_ops(rewritten))
    assert "MIRROR_PAD" not in _ops(rewritten)
    _same_values(original, rewritten, [shape], rtol=0.0)  # copies: exactly the same values


def test_a_leaky_relu_with_alpha_over_one_is_left_alone():
    import tensorflow as tf

    original = _tflite(lambda x: tf.nn.leaky_relu(x, 1.5), (1, 4, 4, 2))
    assert "LEAKY_RELU" in _ops(original)
    assert rewrites.apply(original, ["leaky_relu"]) == (original, [])


def test_static_shapes_fixes_interior_dynamic_dimensions_and_not_a_dynamic_input():
    import tensorflow as tf

    shape = (1, 5, 5, 3)
    original = _tflite(lambda x: tf.nn.relu(x) * 2.0 + 1.0, shape)
    model = unpack(original)
    graph = model.subgraphs[0]
    inner = [i for i, t in enumerate(graph.tensors)  # the activations after the input
             if i not in graph.inputs and t.shape is not None and len(t.shape) == 4]
    for i in inner:
        graph.tensors[i].shapeSignature = [-1, *list(graph.tensors[i].shape)[1:]]
    dynamic = pack(model)
    fixed, applied = rewrites.apply(dynamic, ["static_shapes"])
    assert applied and applied[0].count == len(inner)
    out = unpack(fixed).subgraphs[0]
    assert all(out.tensors[i].shapeSignature is None for i in inner)
    _same_values(original, fixed, [shape])
    graph.tensors[graph.inputs[0]].shapeSignature = [-1, 5, 5, 3]
    dynamic_input = pack(model)
    assert rewrites.apply(dynamic_input, ["static_shapes"]) == (dynamic_input, [])


def test_wanted_answers_only_missing_kernels_and_static_shapes():
    assert rewrites.wanted([("HARD_SWISH", "after_first_unsupported")]) == []
    # a MINIMUM the quantizer left in float is answered too (it has no int8 rule there)
    assert rewrites.wanted([("MINIMUM", "float_op_in_integer_graph")]) == ["minimum"]
    assert rewrites.wanted([("HARD_SWISH", "float_op_in_integer_graph")]) == []
    assert rewrites.wanted([("LEAKY_RELU", "op_in_table"), ("NEG", "op_in_table"),
                            ("CONV_2D", "static_shapes")]) == \
        ["leaky_relu", "arithmetic", "static_shapes"]
    assert all(rewrites.message(n) for n in rewrites.CATALOGUE)


def _keras_model(path, early_gelu: bool = False):
    import keras  # Keras 3 (tf.keras may be tf_keras, which has no "hard_swish", once a
    # test has set TF_USE_LEGACY_KERAS)

    k = keras
    inputs = k.Input((16, 16, 3))
    x = inputs
    if early_gelu:  # an op the Edge TPU lacks and no rewrite answers, before the others
        x = k.layers.Activation("gelu")(k.layers.Conv2D(3, 1)(x))
    x = k.layers.Conv2D(8, 3, padding="same")(x)
    x = k.layers.Activation("hard_swish")(x)
    x = k.layers.Conv2D(8, 3, padding="same")(x)
    x = k.layers.LeakyReLU(0.1)(x)
    x = k.layers.GlobalAveragePooling2D()(x)
    model = k.Model(inputs, k.layers.Dense(4, activation="softmax")(x))
    model.save(path)
    return model


@pytest.fixture(scope="module")
def hard_swish_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rewrite")
    _keras_model(folder / "hs.keras")
    rng = np.random.default_rng(0)
    np.savez(folder / "calib.npz", rng.random((40, 16, 16, 3), np.float32))
    return folder


def test_build_for_the_edge_tpu_applies_the_rewrites_and_no_rewrite_turns_them_off(
        run_cli, hard_swish_model):
    folder = hard_swish_model
    result = run_cli("build", folder / "hs.keras", "--device", "coral-usb", "--calib",
                     folder / "calib.npz", "-o", folder / "on", "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads(result.stdout)
    record = manifest["rewrites"]
    assert record["kept"] and record["tried"] == ["hard_swish", "leaky_relu"]
    assert record["before"]["share"] < record["after"]["share"] == 1.0
    assert all(a["kept"] and a["float_max_rel_error"] < 1e-5 for a in record["applied"])
    assert manifest["placement"]["cpu_ops"] == 0
    assert record["accuracy"]["after_worst_sqnr_db"] >= \
        record["accuracy"]["before_worst_sqnr_db"] - 1.0
    ops = set(_ops((folder / "on" / "hs.tflite").read_bytes()))
    assert {"HARD_SWISH", "LEAKY_RELU"}.isdisjoint(ops) and "MAXIMUM" in ops
    assert 'id="rewrites"' in (folder / "on" / "report.html").read_text()
    off = run_cli("build", folder / "hs.keras", "--device", "coral-usb", "--calib",
                  folder / "calib.npz", "-o", folder / "off", "--no-rewrite", "--json")
    assert off.exit_code == 0, off.stderr
    plain = json.loads(off.stdout)
    assert "rewrites" not in plain and plain["placement"]["cpu_ops"] > 0


def test_an_ethos_u_build_compiles_with_vela_once(run_cli, hard_swish_model, monkeypatch):
    """The rewrite step places the artifact that ships; the build takes that placement
    instead of compiling the same model with Vela again."""
    from edgeopt.delegates import engine

    calls = []
    real = engine.place_with_vela

    def counted(content, **settings):
        calls.append(len(content))
        return real(content, **settings)

    monkeypatch.setattr(engine, "place_with_vela", counted)
    folder = hard_swish_model
    result = run_cli("build", folder / "hs.keras", "--device", "ethos-u55-256", "--calib",
                     folder / "calib.npz", "-o", folder / "ethos", "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads(result.stdout)
    assert len(calls) == 1 and manifest["placement"]["delegated_ops"] > 0
    shipped = (folder / "ethos" / "hs.tflite").read_bytes()
    assert calls == [len(shipped)]  # Vela compiled the file that ships (metadata and all)


def test_a_minimum_the_quantizer_leaves_in_float_no_longer_fails_an_edge_tpu_build(
        run_cli, tmp_path):
    import tensorflow as tf

    content = _tflite(lambda x: tf.minimum(tf.nn.relu(x * 2.0 - 1.0), 1.0), (1, 8, 8, 3))
    (tmp_path / "clamp.tflite").write_bytes(content)
    np.savez(tmp_path / "calib.npz", np.random.default_rng(0).random((24, 8, 8, 3), np.float32))
    off = run_cli("build", tmp_path / "clamp.tflite", "--device", "coral-usb", "--calib",
                  tmp_path / "calib.npz", "-o", tmp_path / "off", "--no-rewrite")
    assert off.exit_code == 2 and "MINIMUM" in off.stderr  # the float op the quantizer left
    on = run_cli("build", tmp_path / "clamp.tflite", "--device", "coral-usb", "--calib",
                 tmp_path / "calib.npz", "-o", tmp_path / "on", "--json")
    assert on.exit_code == 0, on.stderr
    manifest = json.loads(on.stdout)
    assert manifest["rewrites"]["kept"] and manifest["quantization"]["float_ops"] == []
    assert "MINIMUM" not in _ops((tmp_path / "on" / "clamp.tflite").read_bytes())


@pytest.mark.slow
def test_a_rewrite_that_does_not_raise_delegation_is_not_kept(run_cli, tmp_path):
    _keras_model(tmp_path / "gelu.keras", early_gelu=True)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "calib.npz", rng.random((40, 16, 16, 3), np.float32))
    result = run_cli("build", tmp_path / "gelu.keras", "--device", "coral-usb", "--calib",
                     tmp_path / "calib.npz", "-o", tmp_path / "out", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)["rewrites"]
    assert not record["kept"] and "delegation did not rise" in record["reason"]
    ops = set(_ops((tmp_path / "out" / "gelu.tflite").read_bytes()))
    assert "HARD_SWISH" in ops  # the artifact is the unrewritten build


@pytest.mark.slow  # 6 s: a Vela build
def test_an_op_vela_has_no_kernel_for_is_rewritten_for_ethos_u(run_cli, tmp_path):
    """Every Ethos-U fallback carries Vela's rule; an op type Vela lacks (SQUARE on the U55)
    is the missing kernel the catalogue's decomposition answers (the step did not ask)."""
    import tensorflow as tf

    content = _tflite(lambda x: tf.nn.relu(tf.square(x) * 0.5 - 0.1), (1, 8, 8, 3))
    assert "SQUARE" in _ops(content)
    (tmp_path / "square.tflite").write_bytes(content)
    np.savez(tmp_path / "calib.npz", np.random.default_rng(0).random((24, 8, 8, 3), np.float32))
    result = run_cli("build", tmp_path / "square.tflite", "--device", "ethos-u55-256",
                     "--calib", tmp_path / "calib.npz", "-o", tmp_path / "out", "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads(result.stdout)
    record = manifest["rewrites"]
    assert record["tried"] == ["arithmetic"] and record["kept"], record
    assert record["before"]["share"] < record["after"]["share"]
    assert manifest["placement"]["cpu_ops"] < record["before"]["ops"] - \
        record["before"]["delegated_ops"]
    assert "SQUARE" not in _ops((tmp_path / "out" / "square.tflite").read_bytes())


def test_a_minimum_with_inf_is_dropped_not_written_as_inf_minus_inf():
    # tf.clip_by_value(x, lo, np.inf): the converter writes its bound as FLT_MAX, onnx-tf
    # as +inf (openWakeWord's melspectrogram); c − RELU(c − x) is 0 or NaN there, not x
    import tensorflow as tf

    shape = (1, 8)
    original = _tflite(lambda x: tf.maximum(tf.minimum(x * 2.0, np.inf), 1e-3) * 3.0, shape)
    onnx_tf = _with_constant(original, np.float32(np.finfo(np.float32).max), np.inf)
    for model in (original, onnx_tf):
        assert "MINIMUM" in _ops(model)
        rewritten, applied = rewrites.apply(model, ["minimum"])
        assert [a.name for a in applied] == ["minimum"]
        assert "MINIMUM" not in _ops(rewritten) and "SUB" not in _ops(rewritten)
        _same_values(model, rewritten, [shape])
    # a MINIMUM with −inf or NaN is left as it is, and so is one that writes a graph output
    for bound in (-np.inf, np.nan):
        other = _with_constant(original, np.float32(np.finfo(np.float32).max), bound)
        assert rewrites.apply(other, ["minimum"]) == (other, [])
    output = _tflite(lambda x: tf.minimum(x * 2.0, np.inf), shape)
    assert rewrites.apply(output, ["minimum"]) == (output, [])


def _with_constant(content: bytes, old, new) -> bytes:
    """The model with every scalar float constant equal to `old` holding `new`."""
    from edgeopt.tflite_edit import constant, set_constant

    model = unpack(content)
    for tensor in model.subgraphs[0].tensors:
        values = constant(model, tensor)
        if values is not None and values.size == 1 and values.dtype == np.float32 \
                and values.item() == old:
            set_constant(model, tensor, np.full(values.shape, new, np.float32))
    return pack(model)


def test_the_float_check_counts_a_nan_the_rewrite_brings_as_an_error():
    from edgeopt.rewrite_step import _relative_error

    a = np.array([1.0, 2.0, 4.0], np.float32)
    assert _relative_error([a], [a + 0.004]) == pytest.approx(0.001, rel=1e-3)
    assert _relative_error([a], [np.array([1.0, np.nan, 4.0])]) == np.inf
    assert _relative_error([np.array([1.0, np.inf])], [np.array([1.0, np.inf])]) == 0.0


def test_an_op_rewrite_fixes_the_shapes_a_converter_left_dynamic_first():
    # a fixed input whose tensors keep a −1 batch: the op rewrites need them fixed first
    import tensorflow as tf

    from edgeopt.rewrites.edit import Edit

    content = _tflite(lambda x: tf.expand_dims(tf.nn.relu(x), 1) * 2.0, (None, 6, 4))
    model = unpack(content)
    graph = model.subgraphs[0]
    Edit(model, graph).tensor(graph.inputs[0]).shapeSignature = None  # as the build fixes it
    fixed_input = pack(model)
    rewritten, applied = rewrites.apply(fixed_input, ["reshapes"])
    assert [a.name for a in applied] == ["static_shapes", "reshapes"]
    assert "EXPAND_DIMS" not in _ops(rewritten)
    _same_values(fixed_input, rewritten, [(1, 6, 4)])


def test_expand_dims_with_a_dynamic_batch_becomes_a_reshape_that_infers_it():
    # basic-pitch's .tflite: a −1 batch in the input and every tensor (the build ships it
    # so, LiteRT runs it at batch 1); its 19 EXPAND_DIMS kept 90% of it off the GPU
    import tensorflow as tf

    content = _tflite(lambda x: tf.expand_dims(tf.nn.relu(x), 1) * 2.0, (None, 6, 4))
    rewritten, applied = rewrites.apply(content, ["reshapes"])
    assert [a.name for a in applied] == ["reshapes"]
    assert "EXPAND_DIMS" not in _ops(rewritten)
    _same_values(content, rewritten, [(1, 6, 4)])
    two = _tflite(lambda x: tf.expand_dims(tf.nn.relu(x), 1) * 2.0, (None, None, 4))
    assert rewrites.apply(two, ["reshapes"]) == (two, [])  # two unknowns: left alone
