"""Simple label-preserving augmentations for distillation on unlabeled samples."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _shift(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Roll images by up to 2 pixels in each spatial direction (4-D inputs only)."""
    if x.ndim != 4:
        return x
    dy, dx = rng.integers(-2, 3, size=2)
    return np.roll(x, (int(dy), int(dx)), axis=(1, 2))


def _noise(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Add Gaussian noise at 5% of the batch's spread."""
    return x + rng.normal(0.0, 0.05 * float(x.std()) + 1e-8, x.shape).astype(x.dtype)


def _flip(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Mirror images left-right half of the time (not for digits or text)."""
    return x[:, :, ::-1] if x.ndim == 4 and rng.random() < 0.5 else x


AUGMENTS: dict[str, Callable[[np.ndarray, np.random.Generator], np.ndarray]] = {
    "shift": _shift, "noise": _noise, "flip": _flip,
}
