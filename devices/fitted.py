"""A profile's fit to published measurements: the values, their basis and the interval.

`edgeopt devices fit` appends a ``[fit]`` table to a profile; the figures above it stay
the prior (what the profile claimed before any data), and the loader lays the fitted
values over them:

    [fit]
    basis = "fitted: 41 rows, CV median error 14%"
    method = "opclass"          # "scale": every time figure times `scale`; "scaled-opclass":
                                # the scale, then op-class values fitted around it
    scale = 1.0
    rows = 41
    families = ["densenet", "inception", "mobilenet"]
    devices = ["Google Pixel 3"]
    cv_rows = 41
    cv_median_abs_error = 0.14
    cv_log_residual_p10 = -0.21          # log(measured / estimated), held-out families
    cv_log_residual_p90 = 0.18
    [fit.values]
    "eff/xnnpack/float32/conv" = 0.43    # share of peak
    "ovh/xnnpack/conv" = 2.1e-06         # s per op
    "invoke/xnnpack" = 5e-05             # s per inference
    "bw/dram" = 2.0e10                   # bytes/s
    "sync/npu_dram" = 1e-05              # s per partition switch

With ``method = "kernel"`` the values are the kernel-level model's (kernel_model.py):
``"keff/npu/int8/gemm"`` (share of peak), ``"kmem/npu"`` and ``"kweight/npu"`` (bytes/s),
``"kovh/npu/elementwise"``
and ``"kinvoke/npu/int8"`` (s); the estimator costs the fitted unit's kernels with them.

A profile without the table is a prior: `basis_text` says "prior: unvalidated".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from edgeopt.devices.figures import Figure
from edgeopt.devices.hardware import ComputeUnit, Hardware
from edgeopt.errors import DeviceError

PRIOR_BASIS = "prior: unvalidated"
# "affine": every time figure times `scale`, and the main unit's invoke overhead fitted:
# latency = a + b x prior estimate, two numbers (corpus_fit.py)
# "kernel": the kernel-level model of kernel_model.py, fitted by kernel_fit.py
FIT_METHODS = ("opclass", "scale", "scaled-opclass", "affine", "kernel")
# "prior": checked against the rows, and no fit predicted held-out rows better
METHODS = (*FIT_METHODS, "prior")
# ("eff", unit, dtype, kind) | ("ovh", unit, kind) | ("invoke", unit) | ("bw", level)
# | ("sync", link); values in the fit's own units: 1/efficiency, s, s, s/byte, s.
Key = tuple


@dataclass(frozen=True)
class FitBasis:
    """What a profile's figures were fitted to and how well they predict held-out rows."""

    method: str
    rows: int
    families: tuple[str, ...]
    devices: tuple[str, ...]
    cv_rows: int
    cv_median_abs_error: float
    cv_log_residual_p10: float
    cv_log_residual_p90: float
    scale: float = 1.0
    values: Mapping[Key, float] = field(default_factory=dict)
    source: str = ""

    @property
    def basis(self) -> str:
        if self.method == "prior":
            return (f"validated: {self.rows} rows, median error {self.cv_median_abs_error:.0%} "
                    "(prior figures; no fit did better on held-out families)")
        return f"fitted: {self.rows} rows, CV median error {self.cv_median_abs_error:.0%}"

    def interval(self, latency: float) -> tuple[float, float]:
        """The p10-p90 range of ``latency``: the split-conformal bounds of the held-out
        residuals (intervals.py says what they promise)."""
        return (latency * math.exp(self.cv_log_residual_p10),
                latency * math.exp(self.cv_log_residual_p90))

    def to_toml(self) -> dict[str, Any]:
        return {"basis": self.basis, "method": self.method, "scale": _round(self.scale),
                "rows": self.rows, "families": list(self.families),
                "devices": list(self.devices), "cv_rows": self.cv_rows,
                "cv_median_abs_error": _round(self.cv_median_abs_error),
                "cv_log_residual_p10": _round(self.cv_log_residual_p10),
                "cv_log_residual_p90": _round(self.cv_log_residual_p90),
                "source": self.source,
                "values": {"/".join(k): _round(_shown(k, v)) for k, v in
                           sorted(self.values.items())}}


def _round(value: float) -> float:
    return float(f"{value:.6g}")


INVERTED = ("eff", "bw", "keff", "kmem", "kweight")   # stored as their inverses in the fit


def _shown(key: Key, value: float) -> float:
    """A fit value as the profile writes it: efficiency and bandwidth, not their inverses."""
    return 1.0 / value if key[0] in INVERTED else value


def _internal(key: Key, value: float) -> float:
    return 1.0 / value if key[0] in INVERTED else value


