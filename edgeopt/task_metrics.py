"""Task metrics against the float model: CTC decoding, detections and their F1.

    >>> ctc_greedy(np.eye(4)[[0, 2, 2, 0, 3]][None], blank=0)
    [(2, 3)]
    >>> detection_f1(ref_boxes, ref_scores, cand_boxes, cand_scores)      # doctest: +SKIP
    {'f1': 0.93, 'float_detections': 41, 'artifact_detections': 39, 'matched': 37, ...}
"""

from __future__ import annotations

import numpy as np

MATCH_IOU = 0.5   # a float and an artifact detection are the same object at IoU >= 0.5
NMS_IOU = 0.45    # the usual YOLO/SSD suppression threshold
MAX_CANDIDATES = 1000  # boxes kept per sample before NMS, highest scores first


# --- sequences ---------------------------------------------------------------------------

def ctc_greedy(steps: np.ndarray, blank: int = 0) -> list[tuple[int, ...]]:
    """Greedy CTC decode of [N, T, C] scores: argmax per step, repeats collapsed, blank
    dropped; one tuple of symbol indices per sample."""
    best = steps.argmax(-1)
    decoded = []
    for row in best:
        keep = np.ones(len(row), bool)
        keep[1:] = row[1:] != row[:-1]
        decoded.append(tuple(int(s) for s in row[keep] if s != blank))
    return decoded


def step_agreement(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Share of steps (every sample, every step, blanks included) with the same argmax."""
    return float(np.mean(reference.argmax(-1) == candidate.argmax(-1)))


def string_match(reference: np.ndarray, candidate: np.ndarray, blank: int = 0) -> float:
    """Share of samples whose greedy CTC strings are identical."""
    pairs = zip(ctc_greedy(reference, blank), ctc_greedy(candidate, blank))
    return float(np.mean([a == b for a, b in pairs]))


# --- detections --------------------------------------------------------------------------

def to_xyxy(boxes: np.ndarray, box_format: str) -> np.ndarray:
    """[A, 4] boxes in `box_format` as [x1, y1, x2, y2]."""
    b = boxes.astype(np.float64)
    if box_format == "cxcywh":
        return np.stack([b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2,
                         b[:, 0] + b[:, 2] / 2, b[:, 1] + b[:, 3] / 2], 1)
    if box_format == "xywh":
        return np.stack([b[:, 0], b[:, 1], b[:, 0] + b[:, 2], b[:, 1] + b[:, 3]], 1)
    if box_format == "yxyx":
        return b[:, [1, 0, 3, 2]]
    return b


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of `a` [n, 4] with every box of `b` [m, 4] (xyxy)."""
    lo = np.maximum(a[:, None, :2], b[None, :, :2])
    hi = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=2)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def detect(boxes: np.ndarray, scores: np.ndarray, threshold: float,
           box_format: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One sample's detections: boxes [A, 4], scores [A, K] (or [A]) -> (xyxy, score, class)
    after the score threshold and per-class NMS."""
    if scores.ndim == 1:
        scores = scores[:, None]
    best, cls = scores.max(1), scores.argmax(1)
    keep = np.flatnonzero(best >= threshold)
    keep = keep[np.argsort(-best[keep], kind="stable")][:MAX_CANDIDATES]
    xyxy, best, cls = to_xyxy(boxes[keep], box_format), best[keep], cls[keep]
    chosen = _nms(xyxy, cls)
    return xyxy[chosen], best[chosen], cls[chosen]


def _nms(xyxy: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """Indices kept by greedy per-class suppression (input sorted by score)."""
    if not len(xyxy):
        return np.zeros(0, int)
    overlap = iou_matrix(xyxy, xyxy)
    same = cls[:, None] == cls[None, :]
    alive = np.ones(len(xyxy), bool)
    kept = []
    for i in range(len(xyxy)):
        if alive[i]:
            kept.append(i)
            alive &= ~((overlap[i] > NMS_IOU) & same[i])
    return np.array(kept, int)


def _matches(ref, cand) -> int:
    """Greedy one-to-one matches, artifact detections by score: same class, IoU >= 0.5."""
    (rb, _, rc), (cb, _, cc) = ref, cand
    if not len(rb) or not len(cb):
        return 0
    overlap = iou_matrix(cb, rb)
    free = np.ones(len(rb), bool)
    matched = 0
    for i in range(len(cb)):
        ok = free & (rc == cc[i]) & (overlap[i] >= MATCH_IOU)
        if ok.any():
            free[int(np.argmax(np.where(ok, overlap[i], -1)))] = False
            matched += 1
    return matched


def detection_f1(ref_boxes: list[np.ndarray], ref_scores: list[np.ndarray],
                 cand_boxes: list[np.ndarray], cand_scores: list[np.ndarray],
                 threshold: float, box_format: str) -> dict:
    """F1 of the artifact's detections against the float model's, over all samples (None
    when neither model detects anything above the threshold)."""
    n_ref = n_cand = matched = 0
    for rb, rs, cb, cs in zip(ref_boxes, ref_scores, cand_boxes, cand_scores):
        ref = detect(rb, rs, threshold, box_format)
        cand = detect(cb, cs, threshold, box_format)
        n_ref, n_cand = n_ref + len(ref[0]), n_cand + len(cand[0])
        matched += _matches(ref, cand)
    total = n_ref + n_cand
    return {"f1": 2 * matched / total if total else None, "float_detections": n_ref,
            "artifact_detections": n_cand, "matched": matched,
            "match_iou": MATCH_IOU, "nms_iou": NMS_IOU}
