"""Compare a compressed model's outputs with the float model's on held-back samples.

    >>> record = compare(reference_outputs, artifact_outputs, labels)
    >>> record.metric, record.value
    ('top1_accuracy', 0.985)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


def sqnr_db(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio in dB; +inf when identical."""
    reference = reference.astype(np.float64)
    noise = float(np.sum((reference - candidate.astype(np.float64)) ** 2))
    signal = float(np.sum(reference ** 2))
    if noise == 0:
        return float("inf")
    if signal == 0:
        return float("-inf")
    return 10.0 * np.log10(signal / noise)


def is_classifier(output: np.ndarray) -> bool:
    return output.ndim == 2 and output.shape[1] > 1


def top1_agreement(reference: np.ndarray, candidate: np.ndarray) -> float | None:
    """Share of samples whose top class is the same; samples whose float output has no single
    top class (a tie, e.g. a constant softmax) are left out, and None when all are."""
    top2 = np.sort(reference, axis=1)[:, -2:]
    decided = top2[:, 1] > top2[:, 0]
    if not decided.any():
        return None
    same = reference.argmax(1) == candidate.argmax(1)
    return float(np.mean(same[decided]))


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of two arrays as flat vectors (1.0 for two zero arrays)."""
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    if norm == 0:
        return 1.0 if np.array_equal(a, b) else 0.0
    return float(np.dot(a, b) / norm)


@dataclass(frozen=True)
class Validation:
    samples: int
    metric: str            # top1_accuracy | top1_agreement | sqnr_db
    reference: float | None
    value: float
    delta: float | None
    top1_agreement: float | None
    sqnr_db: float
    cosine: float
    max_abs: float

    def accuracy_json(self) -> dict:
        return {"metric": self.metric, "reference": _finite(self.reference),
                "value": _finite(self.value), "delta": _finite(self.delta)}

    def to_json(self) -> dict:
        return {k: _finite(v) if isinstance(v, float) else v for k, v in asdict(self).items()}


def _finite(value):
    if value is None or not np.isfinite(value):
        return None
    return round(float(value), 6)


def compare(reference: list[np.ndarray], candidate: list[np.ndarray],
            labels: np.ndarray | None = None) -> Validation:
    """Metrics on the first output; SQNR and cosine over all outputs together."""
    ref0, cand0 = reference[0], candidate[0]
    ref_all = np.concatenate([r.ravel() for r in reference])
    cand_all = np.concatenate([c.ravel() for c in candidate])
    sqnr = sqnr_db(ref_all, cand_all)
    cosine = cosine_similarity(ref_all, cand_all)
    max_abs = float(np.max(np.abs(ref_all.astype(np.float64) - cand_all)))
    agreement = top1_agreement(ref0, cand0) if is_classifier(ref0) else None
    if agreement is not None and labels is not None:
        ref_acc = float(np.mean(ref0.argmax(1) == labels))
        acc = float(np.mean(cand0.argmax(1) == labels))
        metric, ref_value, value, delta = "top1_accuracy", ref_acc, acc, acc - ref_acc
    elif agreement is not None:
        metric, ref_value, value, delta = "top1_agreement", 1.0, agreement, agreement - 1.0
    else:
        metric, ref_value, value, delta = "sqnr_db", None, sqnr, None
    return Validation(len(ref0), metric, ref_value, value, delta, agreement, sqnr, cosine,
                      max_abs)
