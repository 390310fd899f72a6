"""Learned step sizes (LSQ) for QAT's activation grids, and that the learned grid ships.

The forward pass is the writers' int8 grid (`quantgrid.ActivationGrid`); the step gets
LSQ's gradient from in-range values too, so it can shrink toward a finer grid (TF's
FakeQuantWithMinMaxVars, the "minmax_vars" choice, can only widen). After QAT, the
`.tflite` the step writes carries, for every learned tensor, the scale and zero point the
training graph computed on.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.calibration.config import QuantConfig
from edgeopt.calibration.fakequant import lsq_fake_quant, qat_layers
from edgeopt.calibration.quantgrid import ActivationGrid
from edgeopt.converters.tf_source import from_keras, run_converter
from edgeopt.model import tflite_interpreter
from edgeopt.quantize import quantize_tflite
from edgeopt.runtime import TFLiteRunner

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")


@pytest.mark.parametrize("lo, hi", [(-1.3, 2.9), (0.0, 6.0), (-11.0, 11.0), (-0.02, 0.5)])
def test_lsq_forward_is_the_writers_int8_grid(lo, hi):
    grid = ActivationGrid.from_range(lo, hi)
    x = np.random.default_rng(0).uniform(lo * 1.5 - 0.1, hi * 1.5, (4, 500)).astype("float32")
    fake = lsq_fake_quant(tf.constant(x), tf.constant(grid.scale, tf.float32),
                          tf.constant(float(grid.zero_point))).numpy()
    expected = grid.fake_quant(x.astype(np.float64))
    codes = np.rint(fake / grid.scale) + grid.zero_point
    np.testing.assert_array_equal(codes, np.rint(expected / grid.scale) + grid.zero_point)
    # the same codes; the values as float32 holds them (one ulp: code * step rounded)
    np.testing.assert_allclose(fake, expected, rtol=2.5e-7, atol=1e-12)
    assert codes.min() == grid.qmin and codes.max() == grid.qmax   # clipped on both sides


def test_lsq_gradients_are_the_papers():
    s, z = 0.1, -3.0                    # grid [-12.5, 12.7]
    x = tf.constant([[-20.0, -1.234, 0.0, 0.56, 3.333, 30.0]])
    step, zero = tf.Variable(s), tf.Variable(z)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.reduce_sum(lsq_fake_quant(x, step, zero))
    factor = 1.0 / np.sqrt(6 * 255)     # 1 / sqrt(N * Qp): N values per sample
    v = x.numpy()[0] / s
    inside = (v > -128 - z) & (v < 127 - z)
    np.testing.assert_allclose(tape.gradient(y, x).numpy()[0], inside.astype(float))
    per_value = np.where(inside, np.rint(v) - v, np.where(v < 0, -128 - z, 127 - z))
    np.testing.assert_allclose(float(tape.gradient(y, step)), per_value.sum() * factor,
                               rtol=1e-4)
    np.testing.assert_allclose(float(tape.gradient(y, zero)), -s * (~inside).sum() * factor,
                               rtol=1e-4)


def _shrink_fit(mode: str) -> tuple[float, float]:
    """(start step, step after fitting y = x) for data using a fifth of the start range."""
    quantizer = qat_layers().ActivationQuantizer(-10.0, 10.0, mode, name="act")
    x = tf.constant(np.random.default_rng(1).uniform(-2, 2, (64, 16)).astype("float32"))
    quantizer(x)
    optimizer = keras.optimizers.Adam(0.05)
    for _ in range(60):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((quantizer(x) - x) ** 2)
        variables = quantizer.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return ActivationGrid.from_range(-10.0, 10.0).scale, quantizer.grid().scale


def test_a_learned_step_shrinks_toward_the_data_and_a_learned_minmax_cannot():
    start, lsq = _shrink_fit("lsq")
    assert lsq < 0.7 * start            # a finer grid for values far inside the range
    start, minmax = _shrink_fit("minmax_vars")
    assert minmax == pytest.approx(start, rel=1e-6)   # nothing clipped: no range gradient


def _model():
    rng = np.random.default_rng(2)
    x = inp = keras.Input((8, 8, 3), name="image")
    x = keras.layers.Conv2D(6, 3, padding="same", activation="relu", name="conv")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)      # MEAN, as fer's logits
    model = keras.Model(inp, keras.layers.Dense(4, name="fc")(x))
    model.get_layer("conv").set_weights([rng.normal(0, 0.4, (3, 3, 3, 6)).astype("float32"),
                                         rng.normal(0, 0.1, 6).astype("float32")])
    return model, rng.normal(0, 1, (32, 8, 8, 3)).astype("float32")


def _artifact_grids(content: bytes) -> dict[str, ActivationGrid]:
    found = {}
    for t in tflite_interpreter(content).get_tensor_details():
        scales, zeros = t["quantization_parameters"]["scales"], \
            t["quantization_parameters"]["zero_points"]
        if t["dtype"] == np.int8 and len(scales) == 1:
            found[t["name"]] = ActivationGrid(float(scales[0]), int(zeros[0]))
    return found


@pytest.mark.parametrize("quantizer", ["lsq", "minmax_vars"])
def test_the_learned_grids_are_what_the_written_tflite_carries(quantizer, tmp_path,
                                                               monkeypatch):
    """QAT (its training replaced by shrinking every learned grid: lsq, the step to 0.6 of
    its start and the zero point moved; minmax_vars, both range ends to 0.6) through the
    step's own export and writer: each learned tensor's int8 scale and zero point in the
    artifact are the training graph's, not a re-calibration's."""
    import edgeopt.qat_step as step

    model, data = _model()
    path = tmp_path / "m.keras"
    model.save(path)
    float_tflite = run_converter(from_keras(model, tmp_path).converter(), "float")
    name = TFLiteRunner(float_tflite).input_names[0]
    config = QuantConfig(scheme="w8a8", bias_correction=False, layer_report=False)
    ptq = quantize_tflite(float_tflite, {name: data}, config)
    learned, written, trained_grids = {}, {}, []

    def quantizers(layer):
        if isinstance(layer, qat_layers().ActivationQuantizer):
            yield layer
        for inner in [getattr(layer, "output_quantizer", None), *getattr(layer, "layers", [])]:
            if inner is not None:
                yield from quantizers(inner)

    def shrink(_job, view, _settings, _progress):
        for q in quantizers(view):
            if quantizer == "lsq":
                q.step.assign(0.6)
                q.zero_point.assign(float(np.clip(q.zero_point.numpy() + 3, -128, 127)))
            else:
                q.low.assign(q.low.numpy() * 0.6)
                q.high.assign(q.high.numpy() * 0.6)
            trained_grids.append(q.grid())
        return {"epochs_run": 1, "best_epoch": 1, "epochs_max": 1, "labels": False,
                "samples": len(data), "history": []}

    def spy(job, content, cfg, fixed, progress):
        written.update(fixed)
        return quantize(job, content, cfg, fixed, progress)

    quantize = step._quantize
    monkeypatch.setattr(step, "train", shrink)
    monkeypatch.setattr(step, "_quantize", spy)
    job = step.QatJob(path, model, "tflite", float_tflite, {name: data}, data,
                      input_specs=None)
    outcome = step.run_qat(job, ptq, config, step.QatSettings(enabled=True, epochs=1,
                                                               activation_quantizer=quantizer),
                           "test", tmp_path, lambda _m: None)
    assert outcome.record["shipped"] == "qat"
    learned.update(written)
    artifact = _artifact_grids(outcome.result.model)
    ptq_grids = _artifact_grids(ptq.model)
    # the float input's int8 copy is the QUANTIZE op's output
    shipped = {t: artifact.get(t, artifact.get(f"{t}_quantized")) for t in learned}
    assert len(learned) == 4 and None not in shipped.values()  # input, conv+relu, MEAN, fc
    for tensor, got in shipped.items():
        want = ActivationGrid.from_range(*learned[tensor])
        assert got.zero_point == want.zero_point, tensor
        assert got.scale == pytest.approx(want.scale, rel=1e-6), tensor
        before = ptq_grids.get(tensor, ptq_grids.get(f"{tensor}_quantized"))
        assert got.scale < 0.7 * before.scale, tensor  # shrunk: finer than PTQ's grid
    # ... and they are the grids the training graph computed on, one for one
    on_grid = sorted((g.zero_point, g.scale) for g in trained_grids)
    in_file = sorted((g.zero_point, g.scale) for g in shipped.values())
    assert [z for z, _ in on_grid] == [z for z, _ in in_file]
    np.testing.assert_allclose([s for _, s in on_grid], [s for _, s in in_file], rtol=1e-6)
