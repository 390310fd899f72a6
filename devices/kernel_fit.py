"""Fit the kernel-level model (kernel_model.py) to measured latencies.

A sample's latency is linear in the kernel values: per graph, the columns are its GEMM
and depthwise kernels' arithmetic at peak (per dtype) and their parameter bytes, the bytes
its low-arithmetic kernels move, its standalone element-wise kernels, and 1 for the
per-inference cost of its dtype; what ops on other units cost (the roofline) is a
constant. The solve is
non-negative least squares on log-like errors (each row divided by sqrt(measured x
estimated), re-estimated a few times: plain relative errors favour estimating too fast),
with two guards against the few rows a profile has:

* tying: the compute efficiencies of a dtype (GEMM and depthwise) are one value, the
  prior's depthwise/GEMM ratio kept (a depthwise value of its own, shared by the dtypes,
  predicted held-out families worse on the Snapdragon rows: BENCHMARKS.md); with fewer
  than ``ROWS_PER_VALUE`` rows per value the element-wise overhead is not fitted either;
  with fewer still, one scale on all the prior's values;
* a small ridge (``RIDGE``, on values scaled to their column) for the values the rows
  barely constrain; a value no row touches keeps the prior's figure;
* a ceiling: no compute efficiency may exceed ``EFFICIENCY_CEILING`` (1.0) of the unit's
  stated peak (at the kernel's array utilization): a unit cannot beat its peak, and rows
  whose arithmetic grows with their parameter bytes (every int8 ImageNet classifier) would
  otherwise fit the arithmetic free and cost a large-arithmetic graph near nothing. The
  ceiling is a lower bound on the multiplier of every block with an efficiency in it (a
  block's values move together, so the highest prior efficiency in it sets the bound).

    >>> values, info = fit_kernel(samples, prior_profile("snapdragon-npu"))  # doctest: +SKIP
    >>> info["values"], info["rows"]                                          # doctest: +SKIP
    (6, 42)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from edgeopt.devices.costing import estimate_assigned, fp16_ops, in_unit_precision
from edgeopt.devices.estimator import resolve_assignment
from edgeopt.devices.fit import Sample
from edgeopt.devices.fitted import FitBasis
from edgeopt.devices.kernel_model import (
    OVERHEAD_TYPES,
    compute_key,
    graph_dtype,
    peak_compute_s,
)
from edgeopt.devices.kernels import group_kernels
from edgeopt.devices.nnls import nnls
from edgeopt.devices.opcost import op_costs
from edgeopt.devices.profile import DeviceProfile

RIDGE = 1e-3
EFFICIENCY_CEILING = 1.0         # share of the unit's stated peak
ROWS_PER_VALUE = 4
REWEIGHTINGS = 4
Key = tuple


@dataclass(frozen=True)
class GraphFeatures:
    """What the kernel fit sees of one sample's graph."""

    unit: str
    dtype: str                       # the graph's (its GEMM kernels')
    terms: dict                      # value key -> its coefficient (s per unit value)
    other_s: float                   # ops on other units, transfers, their invoke costs


def features(sample: Sample, prior: DeviceProfile, unit: str) -> GraphFeatures:
    hw = prior.tables()
    assignment = resolve_assignment(sample.graph, prior, sample.placement, sample.model)
    fp16 = fp16_ops(assignment)
    costs = [in_unit_precision(c, hw.unit(assignment.units[c.index]), c.index in fp16)
             for c in op_costs(sample.graph)]
    kernels = [k for k in group_kernels(sample.graph, costs, assignment.units)
               if k.unit == unit]
    dtype = graph_dtype(kernels)
    terms: dict[Key, float] = {("kinvoke", unit, dtype): 1.0}
    for k in kernels:
        key = compute_key(k)
        if key is not None:
            terms[key] = terms.get(key, 0.0) + peak_compute_s(k, hw.unit(unit))
            terms[("kweight", unit)] = terms.get(("kweight", unit), 0.0) + k.weight_bytes
        else:
            terms[("kmem", unit)] = terms.get(("kmem", unit), 0.0) + k.bytes_moved
        if k.kind in OVERHEAD_TYPES:
            key = ("kovh", unit, k.kind)
            terms[key] = terms.get(key, 0.0) + 1.0
    est = estimate_assigned(sample.graph, prior, assignment)
    other = est.latency_s - sum(r.latency_s for r in est.ops if r.unit == unit)
    other -= hw.unit(unit).invoke_overhead.value
    return GraphFeatures(unit, dtype, terms, max(other, 0.0))


def prior_values(prior: DeviceProfile, unit: str, keys: Sequence[Key]) -> dict[Key, float]:
    """The prior profile's figures for ``keys``: inverse efficiencies of the op kinds that
    start each group, the first memory level's inverse bandwidth, the op overhead and the
    unit's invoke overhead."""
    hw = prior.tables()
    u = hw.unit(unit)
    anchors = {"gemm": "conv", "depthwise": "depthwise"}
    values: dict[Key, float] = {("kmem", unit): 1.0 / hw.memory[u.memory[0]].bandwidth.value,
                                ("kweight", unit): 1.0 / hw.memory[
                                    u.weight_memory or u.memory[-1]].bandwidth.value}
    for key in keys:
        if key[0] == "keff":
            dtype = key[2] if key[2] in u.efficiency else next(iter(u.efficiency))
            values[key] = 1.0 / u.efficiency_for(dtype, anchors[key[3]])
        elif key[0] == "kovh":
            values[key] = u.overhead_for(key[2])
        elif key[0] == "kinvoke":
            values[key] = u.invoke_overhead.value
    return values


