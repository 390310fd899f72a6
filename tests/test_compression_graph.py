"""Channel dependency graph, groups, criteria and bad input of structured pruning."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.errors import ConfigError, EdgeoptError

keras = pytest.importorskip("keras")
L = keras.layers


def conv_bn_dense() -> keras.Model:
    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 3))
    x = L.Conv2D(8, 3, padding="same", name="c1")(inp)
    x = L.ReLU(name="r1")(L.BatchNormalization(name="bn1")(x))
    x = L.Conv2D(12, 3, name="c2")(x)
    x = L.GlobalAveragePooling2D(name="gap")(x)
    return keras.Model(inp, L.Dense(4, name="head")(x))


def residual() -> keras.Model:
    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 3))
    a = L.Conv2D(8, 3, padding="same", name="a")(inp)
    b = L.Conv2D(8, 3, padding="same", name="b")(L.ReLU()(a))
    x = L.Add(name="add")([a, b])
    x = L.DepthwiseConv2D(3, padding="same", name="dw")(x)
    x = L.Conv2D(6, 1, name="c")(x)
    return keras.Model(inp, L.Dense(3, name="head")(L.Flatten(name="flat")(x)))


def concat() -> keras.Model:
    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 3))
    a = L.Conv2D(4, 3, padding="same", name="a")(inp)
    b = L.Conv2D(6, 3, padding="same", name="b")(inp)
    x = L.Concatenate(name="cat")([a, b])
    return keras.Model(inp, L.Conv2D(5, 1, name="head")(x))


def test_conv_bn_dense_groups_and_output_is_locked():
    from edgeopt.compression import build_channel_graph

    cg = build_channel_graph(conv_bn_dense())
    sizes = {g.sources: g.size for g in cg.groups}
    assert sizes == {("c1",): 8, ("c2",): 12}
    assert (cg.layouts["bn1"] == cg.layouts["c1"]).all()


def test_add_ties_producers_and_depthwise_passes_through():
    from edgeopt.compression import build_channel_graph

    cg = build_channel_graph(residual())
    sizes = {g.sources: g.size for g in cg.groups}
    assert sizes == {("a", "b"): 8, ("c",): 6}
    assert (cg.layouts["dw"] == cg.layouts["add"]).all()
    assert len(cg.layouts["flat"]) == 8 * 8 * 6


def test_concatenate_offsets_channels():
    from edgeopt.compression import build_channel_graph

    cg = build_channel_graph(concat())
    layout = cg.layouts["cat"]
    assert [cg.atoms[a] for a in layout[:5]] == [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 0)]
    assert {g.sources for g in cg.groups} == {("a",), ("b",)}


def test_unsupported_layer_is_named():
    from edgeopt.compression import PruneError, prune_structured

    inp = keras.Input((8, 8, 3))
    x = L.Conv2D(4, 3, name="c1")(inp)
    x = L.Lambda(lambda t: t * 2.0, name="double")(x)
    model = keras.Model(inp, L.Conv2D(2, 1)(x))
    with pytest.raises(PruneError, match=r"cannot prune through layer 'double' \(Lambda\)"):
        prune_structured(model, 0.5)
    assert issubclass(PruneError, EdgeoptError)


def test_model_without_prunable_layer():
    from edgeopt.compression import PruneError, prune_structured

    inp = keras.Input((5,))
    model = keras.Model(inp, L.Dense(3)(inp))
    with pytest.raises(PruneError, match="no prunable layer"):
        prune_structured(model, 0.5)


@pytest.mark.parametrize("ratio", [0, 1, -0.2, 1.5, "half"])
def test_ratio_outside_open_interval(ratio):
    from edgeopt.compression import prune_structured

    with pytest.raises(ConfigError, match="between 0 and 1"):
        prune_structured(conv_bn_dense(), ratio)


def test_l1_removes_the_smallest_filters():
    from edgeopt.compression import prune_structured

    model = concat()
    kernel, bias = model.get_layer("b").get_weights()
    norms = np.array([5.0, 0.1, 3.0, 0.2, 4.0, 0.3])
    kernel = np.ones_like(kernel) * norms / kernel[..., 0].size
    model.get_layer("b").set_weights([kernel, bias])
    result = prune_structured(model, {"b": 0.5}, "l1")
    kept = result.model.get_layer("b").get_weights()[0]
    assert np.allclose(kept[0, 0, 0] * kernel[..., 0].size, [5.0, 3.0, 4.0])
    assert result.per_layer["a"] == (4, 4)


def test_criteria_scores_per_channel():
    from edgeopt.compression import CRITERIA, build_channel_graph

    model = conv_bn_dense()
    gamma = np.arange(8, dtype="float32") - 4
    bn = model.get_layer("bn1")
    bn.set_weights([gamma] + bn.get_weights()[1:])
    cg = build_channel_graph(model)
    samples = np.random.default_rng(0).standard_normal((4, 8, 8, 3)).astype("float32")
    scores = {name: fn(cg, samples) for name, fn in CRITERIA.items()}
    assert all(s["c1"].shape == (8,) and s["c2"].shape == (12,) for s in scores.values())
    assert np.allclose(scores["bn_scale"]["c1"], np.abs(gamma))
    assert (scores["activation"]["c1"] >= 0).all()


def test_activation_criterion_needs_samples():
    from edgeopt.compression import PruneError, build_channel_graph
    from edgeopt.compression.criteria import mean_activation

    with pytest.raises(PruneError, match="sample inputs"):
        mean_activation(build_channel_graph(conv_bn_dense()), None)


def test_count_macs_by_hand():
    from edgeopt.compression import count_macs

    expected = 8 * 8 * 9 * 3 * 8 + 6 * 6 * 9 * 8 * 12 + 12 * 4
    assert count_macs(conv_bn_dense()) == expected


def test_add_with_model_input_locks_the_producer():
    from edgeopt.compression import build_channel_graph

    inp = keras.Input((8, 8, 3))
    x = L.Add()([inp, L.Conv2D(3, 3, padding="same", name="c1")(inp)])
    x = L.Conv2D(6, 1, name="c2")(x)
    cg = build_channel_graph(keras.Model(inp, L.Dense(2)(L.Flatten()(x))))
    assert {g.sources for g in cg.groups if g.size} == {("c2",)}


def test_nested_model_is_named():
    from edgeopt.compression import PruneError, build_channel_graph

    inner_in = keras.Input((8, 8, 4))
    inner = keras.Model(inner_in, L.ReLU()(inner_in), name="block")
    inp = keras.Input((8, 8, 3))
    model = keras.Model(inp, L.Conv2D(2, 1)(inner(L.Conv2D(4, 1)(inp))))
    with pytest.raises(PruneError, match="'block' \\(Functional\\)"):
        build_channel_graph(model)


def test_prune_error_is_a_conversion_error():
    from edgeopt.compression import PruneError
    from edgeopt.errors import ConversionError

    assert issubclass(PruneError, ConversionError)


def test_taylor_gives_zero_to_channels_nothing_reads():
    """A channel whose consumer ignores it cannot change the loss; its weights may be big."""
    from edgeopt.compression import CRITERIA, build_channel_graph

    model = conv_bn_dense()
    kernel, bias = model.get_layer("c2").get_weights()
    kernel[:, :, :3, :] = 0.0
    model.get_layer("c2").set_weights([kernel, bias])
    samples = np.random.default_rng(0).standard_normal((6, 8, 8, 3)).astype("float32")
    scores = CRITERIA["taylor"](build_channel_graph(model), samples)
    assert np.all(scores["c1"][:3] == 0.0) and np.all(scores["c1"][3:] > 0.0)
    assert np.all(CRITERIA["l1"](build_channel_graph(model))["c1"][:3] > 0.0)
    assert scores["c2"].shape == (12,) and np.all(scores["c2"] > 0.0)


def test_taylor_with_labels_and_bad_labels():
    from edgeopt.compression import build_channel_graph, prune_structured
    from edgeopt.compression.taylor import taylor
    from edgeopt.errors import DataError

    model, rng = conv_bn_dense(), np.random.default_rng(0)
    samples = rng.standard_normal((6, 8, 8, 3)).astype("float32")
    labels = rng.integers(0, 4, 6)
    cg = build_channel_graph(model)
    own, given = taylor(cg, samples), taylor(cg, samples, labels)
    assert not np.allclose(own["c2"], given["c2"])
    with pytest.raises(DataError, match="5 labels for 6 samples"):
        taylor(cg, samples, labels[:5])
    result = prune_structured(model, 0.4, "taylor", samples, labels=labels)
    assert result.macs_after <= 0.6 * result.macs_before


def test_separable_conv_macs_by_hand():
    from edgeopt.compression import count_macs

    inp = keras.Input((8, 8, 4))
    model = keras.Model(inp, L.SeparableConv2D(6, 3, depth_multiplier=2, name="s")(inp))
    assert count_macs(model) == 6 * 6 * (9 * 4 * 2 + 4 * 2 * 6)