_KEY_PARTS = {"eff": 4, "ovh": 3, "invoke": 2, "bw": 2, "sync": 2,
              "keff": 4, "kmem": 2, "kweight": 2, "kovh": 3, "kinvoke": 3}
TIMES = ("ovh", "invoke", "sync", "kovh", "kinvoke")   # may fit to zero


def parse_fit(path: object, raw: Mapping[str, Any]) -> FitBasis | None:
    """The ``[fit]`` table of a profile (None when absent); DeviceError names a bad field."""
    table = raw.get("fit")
    if table is None:
        return None
    try:
        return _parse(table)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise DeviceError(f"device profile {path}: table 'fit' is not valid ({exc}); "
                          "write it again with `edgeopt devices fit`") from None


def _parse(table: Mapping[str, Any]) -> FitBasis:
    if table["method"] not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}")
    values: dict[Key, float] = {}
    for text, value in dict(table.get("values", {})).items():
        key = tuple(text.split("/"))
        # a time (overhead, invoke, sync) may fit to zero; an efficiency or bandwidth may not
        floor_ok = float(value) >= 0 if key[0] in TIMES else float(value) > 0
        if _KEY_PARTS.get(key[0]) != len(key) or not floor_ok:
            raise ValueError(f"bad value {text!r} = {value!r}")
        values[key] = _internal(key, float(value))
    return FitBasis(table["method"], int(table["rows"]), tuple(table["families"]),
                    tuple(table["devices"]), int(table["cv_rows"]),
                    float(table["cv_median_abs_error"]), float(table["cv_log_residual_p10"]),
                    float(table["cv_log_residual_p90"]), float(table.get("scale", 1.0)),
                    values, str(table.get("source", "")))


def basis_text(fit: FitBasis | None) -> str:
    """What an estimate from this profile rests on (DESIGN.md's ``basis``)."""
    return fit.basis if fit is not None else PRIOR_BASIS


def apply_fit(hw: Hardware, fit: FitBasis) -> Hardware:
    """``hw`` with the fitted values laid over its prior figures: every time figure times
    the scale first, then the fitted values (absolute, not scaled again)."""
    source = fit.source or fit.basis
    return apply_values(scale_times(hw, fit.scale, source), fit.values, source)


def apply_values(hw: Hardware, values: Mapping[Key, float], source: str) -> Hardware:
    """``hw`` with fitted values (see `Key`) in place of its figures."""
    units = dict(hw.units)
    for name in {k[1] for k in values if k[0] in ("eff", "ovh", "invoke")}:
        units[name] = _apply_unit(units[name], values, source)
    memory, links = dict(hw.memory), dict(hw.links)
    for key, value in values.items():
        if key[0] == "bw":
            memory[key[1]] = replace(memory[key[1]], bandwidth=Figure(1.0 / value, source))
        elif key[0] == "sync":
            links[key[1]] = replace(links[key[1]], latency=Figure(value, source))
    return replace(hw, units=units, memory=memory, links=links)


def _apply_unit(unit: ComputeUnit, values: Mapping[Key, float], source: str) -> ComputeUnit:
    efficiency = {d: dict(t) for d, t in unit.efficiency.items()}
    overhead = dict(unit.overhead)
    invoke = unit.invoke_overhead
    for key, value in values.items():
        if key[0] not in ("eff", "ovh", "invoke") or key[1] != unit.name:
            continue
        if key[0] == "eff":
            efficiency.setdefault(key[2], {})[key[3]] = Figure(1.0 / value, source)
        elif key[0] == "ovh":
            overhead[key[2]] = Figure(value, source)
        else:
            invoke = Figure(value, source)
    return replace(unit, efficiency=efficiency, overhead=overhead, invoke_overhead=invoke)


def scale_times(hw: Hardware, scale: float, source: str) -> Hardware:
    """``hw`` with every time figure times ``scale``: rates divided, times multiplied, so
    every latency the estimator computes (a sum of maxima of such terms) scales exactly."""
    if scale == 1.0:
        return hw

    def slower(figure: Figure) -> Figure:
        return Figure(figure.value / scale, source)

    def longer(figure: Figure) -> Figure:
        return Figure(figure.value * scale, source)

    units = {name: replace(
        u, efficiency={d: {k: slower(f) for k, f in t.items()} for d, t in u.efficiency.items()},
        overhead={k: longer(f) for k, f in u.overhead.items()},
        invoke_overhead=longer(u.invoke_overhead)) for name, u in hw.units.items()}
    memory = {name: replace(m, bandwidth=slower(m.bandwidth)) for name, m in hw.memory.items()}
    links = {name: replace(link, bandwidth=slower(link.bandwidth), latency=longer(link.latency))
             for name, link in hw.links.items()}
    return replace(hw, units=units, memory=memory, links=links)
