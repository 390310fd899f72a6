"""First-order Taylor importance: how much the loss would change if a channel were removed.

Removing a channel zeroes it at the input of every Conv2D/Dense that reads it, which is the
same as zeroing that layer's kernel rows for the channel. The first-order change of the loss
is then ``-sum(kernel * d loss / d kernel)`` over those rows (equal to activation x gradient
summed over positions, the estimate of Molchanov et al., 2019). Per sample, the changes of
all channels removed together (a cluster) are added, squared and averaged over the samples,
which estimates the Fisher information of the cluster's mask (Theis et al., 2018).

The loss is cross-entropy against the labels when given; without labels the model being
pruned is its own teacher: its top-1 outputs are the targets (soft targets would give a
zero gradient at the model itself). Outputs are read as class scores along the last axis;
a single-value output uses a squared error against its own value plus seeded noise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.compression.graph import PruneError
from edgeopt.compression.groups import SOURCES, ChannelGraph
from edgeopt.errors import DataError


def _consumers(cg: ChannelGraph) -> list[tuple[Any, np.ndarray]]:
    """(kernel variable, input layout) of each Conv2D/Dense/SeparableConv2D reading atoms."""
    found = []
    for node in cg.graph.nodes:
        if node.class_name not in SOURCES:
            continue
        layout = cg.layouts[node.inbound[0]]
        if (layout >= 0).any():
            layer = cg.model.get_layer(node.name)
            kernel = layer.depthwise_kernel if node.class_name == "SeparableConv2D" \
                else layer.kernel
            found.append((kernel, layout))
    return found


def _first(outputs: Any) -> np.ndarray:
    return np.asarray(outputs[0] if isinstance(outputs, list | tuple) else outputs, "float32")


def _as_batches(samples: Any) -> tuple[list[np.ndarray], int]:
    arrays = [np.asarray(a, "float32") for a in
              (samples if isinstance(samples, list | tuple) else [samples])]
    return arrays, len(arrays[0])


def _targets(reference: np.ndarray, labels: Any, seed: int) -> tuple[np.ndarray, bool]:
    """Per-sample targets and whether they are class indices (cross-entropy) or values."""
    if labels is not None:
        labels = np.asarray(labels)
        if len(labels) != len(reference):
            raise DataError(f"{len(labels)} labels for {len(reference)} samples")
        classes = labels.dtype.kind in "iu" and reference.shape[-1] > 1
        return (labels.astype("int64") if classes else labels.astype("float32")), classes
    if reference.shape[-1] > 1:
        return reference.argmax(axis=-1), True
    noise = np.random.default_rng(seed).normal(0.0, float(reference.std()) + 1e-6,
                                               reference.shape)
    return (reference + noise).astype("float32"), False


def _loss_function(reference: np.ndarray, classes: bool):
    """Loss of one output against a target; probabilities are read as log-probabilities."""
    import tensorflow as tf

    probs = reference.min() >= 0 and np.allclose(reference.sum(axis=-1), 1.0, atol=1e-3)

    def loss(output: Any, target: Any) -> Any:
        if not classes:
            return tf.reduce_sum(tf.square(output - target))
        logits = tf.math.log(tf.clip_by_value(output, 1e-7, 1.0)) if probs else output
        return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(target, logits))

    return loss


def _row_contributions(kernel: np.ndarray, gradient: np.ndarray) -> np.ndarray:
    """kernel x gradient summed per input channel (the second-to-last kernel axis)."""
    product = (kernel * gradient).reshape(-1, kernel.shape[-2], kernel.shape[-1])
    return product.sum(axis=(0, 2))


def taylor(cg: ChannelGraph, sample_inputs: Any, labels: Any = None, seed: int = 0) -> dict:
    """Per source layer, one Taylor importance per output channel (its cluster's score)."""
    import tensorflow as tf

    if sample_inputs is None:
        raise PruneError("the 'taylor' criterion needs sample inputs")
    model, consumers = cg.model, _consumers(cg)
    arrays, count = _as_batches(sample_inputs)
    reference = _first(model(arrays if len(arrays) > 1 else arrays[0], training=False))
    targets, classes = _targets(reference, labels, seed)
    loss_of = _loss_function(reference, classes)
    variables = [kernel.value for kernel, _ in consumers]
    kernels = [np.asarray(v) for v in variables]

    @tf.function
    def gradients(inputs: list, target: Any) -> list:
        with tf.GradientTape() as tape:
            tape.watch(variables)
            output = model(inputs if len(inputs) > 1 else inputs[0], training=False)
            loss = loss_of(output[0] if isinstance(output, list | tuple) else output, target)
        return tape.gradient(loss, variables)

    per_sample = np.zeros((count, len(cg.atoms)))
    for i in range(count):
        grads = gradients([a[i:i + 1] for a in arrays], targets[i:i + 1])
        for (_, layout), kernel, grad in zip(consumers, kernels, grads):
            rows = _row_contributions(kernel, np.asarray(grad))
            roots = np.where(layout >= 0, cg.roots[np.maximum(layout, 0)], -1)
            free = roots >= 0
            np.add.at(per_sample[i], roots[free], rows[free])
    cluster = (per_sample ** 2).mean(axis=0)
    return _per_source(cg, cluster)


def _per_source(cg: ChannelGraph, cluster: np.ndarray) -> dict:
    """Each source channel gets its cluster's score (0 for locked channels)."""
    scores: dict[str, list[float]] = {}
    for atom, (name, _) in enumerate(cg.atoms):
        root = int(cg.roots[atom])
        scores.setdefault(name, []).append(float(cluster[root]) if root >= 0 else 0.0)
    return {name: np.array(values) for name, values in scores.items()}
