"""A `.tflite` source whose layer norm computes its variance as E[x²] − E[x]² (a JAX/flax
export's form) is read with the variance in two passes (edgeopt.tflite_variance, run by
tflite_prepare): the TFLite converter's forms of it, what is left alone, LiteRT parity,
and the int8 model `edgeopt quantize` writes from it."""

from __future__ import annotations

import numpy as np
import pytest
from test_onnx_variance import WIDTH, offset_rows

from edgeopt.runtime import TFLiteRunner
from edgeopt.tflite_edit import opcode_name, unpack
from edgeopt.tflite_prepare import prepare_tflite

CLASSES = 8


def layer_norm_tflite(form: str) -> bytes:
    """x [1, 16] -> layer norm with a fast variance, clamped at 0 as flax does -> MatMul.
    "mean": reduce_mean, keepdims (MEAN, SQUARE; the clamp fused as the SUB's RELU);
    "sum": reduce_sum · 1/n without keepdims, then reshaped back (jax2tf's form: SUM, MUL);
    "other_axis": E[x] over the batch axis: not a variance of the same values."""
    import tensorflow as tf

    weights = np.random.default_rng(0).standard_normal((WIDTH, CLASSES)).astype(np.float32)

    @tf.function(input_signature=[tf.TensorSpec([1, WIDTH], tf.float32)])
    def forward(x):
        if form == "sum":
            mean = tf.reduce_sum(x, axis=1) * (1.0 / WIDTH)
            var = tf.reduce_sum(x * x, axis=1) * (1.0 / WIDTH) - mean * mean
            mean, var = tf.reshape(mean, [-1, 1]), tf.reshape(var, [-1, 1])
        else:
            mean = tf.reduce_mean(x, axis=1 if form == "mean" else 0, keepdims=True)
            var = tf.reduce_mean(tf.square(x), axis=1, keepdims=True) - tf.square(mean)
        var = tf.maximum(var, 0.0)
        return tf.matmul((x - mean) / tf.sqrt(var + 1e-6), weights)

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [forward.get_concrete_function()])
    return converter.convert()


def _ops(content: bytes) -> list[str]:
    model = unpack(content)
    return [opcode_name(model, op)[0] for op in model.subgraphs[0].operators]


def _input_squared(content: bytes) -> bool:
    """Whether an op squares the model's input itself (SQUARE(x) or MUL(x, x))."""
    model = unpack(content)
    graph = model.subgraphs[0]
    x = int(graph.inputs[0])
    return any(opcode_name(model, op)[0] in ("SQUARE", "MUL") and
               [int(i) for i in op.inputs] in ([x], [x, x]) for op in graph.operators)


def _run(content: bytes, rows: np.ndarray) -> np.ndarray:
    runner = TFLiteRunner(content)
    return np.concatenate([runner.run({runner.input_names[0]: row[None]})[0] for row in rows])


@pytest.mark.parametrize("form", ["mean", "sum"])
def test_the_converters_forms_are_computed_in_two_passes(form):
    original = layer_norm_tflite(form)
    prepared = prepare_tflite(original)
    assert any("1 variance(s) written E[x²] − E[x]² in two passes" in n for n in prepared.notes)
    assert "float32 rounding of its fast variances" in prepared.notes[-1]
    # the square of the raw input is gone: only the centred values are squared
    assert _input_squared(original) and not _input_squared(prepared.content)
    rows = offset_rows(64, 1)
    np.testing.assert_allclose(_run(prepared.content, rows), _run(original, rows),
                               rtol=1e-3, atol=1e-3)


def test_what_is_not_a_variance_is_left_alone():
    original = layer_norm_tflite("other_axis")
    prepared = prepare_tflite(original)
    assert not any("variance" in n for n in prepared.notes)
    assert _ops(prepared.content) == _ops(original)


def test_the_int8_model_keeps_the_layer_norm(tmp_path):
    """`edgeopt quantize` of the jax2tf-form `.tflite` on rows of mean 4 and spread 0.5:
    with the rewrite switched off (two_pass_variances returning 0) the output SQNR against
    float was 17.8 dB on these data and seeds (2026-12-07), with it 29.6 dB."""
    from edgeopt.quantize import QuantizeRequest, quantize_file

    source, calib, out = tmp_path / "ln.tflite", tmp_path / "calib.npz", tmp_path / "int8.tflite"
    source.write_bytes(layer_norm_tflite("sum"))
    np.savez(calib, x=offset_rows(200, 4))
    record = quantize_file(QuantizeRequest(str(source), str(calib), str(out)))
    assert any("two passes" in note for note in record["source"]["prepared"])
    rows = offset_rows(300, 5)
    reference, got = _run(source.read_bytes(), rows), _run(out.read_bytes(), rows)
    sqnr = 10 * np.log10((reference ** 2).sum() / ((got - reference) ** 2).sum())
    assert sqnr > 25, sqnr  # off: 17.8 dB
