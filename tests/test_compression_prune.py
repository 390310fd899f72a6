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


def separable_net() -> keras.Model:
    inp = keras.Input((12, 12, 3))
    x = L.SeparableConv2D(16, 3, padding="same", depth_multiplier=2, name="sep1")(inp)
    x = L.Activation("relu6")(L.BatchNormalization()(x))
    x = L.SeparableConv2D(24, 3, padding="same", name="sep2")(x)
    x = L.Conv2D(16, 1, name="pw")(L.Rescaling(0.5)(x))
    return keras.Model(inp, L.Softmax()(L.Dense(4, name="head")(L.GlobalAveragePooling2D()(x))))


def prelu_net() -> keras.Model:
    """MTCNN's shape (the `mtcnn` wheel's P/R/O-Nets): PReLU after every conv and dense,
    its alpha shared over the spatial axes ((1, 1, C)) or per unit ((C,))."""
    inp = keras.Input((12, 12, 3))
    x = L.PReLU(shared_axes=[1, 2], name="p1")(L.Conv2D(16, 3, name="c1")(inp))
    x = L.MaxPooling2D(name="pool")(x)
    x = L.PReLU(shared_axes=[1, 2], name="p2")(L.Conv2D(24, 3, name="c2")(x))
    x = L.PReLU(name="p3")(L.Dense(16, name="fc")(L.Flatten(name="flat")(x)))
    return keras.Model(inp, L.Dense(4, name="head")(x))


NETS = {"conv": conv_bn_relu_conv_dense, "residual": residual_add, "concat": concat_net,
        "depthwise": depthwise_net, "separable": separable_net, "prelu": prelu_net}


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
        if isinstance(layer, L.PReLU):  # per-channel slopes, so a mis-slice shows
            layer.set_weights([rng.uniform(0.05, 0.5, w.shape) for w in layer.get_weights()])


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
    from edgeopt.compression import PruneConfig, prune_structured

    model, x = build(kind), samples()
    config = PruneConfig(allocation="uniform", recalibrate_bn=False)
    result = prune_structured(model, 0.4, "l2", x, config)
    _zero_the_removed_channels(model, result)
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
    from edgeopt.compression import PruneConfig, prune_structured

    model, x = build("residual"), samples()
    kernel, bias = model.get_layer("expand").get_weights()
    kernel[..., :4] *= 1e-4
    bias[:4] = 0.0
    model.get_layer("expand").set_weights([kernel, bias])
    result = prune_structured(model, 0.04, "l1", x, PruneConfig(recalibrate_bn=False))
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
        config = PruneConfig(allocation=allocation, recalibrate_bn=False)
        pruned = prune_structured(model, 0.5, "l1", x, config)
        errors[allocation] = np.linalg.norm(_outputs(pruned.model, x) - _outputs(model, x))
    assert errors["sensitivity"] <= errors["uniform"] + 1e-6


def test_sensitivity_scan_keeps_within_its_mac_budget():
    """Over `scan_macs` the scan runs on the first samples only, then at fewer ratios,
    exactly as if only those samples and ratios had been given; within it, on all."""
    from edgeopt.compression.criteria import get_criterion
    from edgeopt.compression.groups import build_channel_graph
    from edgeopt.compression.plan import PruneConfig, scan_extent, sensitivity_scan
    from edgeopt.compression.prune import _planner

    x = samples(8)
    cg = build_channel_graph(build("residual"))
    planner = _planner(cg, get_criterion("l1", None), x, PruneConfig())
    pass_macs = planner.cost([0] * len(planner.orders)) * len(planner.orders)
    assert scan_extent(planner, 8) == (8, (0.25, 0.5, 0.75))
    counts = [0, 1, 3, 5, len(planner.orders[0]) - 1]
    cases = (((3 * 3 * pass_macs), 3, (0.25, 0.5, 0.75)), (2 * pass_macs, 1, (0.25, 0.75)),
             (1.0, 1, (0.5,)))
    for budget, count, ratios in cases:
        planner.config = PruneConfig(scan_macs=budget)
        assert scan_extent(planner, 8) == (count, ratios)
        bounded = sensitivity_scan(planner, x)
        planner.config = PruneConfig(scan_ratios=ratios)
        alone = sensitivity_scan(planner, x[:count])
        assert [[c(n) for n in counts] for c in bounded] == \
            [[c(n) for n in counts] for c in alone]
    planner.config = PruneConfig()
    assert [c(2) for c in sensitivity_scan(planner, x)] != \
        [c(2) for c in sensitivity_scan(planner, x[:1])]


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

    with pytest.raises(PruneError, match="cannot remove that many MACs") as caught:
        prune_structured(build("depthwise"), 0.99, "l1", samples())
    most = float(str(caught.value).rsplit("--prune ", 1)[1])  # what to ask for instead
    assert 0 < most < 0.99
    assert prune_structured(build("depthwise"), most, "l1", samples()).macs_after > 0


