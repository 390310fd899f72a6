"""A sweep's results: the Pareto front per device, the pick, the table and the HTML page.

The front is taken on the two figures the chart shows: the candidate's quality (its
accuracy, or its agreement or SQNR with the float model when the data has no labels) and
its latency. The latency is the measured one (`--bench host`, `--adb SERIAL`: the median
of the steady runs) when every candidate of the device was measured, else the estimate's
central value for all of them (its interval and basis are printed beside it): one front
never mixes measured and estimated figures; `front_bases` says which each front uses. A
point is on the front when no other point of the device is at least as good on both and
better on one (the smaller file wins a tie). The pick for a device is the fastest front
point whose quality is within `tolerance` of the best quality on that front. .tflite and
.onnx artifacts of a device compete on one front (both are estimated and benched).

    >>> fronts = pareto_fronts(points)                                  # doctest: +SKIP
    >>> best = pick(fronts["pixel-npu"], tolerance=None)                # doctest: +SKIP
"""

from __future__ import annotations

from collections import defaultdict

from edgeopt.devices.render import latency_text
from edgeopt.report_svg import ACCELERATOR, CPU_GREY, PRIMARY
from edgeopt.report_validation import esc

LOWER_IS_BETTER = ("relative_error",)
DEFAULT_TOLERANCE = {"db": 1.0, "share": 0.01}  # SQNR-type metrics in dB, shares in points


def device_of(point: dict) -> str:
    return point["config"]["device"]


def _quality(point: dict) -> float:
    """Quality with higher better, whatever the metric."""
    f = point["figures"]
    return -f["quality"] if f["metric"] in LOWER_IS_BETTER else f["quality"]


def comparable(point: dict) -> bool:
    f = point.get("figures") or {}
    return point["status"] == "ok" and f.get("quality") is not None and \
        f.get("latency_ms") is not None


MEASURED, ESTIMATE = "measured", "estimate"
AXIS = {MEASURED: "measured", ESTIMATE: "estimated"}


def measured_ms(point: dict) -> float | None:
    return (point.get("measured") or {}).get("latency_ms")


def latency_of(point: dict, basis: str = ESTIMATE) -> float:
    return measured_ms(point) if basis == MEASURED else point["figures"]["latency_ms"]


def _dominates(a: dict, b: dict, basis: str) -> bool:
    qa, qb = _quality(a), _quality(b)
    la, lb = latency_of(a, basis), latency_of(b, basis)
    if qa < qb or la > lb:
        return False
    return qa > qb or la < lb or a["figures"]["size_bytes"] < b["figures"]["size_bytes"]


def basis_of(points: list[dict]) -> str:
    """Measured when every point was measured; else the estimate for all."""
    return MEASURED if points and all(measured_ms(p) is not None for p in points) \
        else ESTIMATE


def front_of(points: list[dict], basis: str | None = None) -> list[dict]:
    """The points no other point dominates, fastest first."""
    basis = basis or basis_of(points)
    front = [p for p in points
             if not any(_dominates(q, p, basis) for q in points if q is not p)]
    return sorted(front, key=lambda p: (latency_of(p, basis), p["label"]))


def _groups(points: list[dict]) -> dict[str, list[dict]]:
    """Front name -> its points (a device whose points use several metrics: one per metric)."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for p in points:
        if comparable(p):
            groups[(device_of(p), p["figures"]["metric"])].append(p)
    devices = [d for d, _ in groups]
    return {(d if devices.count(d) == 1 else f"{d} ({m})"): group
            for (d, m), group in sorted(groups.items())}


def pareto_fronts(points: list[dict]) -> dict[str, list[dict]]:
    """Device -> its front."""
    return {name: front_of(group) for name, group in _groups(points).items()}


def front_bases(points: list[dict]) -> dict[str, str]:
    """Device -> the latency its front compares: 'measured' or 'estimate'."""
    return {name: basis_of(group) for name, group in _groups(points).items()}


def default_tolerance(metric: str) -> float:
    return DEFAULT_TOLERANCE["db" if metric.endswith("sqnr_db") else "share"]


def pick(front: list[dict], tolerance: float | None = None) -> dict | None:
    """The fastest front point within `tolerance` of the front's best quality."""
    if not front:
        return None
    metric = front[0]["figures"]["metric"]
    allowed = default_tolerance(metric) if tolerance is None else tolerance
    best = max(_quality(p) for p in front)
    return next(p for p in front if _quality(p) >= best - allowed - 1e-12)


# --- text ---------------------------------------------------------------------------------

def quality_text(f: dict) -> str:
    value, metric = f["quality"], f["metric"]
    if value is None:
        return "—"
    if metric.endswith("sqnr_db"):
        return f"{value:.1f} dB ({metric})"
    return f"{value:.4f} ({metric})"


