"""Numerical parity between a model and its conversion, on the same sample inputs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeopt.errors import ConversionError
from edgeopt.validate import cosine_similarity

# Below this cosine the converted model computes something else: stop the build.
BROKEN_COSINE = 0.9
# Float conversions normally agree to ~1e-6; below this the report warns.
WARN_COSINE = 0.9999


@dataclass(frozen=True)
class Parity:
    samples: int
    max_abs: float
    cosine: float

    def to_json(self) -> dict:
        return {"samples": self.samples, "max_abs": self.max_abs, "cosine": self.cosine,
                "warning": self.cosine < WARN_COSINE}


def compare_outputs(reference: list[np.ndarray], candidate: list[np.ndarray]) -> Parity:
    """Worst max-abs and cosine over all outputs."""
    if len(reference) != len(candidate):
        raise ConversionError(f"the converted model has {len(candidate)} outputs, the source "
                              f"{len(reference)}")
    max_abs, cosine = 0.0, 1.0
    for ref, cand in zip(reference, candidate):
        if ref.shape != cand.shape:
            raise ConversionError(f"converted output shape {cand.shape} differs from the "
                                  f"source's {ref.shape}")
        max_abs = max(max_abs, float(np.max(np.abs(ref.astype(np.float64) - cand))))
        cosine = min(cosine, cosine_similarity(ref, cand))
    return Parity(len(reference[0]), max_abs, cosine)


def check_parity(reference: list[np.ndarray], candidate: list[np.ndarray], what: str) -> Parity:
    parity = compare_outputs(reference, candidate)
    if parity.cosine < BROKEN_COSINE:
        raise ConversionError(f"{what} changed the model's outputs (cosine {parity.cosine:.3f} "
                              f"against the source, max abs error {parity.max_abs:.3g})")
    return parity
