"""Weight quantization: symmetric integer codes per output channel or per block.

Weights are handled in a canonical layout: output channels first, then everything one
output channel reads (`(O, I, kh, kw)` for convolutions, `(O, I)` for dense layers);
the backends convert from and to their own layouts. A `WeightQuant` holds the integer
codes and scales; `dequantize()` gives the float values the writers embed, from which
ai-edge-quantizer and onnxruntime recover exactly these codes.

    >>> w = np.array([[0.5, -1.0], [0.25, 0.1]], np.float32)
    >>> q = quantize_rtn(w, bits=8)
    >>> q.codes.tolist(), [round(float(s), 5) for s in q.scale]
    ([[64, -127], [127, 51]], [0.00787, 0.00197])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_SCALE = 1e-12


def qrange(bits: int) -> tuple[int, int]:
    """Code range of signed symmetric weights: int8 [-127, 127] (TFLite), int4 [-8, 7]."""
    qmax = (1 << (bits - 1)) - 1
    return (-qmax if bits == 8 else -qmax - 1), qmax


@dataclass(frozen=True)
class WeightQuant:
    """Integer codes in canonical layout, with one scale per channel or per block."""

    codes: np.ndarray          # int8 storage, canonical shape
    scale: np.ndarray          # (O,) per channel, (O, K // block) per block
    bits: int
    block_size: int | None = None

    def dequantize(self) -> np.ndarray:
        return (self.codes.reshape(len(self.codes), -1).astype(np.float64)
                * self.expanded_scale()).astype(np.float32).reshape(self.codes.shape)

    def expanded_scale(self) -> np.ndarray:
        """Scale per element of the 2-D `(O, K)` view."""
        if self.block_size is None:
            return self.scale[:, None]
        return np.repeat(self.scale, self.block_size, axis=1)

    @property
    def granularity(self) -> str:
        return "channel" if self.block_size is None else f"block{self.block_size}"


def bf16_round(values: np.ndarray) -> np.ndarray:
    """Round to bfloat16 precision (7-bit mantissa), as LiteRT stores blockwise scales."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def channel_scales(w2d: np.ndarray, bits: int, clip: np.ndarray | None = None) -> np.ndarray:
    _, qmax = qrange(bits)
    absmax = np.abs(w2d).max(axis=1) if w2d.size else np.zeros(len(w2d))
    if clip is not None:
        absmax = absmax * clip
    return np.maximum(absmax / qmax, MIN_SCALE)


def block_scales(w2d: np.ndarray, bits: int, block: int) -> np.ndarray:
    _, qmax = qrange(bits)
    blocks = w2d.reshape(len(w2d), -1, block)
    return bf16_round(np.maximum(np.abs(blocks).max(axis=2) / qmax, MIN_SCALE))


def round_codes(w2d: np.ndarray, scale2d: np.ndarray, bits: int) -> np.ndarray:
    qmin, qmax = qrange(bits)
    return np.clip(np.rint(w2d / scale2d), qmin, qmax).astype(np.int8)


def check_block(shape: tuple[int, ...], block: int) -> None:
    if len(shape) != 2 or shape[1] % block:
        raise ValueError(f"blockwise quantization needs a 2-D weight whose input size is a "
                         f"multiple of {block}; got {shape}")


def quantize_rtn(weight: np.ndarray, bits: int = 8, block_size: int | None = None,
                 clip: np.ndarray | None = None) -> WeightQuant:
    """Round to nearest with absmax scales (optionally shrunk by a per-channel `clip`)."""
    w2d = weight.reshape(len(weight), -1).astype(np.float64)
    if block_size is None:
        scale = channel_scales(w2d, bits, clip)
        codes = round_codes(w2d, scale[:, None], bits)
    else:
        check_block(w2d.shape, block_size)
        scale = block_scales(w2d, bits, block_size)
        codes = round_codes(w2d, np.repeat(scale, block_size, axis=1), bits)
    return WeightQuant(codes.reshape(weight.shape), scale.astype(np.float32), bits, block_size)


def mse_clip(weight: np.ndarray, bits: int, grid: int = 40, lowest: float = 0.5) -> np.ndarray:
    """Per-channel shrink factor of the absmax scale that minimises the rounding error."""
    w2d = weight.reshape(len(weight), -1).astype(np.float64)
    base = channel_scales(w2d, bits)
    qmin, qmax = qrange(bits)
    best_err = np.full(len(w2d), np.inf)
    best = np.ones(len(w2d))
    for factor in np.linspace(1.0, lowest, grid):
        scale = base[:, None] * factor
        err = ((np.clip(np.rint(w2d / scale), qmin, qmax) * scale - w2d) ** 2).sum(axis=1)
        better = err < best_err
        best_err[better], best[better] = err[better], factor
    return best


def weight_sqnr_db(weight: np.ndarray, quant: WeightQuant) -> float:
    noise = float(np.sum((weight - quant.dequantize()) ** 2))
    signal = float(np.sum(weight.astype(np.float64) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(max(signal, 1e-30) / noise)
