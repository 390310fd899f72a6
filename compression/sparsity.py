"""Magnitude sparsity: zero the smallest weights, unstructured or 2:4 (two of every four).

The model keeps its shape; only kernels of Conv2D/Dense layers get zeros. Writing a
``.tflite`` that stores them sparsely is the TFLite backend's job (``tflite_sparse``).

>>> result = sparsify(model, SparsityConfig(sparsity=0.8))   # doctest: +SKIP
>>> result.density                                             # {'dense': 0.2, ...}
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgeopt.errors import ConfigError

SPARSE_KINDS = ("Conv2D", "Dense")


@dataclass(frozen=True)
class SparsityConfig:
    """``pattern``: ``unstructured`` (any ``sparsity`` in (0, 1)) or ``2:4`` (always 0.5).

    Kernels smaller than ``min_weights`` or whose name does not match ``layers`` stay dense.
    """

    sparsity: float = 0.5
    pattern: str = "unstructured"
    layers: str = ".*"
    min_weights: int = 256


@dataclass
class SparsityResult:
    """The sparsified copy, the share of non-zero kernel weights per layer, layers skipped."""

    model: Any
    density: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def unstructured_mask(kernel: np.ndarray, sparsity: float) -> np.ndarray:
    """Keep the largest-magnitude ``1 - sparsity`` share of the weights."""
    drop = int(round(kernel.size * sparsity))
    mask = np.ones(kernel.size, dtype=bool)
    mask[np.argsort(np.abs(kernel), axis=None, kind="stable")[:drop]] = False
    return mask.reshape(kernel.shape)


def two_of_four_mask(kernel: np.ndarray, sparsity: float = 0.5) -> np.ndarray:
    """Keep the two largest of every four consecutive input weights of each output."""
    cin, cout = kernel.shape[-2], kernel.shape[-1]
    blocks = np.abs(kernel).reshape(-1, cin // 4, 4, cout)
    order = np.argsort(blocks, axis=2, kind="stable")
    mask = np.ones_like(blocks, dtype=bool)
    np.put_along_axis(mask, order[:, :, :2, :], False, axis=2)
    return mask.reshape(kernel.shape)


PATTERNS: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    "unstructured": unstructured_mask, "2:4": two_of_four_mask,
}


def _check(config: SparsityConfig) -> None:
    if config.pattern not in PATTERNS:
        raise ConfigError(f"unknown sparsity pattern '{config.pattern}' "
                          f"(choose from {', '.join(PATTERNS)})")
    if not 0 < config.sparsity < 1:
        raise ConfigError(f"sparsity must be between 0 and 1 (exclusive), got {config.sparsity}")


def _skip_reason(layer: Any, config: SparsityConfig) -> str | None:
    kernel = layer.kernel
    if not re.fullmatch(config.layers, layer.name):
        return "not selected"
    if int(np.prod(kernel.shape)) < config.min_weights:
        return f"fewer than {config.min_weights} weights"
    if config.pattern == "2:4" and kernel.shape[-2] % 4:
        return "input channels not a multiple of 4"
    return None


def sparsify(model: Any, config: SparsityConfig) -> SparsityResult:
    """A copy of ``model`` with the smallest Conv2D/Dense kernel weights set to zero."""
    import keras

    _check(config)
    sparsity = 0.5 if config.pattern == "2:4" else config.sparsity
    copy = keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    result = SparsityResult(copy)
    for layer in copy.layers:
        if type(layer).__name__ not in SPARSE_KINDS:
            continue
        reason = _skip_reason(layer, config)
        if reason:
            result.skipped[layer.name] = reason
            continue
        weights = layer.get_weights()
        mask = PATTERNS[config.pattern](weights[0], sparsity)
        layer.set_weights([weights[0] * mask] + weights[1:])
        result.density[layer.name] = float(mask.mean())
    return result
