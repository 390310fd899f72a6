"""Fit a profile's efficiency factors, overheads and bandwidths to measured latencies.

The data is a list of `Sample`: a model graph and its measured latency. Micro-benchmarks
on this host, whole models, or phone measurements from the benchmark harness all become
samples the same way.

    >>> samples = [Sample("conv 56x56", graph, 0.00123), ...]             # doctest: +SKIP
    >>> result = fit_profile(samples, load_profile("host-cpu"))          # doctest: +SKIP
    >>> result.rms_error, result.apply(profile)                          # doctest: +SKIP

Each op's time is ``max(c x, m) + (1 - overlap) min(c x, m) + o[kind]`` with
``m = sum(bytes_l y_l)``: ``c`` its compute time at full peak, ``x`` the inverse efficiency
of its (unit, dtype, kind), ``y_l`` the inverse bandwidth of memory level ``l``. Knowing
which ops are compute-bound, the model is linear in ``x``,
``y``, the overheads ``o`` and the invoke overheads; the fit alternates a non-negative
least-squares solve on relative errors (with a weak pull towards the profile's prior values,
so what the data does not constrain keeps its prior) and re-classifying the ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from edgeopt.devices.assignment import UnitAssignment
from edgeopt.devices.costing import estimate_assigned
from edgeopt.devices.estimator import resolve_assignment
from edgeopt.devices.fitted import apply_values as apply_hardware_values
from edgeopt.devices.nnls import nnls
from edgeopt.devices.profile import DeviceProfile
from edgeopt.devices.result import Estimate, OpEstimate
from edgeopt.errors import DeviceError
from edgeopt.graph import Graph

# ("eff", unit, dtype, kind) | ("ovh", unit, kind) | ("invoke", unit) | ("bw", level)
# | ("sync", link)
Key = tuple
# Typical magnitudes of each kind of value, for priors of zero: 1/efficiency, s, s, s/byte, s.
SCALE_FLOOR = {"eff": 1.0, "ovh": 1e-6, "invoke": 1e-6, "bw": 1e-11, "sync": 1e-6}


@dataclass(frozen=True)
class Sample:
    """One measured model: latency in seconds; placement/model as `estimate` takes them;
    ``weight`` counts the sample that many times in the fit."""

    label: str
    graph: Graph
    measured_s: float
    placement: Any = None
    model: Any = None
    weight: float = 1.0


@dataclass(frozen=True)
class FitConfig:
    """What to fit: ``units`` None = every unit the samples use; ``kinds`` None = all."""

    units: tuple[str, ...] | None = None
    kinds: tuple[str, ...] | None = None
    fit_overhead: bool = True
    fit_invoke: bool = True
    fit_bandwidth: bool = True
    fit_sync: bool = True
    prior_weight: float = 0.02
    iterations: int = 12
    max_efficiency: float = 4.0


@dataclass(frozen=True)
class FitResult:
    values: dict[Key, float]
    errors: dict[str, float]          # sample label -> estimate / measured - 1
    prior_errors: dict[str, float] = field(default_factory=dict)

    @property
    def rms_error(self) -> float:
        return _rms(self.errors)

    def apply(self, profile: DeviceProfile, source: str = "fitted") -> DeviceProfile:
        """``profile`` with the fitted figures."""
        return apply_values(profile, self.values, source)

    def to_json(self) -> dict:
        return {"rms_error": round(self.rms_error, 4),
                "prior_rms_error": round(_rms(self.prior_errors), 4),
                "samples": len(self.errors),
                "errors": {k: round(float(v), 4) for k, v in self.errors.items()},
                "prior_errors": {k: round(float(v), 4) for k, v in self.prior_errors.items()},
                "values": {"/".join(k): float(v) for k, v in self.values.items()}}


def _rms(errors: dict[str, float]) -> float:
    values = list(errors.values())
    return math.sqrt(sum(e * e for e in values) / len(values)) if values else 0.0


def fit_profile(samples: list[Sample], profile: DeviceProfile,
                config: FitConfig = FitConfig()) -> FitResult:
    """Fit ``profile`` to ``samples`` (see the module doc)."""
    if not samples:
        raise DeviceError("no measurements to fit the device profile to")
    assignments = [resolve_assignment(s.graph, profile, s.placement, s.model) for s in samples]
    prior = _estimates(samples, assignments, profile)
    keys = _free_keys(prior, config)
    values: dict[Key, float] = {}
    current = profile
    scale = np.array([max(_current(profile, k), SCALE_FLOOR[k[0]]) for k in keys])
    for _ in range(config.iterations):
        values = _solve(samples, _estimates(samples, assignments, current), current, keys,
                        scale, config)
        current = apply_values(profile, values, "fit in progress")
    final = _estimates(samples, assignments, current)
    return FitResult(values, _errors(samples, final), _errors(samples, prior))


def _estimates(samples, assignments: list[UnitAssignment], profile) -> list[Estimate]:
    return [estimate_assigned(s.graph, profile, a) for s, a in zip(samples, assignments)]


def _errors(samples: list[Sample], estimates: list[Estimate]) -> dict[str, float]:
    return {s.label: e.latency_s / s.measured_s - 1 for s, e in zip(samples, estimates)}


def _free_keys(estimates: list[Estimate], config: FitConfig) -> list[Key]:
    rows = [r for e in estimates for r in e.ops
            if (config.units is None or r.unit in config.units)
            and (config.kinds is None or r.kind in config.kinds)]
    keys: set[Key] = {("eff", r.unit, r.dtype, r.kind) for r in rows}
    if config.fit_overhead:
        keys |= {("ovh", r.unit, r.kind) for r in rows}
    if config.fit_invoke:
        keys |= {("invoke", r.unit) for r in rows}
    if config.fit_bandwidth:
        keys |= {("bw", level) for r in rows for level, n in r.memory_bytes if n}
    if config.fit_sync:
        keys |= {("sync", t.link) for e in estimates for t in e.transfers
                 if t.tensor < 0 and t.link}
    return sorted(keys)


def _current(profile: DeviceProfile, key: Key) -> float:
    """The profile's present value of ``key`` (inverse efficiency, s, s/byte)."""
    hw = profile.hardware
    if key[0] == "bw":
        return 1.0 / hw.memory[key[1]].bandwidth.value
    if key[0] == "sync":
        return hw.links[key[1]].latency.value
    unit = hw.unit(key[1])
    if key[0] == "eff":
        return 1.0 / unit.efficiency_for(key[2], key[3])
    if key[0] == "ovh":
        return unit.overhead_for(key[2])
    return unit.invoke_overhead.value


