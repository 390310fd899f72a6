"""Re-estimate BatchNormalization statistics after channels were removed.

A BN layer normalizes with the mean and variance its input had in training. Removing
channels upstream changes that input (a conv now sums fewer channels), so the stored
statistics no longer fit and a pruned network can collapse to one class before any
retraining. Running the sample inputs through the network in training mode and averaging
each BN layer's batch statistics (the "adaptive BN" of EagleEye, Li et al., 2020) restores
most of the accuracy without touching a weight.

    >>> recalibrate_batchnorm(pruned_model, images)   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np


def batchnorm_layers(model: Any) -> list[Any]:
    import keras

    return [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]


def recalibrate_batchnorm(model: Any, sample_inputs: Any, batch_size: int = 32) -> bool:
    """Replace every BN layer's moving mean/variance by the average over the samples'
    batches; returns False (and changes nothing) when the model has no BN layer.

    The k-th batch gets momentum (k-1)/k, so the result is the plain average of the batch
    statistics, whatever order the batches come in. Only BN statistics change; the BN
    layers' momenta are put back afterwards.
    """
    layers = batchnorm_layers(model)
    if not layers:
        return False
    arrays = sample_inputs if isinstance(sample_inputs, list | tuple) else [sample_inputs]
    arrays = [np.asarray(a, "float32") for a in arrays]
    momenta = [layer.momentum for layer in layers]
    try:
        for k, start in enumerate(range(0, len(arrays[0]), batch_size), start=1):
            for layer in layers:
                layer.momentum = (k - 1) / k
            batch = [a[start:start + batch_size] for a in arrays]
            model(batch if len(batch) > 1 else batch[0], training=True)
    finally:
        for layer, momentum in zip(layers, momenta):
            layer.momentum = momentum
    return True
