"""`auto` at the model level: candidate range sets scored by the real runtime.

Per tensor, `auto` keeps the estimator with the least measured quantization error on
that tensor's histogram, except for tensors whose clipping the output feels directly
(model inputs and outputs, softmax inputs): those keep their min-max range. Every set
is then cut to the saturation bounds of the tensors' readers (`saturation`).
A tensor's own error is not the model's, so the per-tensor set competes with each
estimator applied to every tensor: each candidate model is written, run by the real
runtime on check samples, and the one with the best output SQNR is kept.
"""

from __future__ import annotations

import numpy as np

from edgeopt.calibration.backend import QuantFormat
from edgeopt.calibration.estimators import ESTIMATORS, RangeChoice
from edgeopt.calibration.graphspec import CalibGraph
from edgeopt.calibration.plan import QuantPlan
from edgeopt.calibration.runtime_errors import RuntimeRejected
from edgeopt.calibration.saturation import clamp, max_padding_ranges, saturation_bounds
from edgeopt.validate import sqnr_db

PROTECTED_OPS = {"SOFTMAX", "ARG_MAX", "Softmax", "LogSoftmax", "ArgMax"}


def protected_tensors(graph: CalibGraph) -> set[str]:
    protected = set(graph.inputs) | set(graph.outputs)
    for op in graph.ops:
        if op.op in PROTECTED_OPS:
            protected |= set(op.inputs)
    return protected


def candidate_ranges(choices: dict[str, RangeChoice], graph: CalibGraph,
                     method: str) -> dict[str, dict[str, tuple[float, float]]]:
    """Range sets to compare (one for a fixed method, per-tensor + uniform ones for auto),
    each cut to the saturation bounds of the tensors' readers."""
    bounds = saturation_bounds(graph)
    return {label: max_padding_ranges(graph, {name: clamp(rng, bounds.get(name))
                                              for name, rng in ranges.items()})
            for label, ranges in _raw_sets(choices, graph, method).items()}


def _raw_sets(choices: dict[str, RangeChoice], graph: CalibGraph, method: str) -> dict:
    if method != "auto":
        return {method: {name: (c.lo, c.hi) for name, c in choices.items()}}
    protected = protected_tensors(graph)
    per_tensor = {name: (c.candidates.get("minmax", (c.lo, c.hi)) if name in protected
                         else (c.lo, c.hi)) for name, c in choices.items()}
    sets = {"auto": per_tensor}
    for estimator in ESTIMATORS:
        sets[estimator] = {name: c.candidates.get(estimator, (c.lo, c.hi))
                           for name, c in choices.items()}
    return sets


def output_sqnr(reference: list[np.ndarray], outputs: list[np.ndarray]) -> float:
    ref = np.concatenate([r.ravel() for r in reference])
    out = np.concatenate([o.ravel() for o in outputs])
    return float(sqnr_db(ref, out))


def select_ranges(fmt: QuantFormat, plan: QuantPlan, sets: dict, check: dict[str, np.ndarray],
                  reference: list[np.ndarray],
                  score_single: bool = False) -> tuple[str, dict, dict[str, float]]:
    """(label, ranges, scores): the candidate set with the best output SQNR (a single set
    is only scored when asked)."""
    if len(sets) == 1 and not score_single:
        label, ranges = next(iter(sets.items()))
        return label, ranges, {}
    scores = {}
    for label, ranges in sets.items():
        try:
            model = fmt.write(plan.with_ranges(ranges))
            scores[label] = output_sqnr(reference, fmt.run(model, check))
        except RuntimeRejected:
            scores[label] = float("-inf")
    best = max(scores, key=lambda k: (scores[k], k == "auto"))
    return best, sets[best], scores