def outputs_text(f: dict) -> str:
    return ", ".join(f"{o['name']} {o['sqnr_db']:.1f} dB" for o in f["outputs"]
                     if o.get("sqnr_db") is not None) or "—"


def latency_cell(f: dict) -> str:
    if f.get("latency_ms") is None:
        return f"— ({f.get('basis') or 'no estimate'})"
    return latency_text(f["latency_ms"], f.get("interval_ms"), f.get("basis") or "estimate")


def measured_cell(point: dict) -> str:
    """`0.21 ms (median of 50; min-p90 0.19-0.25 ms; host)`, a bench error, or —."""
    benches = point.get("bench") or {}
    m = point.get("measured")
    if m is None:
        errors = [f"{t}: {b['error']}" for t, b in benches.items() if b.get("error")]
        return f"not measured ({errors[0]})" if errors else "—"
    digits = 3
    spread = m.get("spread_ms")
    around = f"; min-p90 {spread[0]:.{digits}g}-{spread[1]:.{digits}g} ms" if spread else ""
    return (f"{m['latency_ms']:.{digits}g} ms ({m['statistic']} of {m['runs']}{around}; "
            f"{m['target']})")


def size_text(n: int | None) -> str:
    return "—" if n is None else f"{n / 1024:.1f} KiB" if n < 1024 ** 2 else \
        f"{n / 1024 ** 2:.2f} MiB"


def row(point: dict, marks: str = "") -> dict:
    """One table row, every figure as text."""
    f = point.get("figures")
    if point["status"] != "ok" or f is None:
        return {"mark": marks, "candidate": point["label"], "quality": "failed",
                "outputs": "", "latency": point.get("error") or "", "measured": "",
                "size": "", "energy": "", "delegated": ""}
    share = f.get("delegated_share")
    return {"mark": marks, "candidate": point["label"], "quality": quality_text(f),
            "outputs": outputs_text(f), "latency": latency_cell(f),
            "measured": measured_cell(point),
            "size": size_text(f.get("size_bytes")),
            "energy": "—" if f.get("energy_mj") is None else f"{f['energy_mj']:.3g} mJ",
            "delegated": "—" if share is None else f"{share:.0%}"}


COLUMNS = (("mark", ""), ("candidate", "candidate"), ("quality", "quality"),
           ("outputs", "SQNR per output"), ("latency", "latency (estimate)"),
           ("measured", "latency (measured)"),
           ("size", "size"), ("energy", "energy"), ("delegated", "on delegate"))


def marks(point: dict, fronts: dict, best: dict) -> str:
    on_front = any(point is p for front in fronts.values() for p in front)
    chosen = any(point is p for p in best.values() if p is not None)
    return ("*" if on_front else "") + ("best" if chosen else "")


def table(points: list[dict], fronts: dict, best: dict) -> str:
    """The terminal table: one line per candidate, `*` on a front, `best` the pick."""
    rows = [row(p, marks(p, fronts, best)) for p in points]
    widths = {k: max([len(title), *(len(r[k]) for r in rows)]) for k, title in COLUMNS}
    lines = ["  ".join(title.ljust(widths[k]) for k, title in COLUMNS).rstrip()]
    lines += ["  ".join(r[k].ljust(widths[k]) for k, _ in COLUMNS).rstrip() for r in rows]
    return "\n".join(lines)


# --- HTML ---------------------------------------------------------------------------------

_CSS = ("body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d232b;background:#f5f6f8}"
        "header{background:#18324a;color:#fff;padding:18px 28px}header h1{margin:0;"
        "font-size:20px}main{padding:20px 28px}section{background:#fff;border:1px solid "
        "#dde1e6;border-radius:8px;padding:14px 18px;margin:0 0 16px;overflow-x:auto}"
        "h2{font-size:16px;margin:0 0 10px}table{border-collapse:collapse;width:100%}"
        "td,th{border-bottom:1px solid #eceef1;padding:4px 8px;text-align:left;"
        "vertical-align:top;font-size:13px}th{color:#5b6672}.bad{color:#b42318}")


def _scale(values: list[float], low_px: float, high_px: float):
    lo, hi = min(values), max(values)
    span = (hi - lo) or abs(hi) or 1.0
    lo, hi = lo - 0.08 * span, hi + 0.08 * span
    return lambda v: low_px + (v - lo) / (hi - lo) * (high_px - low_px)


