"""Quantization-aware training graphs: fold BN, fake-quantize, read the learned ranges back.

The runtime model and the Keras model name their tensors differently (a converter fuses a
convolution with its activation, renames and reorders), so tensors are matched by what
they hold: on the same probe samples, a runtime activation and a Keras layer output with
the same sorted values are the same tensor, whatever their layout (NHWC or NCHW).

    split = split_separable(model)                         # as the converter lowers it
    equalized = equalize_separable(split, samples)         # float-exact, evens channels
    folded = fold_batchnorm(split)
    ranges = layer_ranges(folded, runtime_values, core_ranges, probe)
    student = qat_model(folded, ranges)                    # train this (distillation)
    trained = trained_float(student, folded)               # float weights, same graph
    export = runtime_ranges(trained, learned_ranges(student), runtime_values, probe)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.calibration.fakequant import qat_layers
from edgeopt.errors import ConfigError

INPUT_KEY = "<input>"     # the model input's fake quantizer
MATCH_TOLERANCE = 1e-3    # relative to the tensor's largest magnitude
WEIGHT_CLASSES = ("Conv2D", "DepthwiseConv2D", "Dense")


def producers(layer: Any) -> list[str]:
    """The names of the layers whose outputs `layer` reads."""
    nodes = layer._inbound_nodes
    return [p.operation.name for node in nodes for p in node.parent_nodes]


def consumers(model: Any) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {layer.name: [] for layer in model.layers}
    for layer in model.layers:
        for name in producers(layer):
            found.setdefault(name, []).append(layer.name)
    return found


def _is_weight_layer(layer: Any) -> bool:
    return qat_layers().weight_axes(layer) is not None


def foldable_pairs(model: Any) -> dict[str, str]:
    """BatchNormalization layer -> the conv/dense it folds into (the converter's rule: a
    linear conv or dense whose only consumer is the BN, on the channel axis)."""
    import keras

    users = consumers(model)
    pairs = {}
    for layer in model.layers:
        if not isinstance(layer, keras.layers.BatchNormalization) or len(layer._inbound_nodes) != 1:
            continue
        source = producers(layer)
        if len(source) != 1:
            continue
        conv = model.get_layer(source[0])
        axis = layer.axis if isinstance(layer.axis, int) else tuple(layer.axis)
        rank = len(layer.input.shape)
        if (_is_weight_layer(conv) and users[conv.name] == [layer.name]
                and len(conv._inbound_nodes) == 1 and axis in (-1, rank - 1, (rank - 1,))
                and conv.get_config().get("activation") == "linear"):
            pairs[layer.name] = conv.name
    return pairs


def _bn_scale_shift(bn: Any) -> tuple[np.ndarray, np.ndarray]:
    values = {w.path.split("/")[-1]: w.numpy() for w in bn.weights}
    mean, var = values["moving_mean"], values["moving_variance"]
    gamma = values.get("gamma", np.ones_like(mean))
    beta = values.get("beta", np.zeros_like(mean))
    scale = gamma / np.sqrt(var + bn.epsilon)
    return scale.astype(np.float32), (beta - mean * scale).astype(np.float32)


def _scale_kernel(conv: Any, kernel: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Multiply each output channel of a kernel (depthwise: (kh, kw, I, mult))."""
    return kernel * scale.reshape(kernel.shape[2:] if kernel.ndim == 4 and
                                  type(conv).__name__ == "DepthwiseConv2D" else kernel.shape[-1:])


def folded_weights(conv: Any, bn: Any) -> list[np.ndarray]:
    """[kernel, bias] of `conv` with `bn` folded in: W s, (b - mean) s + beta."""
    scale, shift = _bn_scale_shift(bn)
    kernel = conv.kernel.numpy()
    bias = conv.bias.numpy() if conv.use_bias else np.zeros_like(scale)
    return [_scale_kernel(conv, kernel, scale), bias * scale + shift]