def test_keras_mobilenetv2_prunes_and_matches_its_masked_self():
    """Every layer MobileNetV2 uses (ZeroPadding2D, ReLU6, depthwise, residual adds) works."""
    from edgeopt.compression import PruneConfig, count_macs, prune_structured

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2((32, 32, 3), alpha=0.35, weights=None, classes=10)
    _randomize_bn(model)
    x = np.random.default_rng(0).standard_normal((4, 32, 32, 3)).astype("float32")
    config = PruneConfig(allocation="uniform", recalibrate_bn=False)
    result = prune_structured(model, 0.5, "l2", x, config)
    assert result.macs_after == count_macs(result.model) <= 0.5 * result.macs_before
    assert result.per_layer["block_16_project"][1] < 112  # the residual chains shrink too
    _zero_the_removed_channels(model, result)
    assert np.allclose(_outputs(result.model, x), _outputs(model, x), atol=1e-5)


def test_softmax_output_model_prunes():
    """A classifier ending in a Softmax layer (the bundled sample's shape) can be pruned."""
    from edgeopt.compression import build_channel_graph, prune_structured

    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 1))
    x = L.Conv2D(16, 3, activation="relu", name="c1")(inp)
    x = L.Dense(5, name="fc")(L.GlobalAveragePooling2D()(L.Conv2D(16, 3, name="c2")(x)))
    model = keras.Model(inp, L.Softmax(name="probs")(x))
    result = prune_structured(model, 0.4, "l1")
    assert result.per_layer["fc"] == (5, 5)
    assert result.per_layer["c1"][1] + result.per_layer["c2"][1] < 32
    mid = keras.Model(inp, L.Conv2D(3, 1, name="out")(
        L.Activation("softmax")(L.Conv2D(6, 1, name="c")(inp))))
    assert [g.size for g in build_channel_graph(mid).groups] == []


def test_wrong_sample_shape_is_a_data_error():
    from edgeopt.compression import prune_structured
    from edgeopt.errors import DataError

    with pytest.raises(DataError, match=r"the model expects \(N, 12, 12, 3\)"):
        prune_structured(build("conv"), 0.5, "activation", np.zeros((4, 8, 8, 3), "float32"))
    with pytest.raises(DataError, match="1 inputs, got 2"):
        prune_structured(build("conv"), 0.5, "l1", [samples(), samples()])


@pytest.mark.parametrize("allocation", ["uniform", "sensitivity"])
def test_channel_multiple_keeps_whole_tiles(allocation):
    from edgeopt.compression import PruneConfig, prune_structured

    model = build("residual")
    config = PruneConfig(allocation=allocation, channel_multiple=8)
    result = prune_structured(model, 0.4, "l1", samples(), config)
    widths = [after for name, (before, after) in result.per_layer.items() if name != "head"]
    assert all(w % 8 == 0 for w in widths) and result.macs_after <= 0.6 * result.macs_before
    recipe = prune_structured(model, {"expand": 0.3}, "l1", samples(), config)
    assert recipe.per_layer["expand"] == (32, 24)


@pytest.mark.parametrize("knob", [{"channel_multiple": 0}, {"max_group_ratio": 1.0},
                                  {"scan_macs": 0}])
def test_bad_prune_config(knob):
    from edgeopt.compression import PruneConfig, prune_structured
    from edgeopt.errors import ConfigError

    with pytest.raises(ConfigError):
        prune_structured(build("conv"), 0.5, "l1", samples(), PruneConfig(**knob))


def test_batchnorm_statistics_are_re_estimated_on_the_samples():
    """After pruning, each BN layer holds the statistics its new input has on the samples."""
    from edgeopt.compression import prune_structured

    model, x = build("conv"), samples(16)
    result = prune_structured(model, 0.5, "l1", x)
    assert result.bn_recalibrated
    pruned = result.model
    bn = pruned.get_layer("bn1")
    conv_out = np.asarray(pruned.get_layer("c1")(x)).reshape(-1, bn.gamma.shape[0])
    assert np.allclose(bn.moving_mean, conv_out.mean(axis=0), atol=1e-4)
    assert np.allclose(bn.moving_variance, conv_out.var(axis=0), rtol=1e-3, atol=1e-4)
    assert not prune_structured(model, 0.5, "l1").bn_recalibrated  # no samples: left alone


def _zero_the_removed_channels(model, result) -> None:
    """The original model with the channels pruning removed zeroed in place (masked)."""
    from edgeopt.compression import build_channel_graph
    from edgeopt.compression.rebuild import masked_weights

    cg = build_channel_graph(model)
    kept = cg.keep_all()
    for group in cg.groups:
        for root, ((name, channel), *_) in zip(group.roots, group.clusters):
            kept[root] = channel in result.kept_channels[name]
    for name, weights in masked_weights(cg, kept).items():
        model.get_layer(name).set_weights(weights)