def _ticks(points: list[dict], x, y, axis_y: float, axis_x: float, basis: str) -> list[str]:
    """The smallest and largest value on each axis, written where they fall."""
    latencies = [latency_of(p, basis) for p in points]
    qualities = [_quality(p) for p in points]
    parts = [f'<text x="{x(v):.1f}" y="{axis_y + 14:.1f}" font-size="10" '
             f'text-anchor="middle">{v:.3g}</text>' for v in {min(latencies), max(latencies)}]
    parts += [f'<text x="{axis_x - 4:.1f}" y="{y(v) + 3:.1f}" font-size="10" '
              f'text-anchor="end">{abs(v):.4g}</text>' for v in {min(qualities), max(qualities)}]
    return parts


def front_chart(points: list[dict], front: list[dict], chosen: dict | None, title: str,
                basis: str = ESTIMATE) -> str:
    """Quality against latency: every point numbered, the front joined and labelled."""
    w, h, left, bottom = 720, 380, 64, 40
    x = _scale([latency_of(p, basis) for p in points], left, w - 20)
    y = _scale([_quality(p) for p in points], h - bottom, 16)
    on_front = {id(p) for p in front}
    line = " ".join(f"{x(latency_of(p, basis)):.1f},{y(_quality(p)):.1f}" for p in front)
    parts = [f'<polyline points="{line}" fill="none" stroke="{ACCELERATOR}" '
             'stroke-width="1.5"/>']
    for n, p in enumerate(points, 1):
        px, py = x(latency_of(p, basis)), y(_quality(p))
        colour = PRIMARY if p is chosen else ACCELERATOR if id(p) in on_front else CPU_GREY
        text = f"{n} {p['label']}" if id(p) in on_front else str(n)
        cells = row(p)
        latency = cells["measured" if basis == MEASURED else "latency"]
        parts.append(f'<g><title>{esc(p["label"])}: {esc(cells["quality"])}, '
                     f'{esc(latency)}</title><circle cx="{px:.1f}" cy="{py:.1f}" '
                     f'r="5" fill="{colour}"/><text x="{px + 7:.1f}" y="{py - 6:.1f}" '
                     f'font-size="11">{esc(text)}</text></g>')
    parts += _ticks(points, x, y, h - bottom, left, basis)
    metric = points[0]["figures"]["metric"]
    sign = " (lower is better, drawn upside down)" if metric in LOWER_IS_BETTER else ""
    parts.append(f'<text x="{left}" y="{h - 8}" font-size="12">{AXIS[basis]} latency (ms) →'
                 f'</text><text x="4" y="12" font-size="12">↑ {esc(metric)}{sign}</text>'
                 f'<line x1="{left}" y1="{h - bottom}" x2="{w - 10}" y2="{h - bottom}" '
                 f'stroke="#999"/><line x1="{left}" y1="10" x2="{left}" y2="{h - bottom}" '
                 'stroke="#999"/>')
    return (f'<svg role="img" aria-label="{esc(title)}" width="{w}" height="{h}">'
            + "".join(parts) + "</svg>")


def _html_table(points: list[dict], fronts: dict, best: dict) -> str:
    head = "".join(f"<th>{esc(title)}</th>" for _, title in COLUMNS)
    body = ""
    for n, p in enumerate(points, 1):
        r = row(p, marks(p, fronts, best))
        cls = ' class="bad"' if p["status"] != "ok" else ""
        body += f"<tr{cls}><td>{n} {esc(r['mark'])}</td>" + "".join(
            f"<td>{esc(r[k])}</td>" for k, _ in COLUMNS[1:]) + "</tr>"
    return f"<table><tr>{head}</tr>{body}</table>"


def render_page(title: str, points: list[dict], fronts: dict, best: dict,
                bases: dict[str, str] | None = None) -> str:
    """The self-contained sweep page (inline CSS and SVG, no script, nothing fetched)."""
    sections = []
    for name, front in fronts.items():
        device = [p for p in points if comparable(p) and
                  (name == device_of(p) or name.startswith(device_of(p) + " ("))
                  and p["figures"]["metric"] == front[0]["figures"]["metric"]]
        chosen = best.get(name)
        basis = (bases or {}).get(name, ESTIMATE)
        pick_line = f"<p>picked: <b>{esc(chosen['label'])}</b></p>" if chosen else ""
        pick_line += f"<p>the front compares the {AXIS[basis]} latency</p>"
        sections.append(f'<section id="front-{esc(name)}"><h2>{esc(name)}: Pareto front</h2>'
                        f"{pick_line}{front_chart(device, front, chosen, name, basis)}"
                        f"{_html_table(device, fronts, best)}</section>")
    sections.append(f'<section id="all"><h2>All candidates ({len(points)})</h2>'
                    f"{_html_table(points, fronts, best)}</section>")
    return ("<!doctype html><html lang=en><head><meta charset=utf-8>"
            f"<title>{esc(title)}</title><style>{_CSS}</style></head><body><header><h1>"
            f"{esc(title)}</h1></header><main>{''.join(sections)}</main></body></html>\n")