def unfolded_weights(conv: Any, bn: Any, kernel: np.ndarray,
                     bias: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(conv weights, bn weights) that compute the folded `kernel, bias` with the BN kept:
    the conv kernel is divided by the BN scale and the BN's beta absorbs the bias."""
    scale, _ = _bn_scale_shift(bn)
    safe = np.where(np.abs(scale) > 1e-12, scale, 1.0)
    conv_weights = [_scale_kernel(conv, kernel, 1.0 / safe)]
    own_bias = conv.bias.numpy() if conv.use_bias else np.zeros_like(scale)
    if conv.use_bias:
        conv_weights.append(own_bias)
    values = {w.path.split("/")[-1]: w.numpy() for w in bn.weights}
    beta = bias - scale * (own_bias - values["moving_mean"])
    bn_weights = [beta if w.path.endswith("/beta") else w.numpy() for w in bn.weights]
    return conv_weights, bn_weights


def _clone(model: Any, clone_function) -> Any:
    import keras

    return keras.models.clone_model(model, clone_function=clone_function)


def _fresh(layer: Any, **changes) -> Any:
    return layer.__class__.from_config({**layer.get_config(), **changes})


SEPARABLE_SUFFIX = "_dw"   # the depthwise half of a split SeparableConv2D


def _separable_halves(layer: Any) -> tuple[Any, Any]:
    """(DepthwiseConv2D named `<name>_dw`, 1x1 Conv2D named `<name>`) computing `layer`."""
    import keras

    config = layer.get_config()
    depthwise = keras.layers.DepthwiseConv2D(
        config["kernel_size"], config["strides"], padding=config["padding"],
        depth_multiplier=config["depth_multiplier"], data_format=config["data_format"],
        dilation_rate=config["dilation_rate"], use_bias=False,
        name=f"{layer.name}{SEPARABLE_SUFFIX}")
    pointwise = keras.layers.Conv2D(config["filters"], 1, activation=config["activation"],
                                    use_bias=config["use_bias"],
                                    data_format=config["data_format"], name=layer.name)
    return depthwise, pointwise


def split_separable(model: Any) -> Any:
    """A copy of `model` with each SeparableConv2D split into a DepthwiseConv2D and a 1x1
    Conv2D, as the converter lowers it (DEPTHWISE_CONV_2D then CONV_2D, an int8 tensor
    between them): each half then gets its own fake-quantized kernel and output, and a BN
    after it folds into the 1x1 half. A model without one is returned as it is."""
    import keras

    separable = {la.name for la in model.layers if isinstance(la, keras.layers.SeparableConv2D)}
    if not separable:
        return model
    halves: dict[str, tuple[Any, Any]] = {}

    def call(layer, *args, **kwargs):
        if layer.name not in separable:
            return layer(*args, **kwargs)
        depthwise, pointwise = halves[layer.name] = _separable_halves(layer)
        return pointwise(depthwise(*args))

    split = keras.models.clone_model(model, clone_function=_fresh, call_function=call)
    for layer in model.layers:
        if layer.name in halves:
            depthwise, pointwise = halves[layer.name]
            depthwise.set_weights([layer.depthwise_kernel.numpy()])
            pointwise.set_weights([layer.pointwise_kernel.numpy()]
                                  + ([layer.bias.numpy()] if layer.use_bias else []))
        elif layer.weights:
            split.get_layer(layer.name).set_weights(layer.get_weights())
    return split


MAX_EQUALIZE = 32.0       # a channel is scaled up by at most this (dead channels stay)
EQUALIZE_BATCH = 32       # samples per pass when measuring channel reaches


def _channel_extremes(tap: Any, inputs: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(min, max) per channel (last axis) of each output of `tap` over `inputs`, a batch
    at a time (a whole calibration set of feature maps need not fit in memory)."""
    found: list[tuple[np.ndarray, np.ndarray]] = []
    for start in range(0, len(inputs), EQUALIZE_BATCH):
        outputs = tap(inputs[start:start + EQUALIZE_BATCH], training=False)
        outputs = outputs if isinstance(outputs, list | tuple) else [outputs]
        for i, out in enumerate(outputs):
            flat = np.asarray(out).reshape(-1, out.shape[-1])
            low, high = flat.min(axis=0), flat.max(axis=0)
            if i == len(found):
                found.append((low, high))
            else:
                found[i] = (np.minimum(found[i][0], low), np.maximum(found[i][1], high))
    return found


def _separable_pairs(split: Any) -> list[tuple[Any, Any]]:
    """(depthwise half, 1x1 half) of each SeparableConv2D that `split_separable` split."""
    import keras

    names, users = {la.name: la for la in split.layers}, consumers(split)
    pairs = []
    for layer in split.layers:
        pointwise = names.get(layer.name[:-len(SEPARABLE_SUFFIX)])
        if (isinstance(layer, keras.layers.DepthwiseConv2D) and not layer.use_bias
                and layer.name.endswith(SEPARABLE_SUFFIX)
                and layer.get_config().get("activation") == "linear"
                and isinstance(pointwise, keras.layers.Conv2D)
                and tuple(pointwise.kernel_size) == (1, 1)
                and users[layer.name] == [pointwise.name]):
            pairs.append((layer, pointwise))
    return pairs


def equalize_separable(split: Any, inputs: np.ndarray) -> dict[str, tuple[float, float]]:
    """Scale the output channels of each depthwise half of `split` (a `split_separable`
    model) to the reach of its widest channel on `inputs`, and divide the 1x1 half's input
    rows by the same factors: the float model computes the same, but the int8 tensor
    between the halves (one scale for all channels) no longer rounds a narrow channel on
    the widest one's step (cross-layer equalization, Nagel et al. 2019, on a pair with
    nothing between). In place; returns each depthwise output's new (min, max) on
    `inputs`, the start of its fake quantizer.

        >>> ranges = equalize_separable(split, calibration_images)   # doctest: +SKIP
    """
    import keras

    pairs = _separable_pairs(split)
    if not pairs:
        return {}
    tap = keras.Model(split.inputs, [dw.output for dw, _ in pairs])
    ranges = {}
    for (dw, pw), (low, high) in zip(pairs, _channel_extremes(tap, inputs)):
        reach = np.maximum(-low, high)
        if not reach.max() > 0:
            continue                                      # nothing to equalize
        scale = (reach.max() / np.maximum(reach, reach.max() / MAX_EQUALIZE)).astype(np.float32)
        kernel = dw.get_weights()[0]                      # (kh, kw, channels, multiplier)
        dw.set_weights([kernel * scale.reshape(kernel.shape[2:])])
        pw.set_weights([pw.get_weights()[0] / scale[:, None]] + pw.get_weights()[1:])
        ranges[dw.name] = (float((low * scale).min()), float((high * scale).max()))
    return ranges


def merge_separable(original: Any, split: Any) -> Any:
    """A copy of `original` holding the weights of its `split_separable` copy `split`."""
    import keras

    merged = _clone(original, _fresh)
    for layer in original.layers:
        if not layer.weights:
            continue
        target = merged.get_layer(layer.name)
        if isinstance(layer, keras.layers.SeparableConv2D):
            pointwise = split.get_layer(layer.name).get_weights()
            depthwise = split.get_layer(f"{layer.name}{SEPARABLE_SUFFIX}").get_weights()
            target.set_weights(depthwise + pointwise)
        else:
            target.set_weights(split.get_layer(layer.name).get_weights())
    return merged


def freeze_batchnorm(model: Any) -> int:
    """BatchNormalization layers left in `model` (not foldable) run on their moving
    statistics while training (a frozen BN, as the converter's inference graph): how many."""
    import keras

    inner = [getattr(la, "inner", la) for la in model.layers]   # a Quantized wraps its layer
    frozen = [la for la in inner if isinstance(la, keras.layers.BatchNormalization)]
    for layer in frozen:
        layer.trainable = False
    return len(frozen)


def fold_batchnorm(model: Any) -> Any:
    """A copy of `model` with every foldable BatchNormalization folded into its conv/dense
    (the BN becomes a pass-through under its own name): what the TFLite converter runs."""
    pairs = foldable_pairs(model)
    convs = {conv: bn for bn, conv in pairs.items()}

    def clone(layer):
        if layer.name in pairs:
            return qat_layers().FoldedAway(name=layer.name)
        if layer.name in convs:
            return _fresh(layer, use_bias=True)
        return _fresh(layer)

    folded = _clone(model, clone)
    for layer in model.layers:
        if layer.name in pairs or not layer.weights:
            continue
        weights = (folded_weights(layer, model.get_layer(convs[layer.name]))
                   if layer.name in convs else layer.get_weights())
        folded.get_layer(layer.name).set_weights(weights)
    return folded


def softmax_outputs(model: Any) -> set[str]:
    """Layers whose output is a model output computed by a softmax: their int8 range is
    the runtime's fixed [0, 1) grid, and training reads their probabilities as log-probs."""
    import keras

    names = {t._keras_history.operation.name for t in model.outputs}
    return {n for n in names if isinstance(model.get_layer(n), keras.layers.Softmax)
            or model.get_layer(n).get_config().get("activation") == "softmax"}


def qat_model(folded: Any, ranges: dict[str, tuple[float, float]]) -> Any:
    """The training graph: conv/dense layers with per-channel fake-quantized kernels, a
    fake quantizer (started at `ranges[layer]`) on every output the runtime quantizes,
    and on the input when `ranges` holds INPUT_KEY. Shares no variable with `folded`."""
    import keras

    layers = qat_layers()
    if len(folded.inputs) != 1:
        raise ConfigError(f"quantization-aware training takes single-input models; this one "
                          f"has {len(folded.inputs)} inputs")

    ranges = {k: v for k, v in ranges.items() if k not in softmax_outputs(folded)}

    def clone(layer):
        fresh = _fresh(layer)
        if _is_weight_layer(layer) or layer.name in ranges:
            return layers.Quantized(fresh, ranges.get(layer.name))
        return fresh

    inner = _clone(folded, clone)
    for layer in folded.layers:
        if layer.weights:
            _inner_layer(inner, layer.name).set_weights(layer.get_weights())
    freeze_batchnorm(inner)
    source = keras.Input(tuple(folded.inputs[0].shape[1:]), name="qat_input")
    x = source
    if INPUT_KEY in ranges:
        x = layers.ActivationQuantizer(*ranges[INPUT_KEY], name="input_act")(x)
    return keras.Model(source, inner(x), name=f"{folded.name}_qat")


def gives_probabilities(model: Any, probe: np.ndarray | None) -> bool:
    """Whether the single output is a softmax's: a Softmax layer, or (a softmax written
    in other ops, as an ONNX import keeps it) rows of non-negative values that sum to 1 on
    the probe samples."""
    if len(model.outputs) != 1:
        return False
    if softmax_outputs(model):
        return True
    if probe is None or not len(probe):
        return False
    out = np.asarray(model(probe[:8], training=False), np.float64)
    return bool(out.ndim >= 2 and out.shape[-1] > 1 and out.min() >= 0
                and np.allclose(out.sum(axis=-1), 1.0, atol=1e-3))


def training_view(student: Any, folded: Any, probe: np.ndarray | None = None) -> Any:
    """What distillation trains: `student` itself, or (a softmax output) its log-probs;
    the same variables either way. Training on probabilities as if they were logits
    flattens the loss (magika's softmax, written as Exp/ReduceSum/Div: held-back
    agreement fell 0.83 -> 0.60 in one epoch)."""
    import keras

    if not gives_probabilities(folded, probe):
        return student
    log = qat_layers().LogProbabilities(name="log_probabilities")(student.outputs[0])
    return keras.Model(student.inputs, log, name=f"{student.name}_log")


def _inner_layer(model: Any, name: str) -> Any:
    names = {layer.name: layer for layer in model.layers}
    if name in names:
        return names[name]
    return names[f"{name}_qat"].inner


def _wrapped(student: Any) -> Any:
    return next(layer for layer in student.layers if hasattr(layer, "layers")
                and layer.name != student.name)


def quantized_layer_count(student: Any) -> int:
    """How many layers of the training graph compute with fake-quantized weights."""
    layers = qat_layers()
    return sum(1 for la in _wrapped(student).layers
               if isinstance(la, layers.Quantized) and la.axes is not None)


def learned_ranges(student: Any) -> dict[str, tuple[float, float]]:
    """Layer (or INPUT_KEY) -> the range its fake quantizer ended training with."""
    layers = qat_layers()
    found = {}
    for layer in student.layers:
        if isinstance(layer, layers.ActivationQuantizer):
            found[INPUT_KEY] = layer.range()
    for layer in _wrapped(student).layers:
        if isinstance(layer, layers.Quantized) and layer.output_quantizer is not None:
            found[layer.inner.name] = layer.output_quantizer.range()
    return found


def trained_float(student: Any, folded: Any) -> Any:
    """`folded` (a fresh copy) holding the float weights `student` was trained to."""
    inner = _wrapped(student)
    trained = _clone(folded, _fresh)
    for layer in folded.layers:
        if layer.weights:
            trained.get_layer(layer.name).set_weights(_inner_layer(inner, layer.name).get_weights())
    return trained


def unfold_into(original: Any, trained_folded: Any) -> Any:
    """A copy of `original` (BN layers kept) computing what `trained_folded` computes."""
    pairs = foldable_pairs(original)
    convs = {conv: bn for bn, conv in pairs.items()}
    out = _clone(original, _fresh)
    for layer in original.layers:
        if not layer.weights or layer.name in pairs:
            continue
        weights = trained_folded.get_layer(layer.name).get_weights()
        if layer.name in convs:
            bn = original.get_layer(convs[layer.name])
            conv_w, bn_w = unfolded_weights(layer, bn, *weights)
            out.get_layer(layer.name).set_weights(conv_w)
            out.get_layer(bn.name).set_weights(bn_w)
        else:
            out.get_layer(layer.name).set_weights(weights)
    return out


# --- which runtime tensor is which Keras output ------------------------------------------

def keras_values(model: Any, probe: np.ndarray) -> dict[str, np.ndarray]:
    """Every single-node layer's output (and INPUT_KEY: the input) on `probe`."""
    import keras

    layers = [la for la in model.layers[1:] if len(la._inbound_nodes) == 1
              and not isinstance(la.output, list | tuple)]
    tap = keras.Model(model.inputs[0], [la.output for la in layers])
    outputs = tap(probe, training=False)
    outputs = outputs if isinstance(outputs, list | tuple) else [outputs]
    found = {INPUT_KEY: np.asarray(probe, np.float32)}
    found.update({la.name: np.asarray(out, np.float32) for la, out in zip(layers, outputs)})
    return found


def match_tensors(runtime: dict[str, np.ndarray],
                  keras: dict[str, np.ndarray]) -> dict[str, str]:
    """Runtime tensor -> the Keras output (or INPUT_KEY) holding the same values."""
    by_size: dict[int, list[tuple[str, np.ndarray]]] = {}
    for key, value in keras.items():
        by_size.setdefault(value.size, []).append((key, np.sort(value, axis=None)))
    matched = {}
    for name, value in runtime.items():
        ordered = np.sort(np.asarray(value, np.float32), axis=None)
        tolerance = MATCH_TOLERANCE * max(float(np.abs(ordered).max(initial=0.0)), 1e-6)
        best, best_error = None, tolerance
        for key, candidate in by_size.get(ordered.size, []):
            error = float(np.abs(candidate - ordered).max(initial=0.0))
            if error <= best_error:
                best, best_error = key, error
        if best is not None:
            matched[name] = best
    return matched


def layer_ranges(matches: dict[str, str],
                 tensor_ranges: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """Keras output -> the core's range of the runtime tensor it matched (first wins)."""
    found: dict[str, tuple[float, float]] = {}
    for tensor, key in matches.items():
        if tensor in tensor_ranges and key not in found:
            found[key] = tensor_ranges[tensor]
    return found


def runtime_ranges(matches: dict[str, str],
                   learned: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """Runtime tensor -> the learned range of the Keras output it matched."""
    return {tensor: learned[key] for tensor, key in matches.items() if key in learned}
