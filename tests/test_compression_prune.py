"""Structured pruning rebuilds real Keras models with fewer channels."""

from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")
L = keras.layers


def conv_bn_relu_conv_dense() -> keras.Model:
    inp = keras.Input((12, 12, 3))
    x = L.Conv2D(24, 3, padding="same", name="c1")(inp)
    x = L.ReLU(name="r1")(L.BatchNormalization(name="bn1")(x))
    x = L.Conv2D(32, 3, padding="same", name="c2")(x)
    x = L.ReLU()(L.BatchNormalization(name="bn2")(x))
    x = L.Flatten(name="flat")(L.MaxPooling2D(name="pool")(x))
    x = L.Dense(16, activation="relu", name="fc")(x)
    return keras.Model(inp, L.Dense(4, name="head")(x))


def residual_add() -> keras.Model:
    inp = keras.Input((12, 12, 3))
    a = L.ReLU()(L.BatchNormalization()(L.Conv2D(24, 3, padding="same", name="stem")(inp)))
    b = L.Conv2D(32, 1, name="expand")(a)
    b = L.Conv2D(24, 3, padding="same", name="project")(L.ReLU()(b))
    x = L.Add(name="add")([a, b])
    x = L.GlobalAveragePooling2D()(L.Conv2D(32, 1, name="last")(x))
    return keras.Model(inp, L.Dense(4, name="head")(x))


def concat_net() -> keras.Model:
    inp = keras.Input((12, 12, 3))
    a = L.Conv2D(16, 3, padding="same", name="a")(inp)
    b = L.Conv2D(24, 3, padding="same", name="b")(inp)
    x = L.ReLU()(L.Concatenate(name="cat")([a, b]))
    x = L.Conv2D(24, 3, padding="same", name="mix")(x)
    return keras.Model(inp, L.Dense(4, name="head")(L.GlobalAveragePooling2D()(x)))


def depthwise_net() -> keras.Model:
    inp = keras.Input((12, 12, 3))
    x = L.ReLU()(L.BatchNormalization()(L.Conv2D(24, 3, padding="same", name="stem")(inp)))
    x = L.DepthwiseConv2D(3, padding="same", name="dw")(x)
    x = L.DepthwiseConv2D(3, depth_multiplier=2, name="dw2")(L.BatchNormalization()(x))
    x = L.Conv2D(32, 1, name="pw")(L.ReLU()(x))
    return keras.Model(inp, L.Dense(4, name="head")(L.GlobalAveragePooling2D()(x)))


NETS = {"conv": conv_bn_relu_conv_dense, "residual": residual_add, "concat": concat_net,
        "depthwise": depthwise_net}


def build(kind: str) -> keras.Model:
    keras.utils.set_random_seed(0)
    model = NETS[kind]()
    _randomize_bn(model)
    return model


def _randomize_bn(model: keras.Model) -> None:
    """Non-trivial BN statistics so that slicing mistakes show in the outputs."""
    rng = np.random.default_rng(1)
    for layer in model.layers:
        if isinstance(layer, L.BatchNormalization):
            n = layer.gamma.shape[0]
            layer.set_weights([rng.uniform(0.5, 1.5, n), rng.normal(0, 0.1, n),
                               rng.normal(0, 0.1, n), rng.uniform(0.5, 1.5, n)])


def samples(n: int = 8) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, 12, 12, 3)).astype("float32")


def _outputs(model: keras.Model, x: np.ndarray) -> np.ndarray:
    return np.asarray(model(x, training=False))


@pytest.mark.parametrize("kind", list(NETS))
def test_half_macs_removes_channels(kind):
    from edgeopt.compression import count_macs, prune_structured

    model = build(kind)
    result = prune_structured(model, 0.5, "l1", samples())
    pruned = result.model
    assert pruned.output.shape == model.output.shape
    assert pruned.count_params() < model.count_params()
    assert any(after < before for before, after in result.per_layer.values())
    assert result.per_layer["head"] == (4, 4)
    assert result.macs_before == count_macs(model)
    assert result.macs_after == count_macs(pruned)
    assert abs(result.macs_after / result.macs_before - 0.5) < 0.05


@pytest.mark.parametrize("kind", list(NETS))
def test_rebuilt_model_equals_masked_original(kind):
    """Sliced weights compute exactly what the original computes with the channels zeroed."""
    from edgeopt.compression import PruneConfig, build_channel_graph, prune_structured
    from edgeopt.compression.rebuild import masked_weights

    model, x = build(kind), samples()
    result = prune_structured(model, 0.4, "l2", x, PruneConfig(allocation="uniform"))
    cg = build_channel_graph(model)
    kept = cg.keep_all()
    for group in cg.groups:
        for root, ((name, channel), *_) in zip(group.roots, group.clusters):
            kept[root] = channel in result.kept_channels[name]
    for name, weights in masked_weights(cg, kept).items():
        model.get_layer(name).set_weights(weights)
    assert np.allclose(_outputs(result.model, x), _outputs(model, x), atol=1e-4)


def _tflite_size(model: keras.Model) -> int:
    import tensorflow as tf

    return len(tf.lite.TFLiteConverter.from_keras_model(model).convert())


@pytest.mark.parametrize("kind", ["conv", "residual"])
def test_float_tflite_gets_smaller(kind):
    from edgeopt.compression import prune_structured

    model = build(kind)
    pruned = prune_structured(model, 0.5, "bn_scale", samples()).model
    removed_bytes = 4 * (model.count_params() - pruned.count_params())
    assert removed_bytes > 0
    assert _tflite_size(model) - _tflite_size(pruned) > 0.8 * removed_bytes


def test_tiny_ratio_removes_only_weak_channels_and_keeps_outputs():
    from edgeopt.compression import prune_structured

    model, x = build("residual"), samples()
    kernel, bias = model.get_layer("expand").get_weights()
    kernel[..., :4] *= 1e-4
    bias[:4] = 0.0
    model.get_layer("expand").set_weights([kernel, bias])
    result = prune_structured(model, 0.04, "l1", x)
    assert result.per_layer["expand"][1] < 32
    assert set(range(32)) - set(result.kept_channels["expand"]) <= {0, 1, 2, 3}
    before, after = _outputs(model, x), _outputs(result.model, x)
    assert np.linalg.norm(after - before) < 1e-3 * np.linalg.norm(before)


def test_sensitivity_allocation_beats_or_matches_uniform():
    from edgeopt.compression import PruneConfig, prune_structured

    x = samples()
    errors = {}
    for allocation in ("sensitivity", "uniform"):
        model = build("residual")
        pruned = prune_structured(model, 0.5, "l1", x, PruneConfig(allocation=allocation))
        errors[allocation] = np.linalg.norm(_outputs(pruned.model, x) - _outputs(model, x))
    assert errors["sensitivity"] <= errors["uniform"] + 1e-6


def test_recipe_and_sequential_model():
    from edgeopt.compression import prune_structured

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6, 6, 2)), L.Conv2D(10, 3, name="c1"),
                              L.ReLU(), L.Flatten(), L.Dense(3, name="out")])
    result = prune_structured(model, {"c.*": 0.3})
    assert result.per_layer["c1"] == (10, 7)
    assert result.model.outputs[0].shape == model.outputs[0].shape


def test_unreachable_target_is_a_clear_error():
    from edgeopt.compression import PruneError, prune_structured

    with pytest.raises(PruneError, match="cannot remove that many MACs"):
        prune_structured(build("depthwise"), 0.99, "l1", samples())
