"""Plain-text views of estimates for the terminal: one device in detail, or all side by side."""

from __future__ import annotations

from collections.abc import Sequence

from edgeopt.devices.result import Estimate


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_estimate(est: Estimate, top: int = 0, notes: Sequence[str] = ()) -> str:
    """Total, placement, per-op breakdown (the ``top`` slowest, or all), transfers, notes."""
    placement = est.placement
    lines = [f"{est.device}: {_latency(est)}, {_energy(est)} per inference "
             f"({est.precision})",
             _basis_line(est),
             f"placement: {placement['delegated_ops']} op(s) on {_main_units(est)}, "
             f"{placement['cpu_ops']} on the CPU, {len(placement['partitions'])} partition(s)",
             "time: " + ", ".join(f"{u} {ms:.3f} ms" for u, ms in est.unit_ms().items())
             + f", transfers {sum(t.latency_s for t in est.transfers) * 1e3:.3f} ms"
             + f", invoke {est.invoke_s * 1e3:.3f} ms", ""]
    ops = sorted(est.ops, key=lambda o: -o.latency_s)[:top] if top else est.ops
    rows = [(o.index, o.op, o.unit, o.kind, o.dtype, f"{o.latency_s * 1e3:.4f}",
             f"{o.energy_j * 1e3:.5f}", o.bound, o.reason) for o in ops]
    lines.append(table(("#", "op", "unit", "kind", "dtype", "ms", "mJ", "bound", "why on CPU"),
                       rows))
    if est.params is not None:
        lines.append("")
        lines.append(f"parameters: {est.params['on_chip_param_bytes']} bytes cached on chip, "
                     f"{est.params['off_chip_param_bytes']} bytes streamed per inference")
    lines += [f"note: {n}" for n in (*notes, *est.notes)]
    return "\n".join(lines)


def significant(value: float, digits: int) -> str:
    """``value`` with ``digits`` significant figures (no exponent for ms-sized values)."""
    return f"{float(f'{value:.{digits}g}'):g}"


def figure_digits(value: float, interval: Sequence[float] | None) -> int:
    """Significant figures a latency earns: the p10-p90 width relative to the value
    decides (a range as wide as the value: 1 figure; a tenth of it: 2; else 3). Without
    an interval (a prior nobody checked) one figure."""
    if not interval or value <= 0:
        return 1
    width = (interval[1] - interval[0]) / value
    return 1 if width >= 1 else 2 if width >= 0.1 else 3


def latency_text(latency_ms: float, interval_ms: Sequence[float] | None, basis: str) -> str:
    """``2.7 ms (p10-p90 1.9-4.1 ms; fitted: ...)`` or ``~3 ms (prior: unvalidated)``:
    never a figure without its basis, printed to the precision its interval allows."""
    digits = figure_digits(latency_ms, interval_ms)
    if not interval_ms:
        return f"~{significant(latency_ms, digits)} ms ({basis})"
    low, high = (significant(t, digits) for t in interval_ms)
    return f"{significant(latency_ms, digits)} ms (p10-p90 {low}-{high} ms; {basis})"


def _latency(est: Estimate) -> str:
    """The latency to the figures its interval allows (``~3 ms`` for a prior)."""
    interval = [t * 1e3 for t in est.interval_s] if est.interval_s else None
    return f"{figure_text(est.latency_ms, interval)} ms"


def _energy(est: Estimate) -> str:
    """The modelled energy: one figure (its stated range is a factor of 4)."""
    return f"~{significant(est.energy_mj, 1)} mJ (modelled)"


def _basis_line(est: Estimate) -> str:
    """The estimate's basis and its p10-p90 range, to the figures the range allows."""
    if est.interval_s is None:
        return f"basis: {est.basis} (no interval: the profile was not fitted to measurements)"
    low, high = (t * 1e3 for t in est.interval_s)
    digits = 2 if high / max(low, 1e-12) > 1.2 else 3
    return (f"basis: {est.basis}; p10-p90 {significant(low, digits)}-"
            f"{significant(high, digits)} ms")


def _main_units(est: Estimate) -> str:
    units = sorted({o.unit for o in est.ops if not o.reason}) or ["-"]
    return "/".join(units)


def render_comparison(results: Sequence[tuple[str, Estimate | None, str]]) -> str:
    """One row per device: latency, energy, placement; or why it cannot run the model."""
    rows = []
    for device, est, error in results:
        if est is None:
            rows.append((device, "-", "-", "-", "-", "-", _short(error)))
            continue
        p = est.placement
        rows.append((device, _latency(est).removesuffix(" ms"),
                     _energy(est).removesuffix(" mJ (modelled)"),
                     f"{p['delegated_ops']}/{p['delegated_ops'] + p['cpu_ops']}",
                     len(p["partitions"]), _short_basis(est), est.precision))
    return table(("device", "ms", "mJ", "delegated", "partitions", "basis",
                  "precision / error"), rows)


def _short_basis(est: Estimate) -> str:
    """"prior" or the CV median error of the fit, for the comparison table."""
    return short_basis(est.basis, est.interval_s)


def short_basis(basis: str, interval: Sequence[float] | None) -> str:
    """``prior, unvalidated`` or ``fit 41 rows, CV ±14%``: a basis for a table cell."""
    if not interval:
        return "prior, unvalidated"
    return basis.replace("fitted: ", "fit ").replace("CV median error ", "CV ±")


def figure_text(value: float, interval: Sequence[float] | None) -> str:
    """A latency to the figures its interval allows, ``~`` before a prior's one figure."""
    return f"{'' if interval else '~'}{significant(value, figure_digits(value, interval))}"


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."
