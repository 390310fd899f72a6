"""The estimate of one model on one device: totals, per-op rows, transfers; JSON and text.

`Estimate.to_json()` is DESIGN.md's ``estimate --json`` object: ``device``, ``latency_ms``,
``energy_mj``, ``placement``, ``ops`` [{``index``, ``op``, ``unit``, ``latency_ms``,
``energy_mj``}] and, for a device with an on-chip parameter cache (the Edge TPU),
``on_chip_param_bytes`` and ``off_chip_param_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edgeopt.devices.fitted import PRIOR_BASIS
from edgeopt.devices.transfers import Transfer

# Energy is modelled, never fitted: no corpus row publishes power for the model it timed.
# The interval is a stated factor, not a measured spread: the per-op figures are 45 nm
# arithmetic energies (Horowitz, ISSCC 2014) applied to newer nodes, the static and idle
# powers are assumed. Coral's published 2 TOPS/W is the one device figure it was checked
# against (BENCHMARKS.md, "Estimates against published on-device latencies").
ENERGY_INTERVAL = (0.5, 2.0)
ENERGY_BASIS = ("modelled, not measured: ops x the profile's energy per op + bytes moved x "
                "energy per byte + static and idle power x the estimated time; interval "
                "x0.5-x2 (assumed, not a measured spread)")


@dataclass(frozen=True)
class OpEstimate:
    index: int
    op: str
    unit: str
    kind: str
    dtype: str
    latency_s: float
    energy_j: float
    bound: str
    reason: str = ""
    compute_s: float = 0.0       # at the fitted efficiency
    memory_s: float = 0.0        # activations and resident parameters
    stream_s: float = 0.0        # parameters streamed over a link
    overhead_s: float = 0.0
    memory_bytes: tuple[tuple[str, float], ...] = ()

    def to_json(self) -> dict[str, Any]:
        record = {"index": self.index, "op": self.op, "unit": self.unit,
                  "latency_ms": _ms(self.latency_s), "energy_mj": _mj(self.energy_j),
                  "kind": self.kind, "dtype": self.dtype, "bound": self.bound}
        if self.reason:
            record["reason"] = self.reason
        return record


@dataclass(frozen=True)
class Estimate:
    """Latency (s) and energy (J) of one inference, and where they go."""

    device: str
    latency_s: float
    energy_j: float
    ops: tuple[OpEstimate, ...]
    transfers: tuple[Transfer, ...]
    invoke_s: float
    idle_energy_j: float
    placement: dict[str, Any]
    precision: str
    profile_file: str = ""
    params: dict[str, int] | None = None
    compiler: dict[str, Any] | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    basis: str = PRIOR_BASIS                        # what the profile's figures rest on
    interval_s: tuple[float, float] | None = None   # p10-p90 from the profile's CV residuals

    @property
    def latency_ms(self) -> float:
        return self.latency_s * 1e3

    @property
    def energy_mj(self) -> float:
        return self.energy_j * 1e3

    def unit_ms(self) -> dict[str, float]:
        """Milliseconds spent in ops, per unit."""
        totals: dict[str, float] = {}
        for op in self.ops:
            totals[op.unit] = totals.get(op.unit, 0.0) + op.latency_s * 1e3
        return {unit: round(ms, 6) for unit, ms in totals.items()}

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "device": self.device, "latency_ms": _ms(self.latency_s),
            "interval_ms": self.interval_ms(), "basis": self.basis,
            "energy_basis": ENERGY_BASIS, "energy_interval_mj": self.energy_interval_mj(),
            "energy_mj": _mj(self.energy_j), "placement": self.placement,
            "ops": [op.to_json() for op in self.ops]}
        if self.params is not None:
            record.update(self.params)
        record.update(
            precision=self.precision,
            breakdown_ms={"ops": self.unit_ms(),
                          "transfers": _ms(sum(t.latency_s for t in self.transfers)),
                          "invoke": _ms(self.invoke_s)},
            transfers=[t.to_json() for t in self.transfers],
            idle_energy_mj=_mj(self.idle_energy_j), compiler=self.compiler,
            profile=self.profile_file, notes=list(self.notes))
        return record

    def energy_interval_mj(self) -> list[float]:
        """The energy's stated range (`ENERGY_INTERVAL`), in mJ."""
        return [_mj(self.energy_j * f) for f in ENERGY_INTERVAL]

    def interval_ms(self) -> list[float] | None:
        return [_ms(t) for t in self.interval_s] if self.interval_s else None

    def manifest_json(self) -> dict[str, Any]:
        """The manifest's ``estimate`` object: each figure with what it rests on."""
        return {"latency_ms": _ms(self.latency_s), "interval_ms": self.interval_ms(),
                "basis": self.basis, "energy_mj": _mj(self.energy_j),
                "energy_interval_mj": self.energy_interval_mj(),
                "energy_basis": ENERGY_BASIS}


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 6)


def _mj(joules: float) -> float:
    return round(joules * 1e3, 9)
