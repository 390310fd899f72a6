"""GPTQ (Frantar et al., 2022): error-compensating weight rounding from calibration data.

Round-to-nearest rounds every weight on its own. GPTQ rounds the input columns of a
layer one at a time and spreads each column's rounding error over the columns not yet
rounded, weighted by the inverse Hessian `H = sum(x x^T)` of the layer's inputs, so the
layer's *output* error on the calibration data is what gets minimised. Per-channel
scales come from an MSE clipping search; blockwise scales are set when GPTQ reaches a
block, from the already-compensated weights.

    >>> quant = gptq_quantize(weight2d, hessian, bits=4)      # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeopt.calibration.weights import (
    WeightQuant,
    bf16_round,
    channel_scales,
    mse_clip,
    qrange,
)

MIN_SCALE = 1e-12


@dataclass(frozen=True)
class GPTQSettings:
    damp: float = 0.01          # fraction of the mean Hessian diagonal added for stability
    lazy_block: int = 128       # columns updated together (a multiple of every block size)
    act_order: bool = True      # round columns with large activations first (per channel)
    clip_search: bool = True    # MSE-optimal per-channel scales


def gptq_quantize(weight: np.ndarray, hessian: np.ndarray, bits: int = 4,
                  block_size: int | None = None,
                  settings: GPTQSettings = GPTQSettings()) -> WeightQuant:
    """Quantize a canonical weight `(O, ...)` whose flattened input size matches `hessian`."""
    w2d = weight.reshape(len(weight), -1).astype(np.float64).copy()
    if hessian.shape != (w2d.shape[1], w2d.shape[1]):
        raise ValueError(f"Hessian {hessian.shape} does not match weight {w2d.shape}")
    h = hessian.astype(np.float64).copy()
    dead = np.diag(h) <= 0
    h[dead, dead] = 1.0
    w2d[:, dead] = 0.0
    order = _column_order(h, block_size, settings)
    w2d, h = w2d[:, order], h[np.ix_(order, order)]
    scale = None
    if block_size is None:
        clip = mse_clip(w2d, bits) if settings.clip_search else None
        scale = channel_scales(w2d, bits, clip)
    upper = _inverse_cholesky(h, settings.damp)
    codes, block_scale = _rounding_loop(w2d, upper, bits, scale, block_size, settings)
    inverse = np.argsort(order)
    codes = codes[:, inverse].reshape(weight.shape)
    final_scale = scale if block_size is None else block_scale
    return WeightQuant(codes, final_scale.astype(np.float32), bits, block_size)


def _column_order(h: np.ndarray, block_size: int | None, settings: GPTQSettings) -> np.ndarray:
    if settings.act_order and block_size is None:
        return np.argsort(-np.diag(h), kind="stable")
    return np.arange(len(h))


def _inverse_cholesky(h: np.ndarray, damp: float) -> np.ndarray:
    """Upper Cholesky factor of H^-1 after damping (the form GPTQ's updates need)."""
    import scipy.linalg

    h = h + np.eye(len(h)) * damp * float(np.mean(np.diag(h)))
    for _ in range(6):
        try:
            lower = scipy.linalg.cholesky(h, lower=True)
            break
        except np.linalg.LinAlgError:
            h = h + np.eye(len(h)) * float(np.mean(np.diag(h))) * 0.1
    inverse = scipy.linalg.cho_solve((lower, True), np.eye(len(h)))
    return scipy.linalg.cholesky(inverse, lower=False)


def _rounding_loop(w2d: np.ndarray, upper: np.ndarray, bits: int, scale: np.ndarray | None,
                   block_size: int | None, settings: GPTQSettings):
    qmin, qmax = qrange(bits)
    rows, cols = w2d.shape
    codes = np.zeros((rows, cols), np.int8)
    block_scale = None if block_size is None else np.zeros((rows, cols // block_size))
    current = scale
    lazy = settings.lazy_block if block_size is None else max(settings.lazy_block, block_size)
    for start in range(0, cols, lazy):
        stop = min(start + lazy, cols)
        chunk = w2d[:, start:stop].copy()
        errors = np.zeros_like(chunk)
        hinv = upper[start:stop, start:stop]
        for i in range(stop - start):
            column = start + i
            if block_size is not None and column % block_size == 0:
                absmax = np.abs(chunk[:, i:i + block_size]).max(axis=1)
                current = bf16_round(np.maximum(absmax / qmax, MIN_SCALE)).astype(np.float64)
                block_scale[:, column // block_size] = current
            q = np.clip(np.rint(chunk[:, i] / current), qmin, qmax)
            codes[:, column] = q
            err = (chunk[:, i] - q * current) / hinv[i, i]
            chunk[:, i:] -= np.outer(err, hinv[i, i:])
            errors[:, i] = err
        w2d[:, stop:] -= errors @ upper[start:stop, stop:]
    return codes, block_scale