def blocks(keys: Sequence[Key], rows: int) -> list[list[Key]]:
    """Groups of values that share one fitted multiplier of their prior (see the module
    doc): the tying, by rows per value."""
    eff = sorted(k for k in keys if k[0] == "keff")
    dtypes = sorted({k[2] for k in eff})
    invoke = [[k] for k in sorted(keys) if k[0] == "kinvoke"]
    memory = [[k] for k in sorted(keys) if k[0] in ("kmem", "kweight")]
    overhead = [[k] for k in sorted(keys) if k[0] == "kovh"]
    # the depthwise efficiency moves with the GEMM one of its dtype (the prior's ratio):
    # held out, a family that alone has most depthwise kernels (the MobileNets) is then
    # costed from every family's rows, not from EfficientNet's alone
    per_dtype = [[k for k in eff if k[2] == d] for d in dtypes]
    medium = [b for b in per_dtype if b] + memory + overhead + invoke
    if rows >= ROWS_PER_VALUE * len(medium):
        return medium
    small = [b for b in per_dtype if b] + memory + invoke
    if rows >= ROWS_PER_VALUE * len(small):
        return small
    return [sorted(keys)]   # one scale on every prior value


def fit_kernel(samples: Sequence[Sample], prior: DeviceProfile) -> tuple[dict[Key, float], dict]:
    """(fitted kernel values, what was fitted: values, rows, values per row)."""
    unit = prior.tables().main_unit
    feats = [features(s, prior, unit) for s in samples]
    measured = np.array([s.measured_s for s in samples])
    weights = np.array([s.weight for s in samples])
    keys = sorted({k for f in feats for k in f.terms})
    start = prior_values(prior, unit, keys)
    groups = blocks(keys, int(round(weights.sum())))
    a = np.array([[sum(f.terms.get(k, 0.0) * start[k] for k in block) for block in groups]
                  for f in feats])
    b = measured - np.array([f.other_s for f in feats])
    u = _solve(a, b, measured, weights, np.array([_lowest_multiplier(block, start)
                                                  for block in groups]))
    # only values some row touches (keys); the estimate takes the prior's for the rest
    values = {k: start[k] for k in keys}
    for block, multiplier in zip(groups, u):
        for key in block:
            values[key] = max(float(multiplier), 1e-6) * start[key]
    info = {"values": len(groups), "rows": int(round(weights.sum())),
            "values_per_row": round(len(groups) / max(weights.sum(), 1.0), 3)}
    return values, info


def _lowest_multiplier(block: Sequence[Key], start: dict[Key, float]) -> float:
    """The least multiplier of ``block``'s prior values that keeps each efficiency in it
    at or below the ceiling (a keff value is 1/efficiency; 0 for a block without one)."""
    return max((1.0 / (EFFICIENCY_CEILING * start[k]) for k in block if k[0] == "keff"),
               default=0.0)


def _solve(a: np.ndarray, b: np.ndarray, measured: np.ndarray, weights: np.ndarray,
           lower: np.ndarray) -> np.ndarray:
    """Multipliers of ``a``'s columns for ``b``, each at least ``lower``, on log-like
    errors (the bounded problem is non-negative least squares on the excess over
    ``lower``; the ridge still pulls each multiplier towards 0)."""
    column = np.where(a.max(0) > 0, a.max(0), 1.0)
    scaled = a / column
    low = lower * column
    ridge = math.sqrt(RIDGE) * np.eye(a.shape[1])
    denominator = measured.copy()
    u = low.copy()
    for _ in range(REWEIGHTINGS + 1):
        w = np.sqrt(weights) / denominator
        excess = nnls(np.vstack([scaled * w[:, None], ridge]),
                      np.concatenate([(b - scaled @ low) * w, -ridge @ low]))
        u = low + excess
        estimate = np.maximum(scaled @ u + (measured - b), 1e-12)
        denominator = np.sqrt(measured * estimate)
    return u / column


def free_value_count(values: dict[Key, float], rows: int) -> int:
    """How many values a kernel fit of ``rows`` rows had free (`blocks`)."""
    return len(blocks(sorted(values), rows))


def with_kernel_fit(prior: DeviceProfile, values: dict[Key, float]) -> DeviceProfile:
    """``prior`` costed by the kernel model at ``values`` (a provisional basis, for the
    cross validation; `edgeopt devices fit` writes the real one)."""
    basis = FitBasis("kernel", 0, (), (), 0, math.nan, 0.0, 0.0, values=values,
                     source="kernel fit in progress")
    return replace(prior, fit=basis)
