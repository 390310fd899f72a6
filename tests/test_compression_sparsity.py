"""Unstructured and 2:4 magnitude sparsity, and the sparse .tflite writer."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.errors import ConfigError

keras = pytest.importorskip("keras")
L = keras.layers


def mlp() -> keras.Model:
    keras.utils.set_random_seed(0)
    inp = keras.Input((64,))
    x = L.Dense(256, activation="relu", name="hidden")(inp)
    return keras.Model(inp, L.Dense(10, name="head")(x))


def test_unstructured_reaches_the_sparsity_and_keeps_the_original():
    from edgeopt.compression.sparsity import SparsityConfig, sparsify

    model = mlp()
    before = model.get_layer("hidden").get_weights()[0].copy()
    result = sparsify(model, SparsityConfig(sparsity=0.8))
    kernel = result.model.get_layer("hidden").get_weights()[0]
    assert result.density["hidden"] == pytest.approx(0.2, abs=1e-3)
    assert (kernel != 0).mean() == pytest.approx(0.2, abs=1e-3)
    assert np.abs(kernel[kernel != 0]).min() >= np.abs(before[kernel == 0]).max()
    assert np.array_equal(model.get_layer("hidden").get_weights()[0], before)


def test_two_of_four_keeps_two_largest_per_block():
    from edgeopt.compression.sparsity import two_of_four_mask

    kernel = np.array([1.0, -4.0, 2.0, 3.0, 0.5, 0.1, -0.2, 0.3]).reshape(8, 1)
    mask = two_of_four_mask(kernel)
    assert mask.ravel().tolist() == [False, True, False, True, True, False, False, True]


def test_two_of_four_skips_layers_it_cannot_split():
    from edgeopt.compression.sparsity import SparsityConfig, sparsify

    result = sparsify(mlp(), SparsityConfig(pattern="2:4", min_weights=1))
    assert result.density == {"hidden": 0.5, "head": 0.5}
    inp = keras.Input((6,))
    odd = keras.Model(inp, L.Dense(4, name="d")(inp))
    skipped = sparsify(odd, SparsityConfig(pattern="2:4", min_weights=1)).skipped
    assert "multiple of 4" in skipped["d"]


@pytest.mark.parametrize("config", [{"sparsity": 1.0}, {"sparsity": 0}, {"pattern": "4:8"}])
def test_bad_sparsity_config(config):
    from edgeopt.compression.sparsity import SparsityConfig, sparsify

    with pytest.raises(ConfigError):
        sparsify(mlp(), SparsityConfig(**config))


def test_sparse_tflite_is_smaller_and_runs_like_keras():
    from ai_edge_litert.interpreter import Interpreter

    from edgeopt.compression.sparsity import SparsityConfig, sparsify
    from edgeopt.compression.tflite_sparse import write_sparse_tflite

    sparse_model = sparsify(mlp(), SparsityConfig(sparsity=0.8)).model
    written = write_sparse_tflite(sparse_model)
    assert written.sparse_format and written.sparse_bytes < 0.6 * written.dense_bytes
    interpreter = Interpreter(model_content=written.content)
    interpreter.allocate_tensors()
    x = np.random.default_rng(0).standard_normal((1, 64)).astype("float32")
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    out = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    assert np.allclose(out, np.asarray(sparse_model(x)), atol=1e-4)


def test_measure_sparse_reports_real_sizes_and_latencies():
    """Sizes are the files' bytes; latencies come from LiteRT runs (XNNPACK, one thread)."""
    from edgeopt.compression import MeasureConfig, SparsityConfig, measure_sparse, measure_tflite

    quick = MeasureConfig(runs=20, min_secs=0.05, warmup=2)
    report = measure_sparse(mlp(), SparsityConfig(sparsity=0.8), quick)
    assert report.sparse is not None and len(report.written) == report.sparse.size_bytes
    assert report.sparse.size_bytes < 0.6 * report.dense.size_bytes
    assert abs(report.dense.size_bytes - report.baseline.size_bytes) < 1024
    for measured in (report.baseline, report.dense, report.sparse):
        assert measured.runs >= 20 and measured.latency.median > 0
        assert measured.clock == "cpu" and measured.threads == 1
    again = measure_tflite(report.written, quick)
    assert again.size_bytes == len(report.written)
    assert report.to_json()["density"]["hidden"] == pytest.approx(0.2, abs=1e-3)


def test_cpu_clock_needs_one_thread():
    from edgeopt.compression import MeasureConfig, measure_tflite
    from edgeopt.compression.tflite_sparse import convert_float

    with pytest.raises(ConfigError, match="one thread"):
        measure_tflite(convert_float(mlp()), MeasureConfig(threads=2, clock="cpu"))