def _row(estimate: Estimate, profile: DeviceProfile, index: dict[Key, int]
         ) -> tuple[np.ndarray, float]:
    """Coefficients of the free values and the constant part of one sample's latency."""
    coefficients = np.zeros(len(index))
    constant = estimate.invoke_s
    for t in estimate.transfers:
        if t.tensor < 0 and ("sync", t.link) in index:
            coefficients[index[("sync", t.link)]] += 1.0
        else:
            constant += t.latency_s
    for unit in {r.unit for r in estimate.ops} | {profile.hardware.cpu_unit().name}:
        if ("invoke", unit) in index:
            constant -= profile.hardware.unit(unit).invoke_overhead.value
            coefficients[index[("invoke", unit)]] += 1.0
    for r in estimate.ops:
        constant += _op_terms(r, profile, index, coefficients)
    return coefficients, constant


def _op_terms(r: OpEstimate, profile: DeviceProfile, index: dict[Key, int],
              coefficients: np.ndarray) -> float:
    """Add one op's coefficients; return its constant part."""
    eff_key = ("eff", r.unit, r.dtype, r.kind)
    constant = r.stream_s
    hidden = profile.hardware.unit(r.unit).overlap_share
    compute_bound = r.compute_s >= r.memory_s
    compute_weight = 1.0 if compute_bound else 1.0 - hidden
    memory_weight = 1.0 - hidden if compute_bound else 1.0
    if eff_key in index:
        coefficients[index[eff_key]] += compute_weight * r.compute_s / _current(profile, eff_key)
    else:
        constant += compute_weight * r.compute_s
    for level, n in r.memory_bytes:
        if ("bw", level) in index:
            coefficients[index[("bw", level)]] += memory_weight * n
        else:
            constant += memory_weight * n / profile.hardware.memory[level].bandwidth.value
    if ("ovh", r.unit, r.kind) in index:
        coefficients[index[("ovh", r.unit, r.kind)]] += 1.0
    else:
        constant += r.overhead_s
    return constant


def _solve(samples, estimates, profile, keys, scale: np.ndarray, config: FitConfig
           ) -> dict[Key, float]:
    """One NNLS solve in units of the prior values (``scale``), pulled towards them."""
    index = {k: i for i, k in enumerate(keys)}
    rows, targets = [], []
    for sample, est in zip(samples, estimates):
        coefficients, constant = _row(est, profile, index)
        weight = math.sqrt(sample.weight)
        rows.append(weight * coefficients * scale / sample.measured_s)
        targets.append(weight * (sample.measured_s - constant) / sample.measured_s)
    weight = math.sqrt(config.prior_weight)
    a = np.vstack([np.array(rows), weight * np.eye(len(keys))])
    b = np.concatenate([np.array(targets), weight * np.ones(len(keys))])
    solution = nnls(a, b) * scale
    return {k: float(_bounded(k, v, config)) for k, v in zip(keys, solution)}


def _bounded(key: Key, value: float, config: FitConfig) -> float:
    if key[0] == "eff":
        return max(value, 1.0 / config.max_efficiency)
    if key[0] == "bw":
        return max(value, 1e-13)  # at most 10 TB/s
    return value


def apply_values(profile: DeviceProfile, values: dict[Key, float], source: str
                 ) -> DeviceProfile:
    """``profile`` with fitted values (see `Key`) in place of its figures."""
    return replace(profile, hardware=apply_hardware_values(profile.tables(), values, source))
