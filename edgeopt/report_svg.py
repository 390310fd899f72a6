"""Inline SVG charts for report.html: bars, the op-placement strip, the device comparison.

Plain SVG text (no script, no fonts or images to fetch), so the page renders the same from
a file, an artifact store or an email attachment.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

CPU_GREY = "#9aa5b1"
PARTITION_COLOURS = ("#2f7d5b", "#2b6cb0", "#8e44ad", "#c0392b", "#b7950b", "#16a085")
UNIT_COLOURS = {"cpu": CPU_GREY, "transfers": "#e0a030", "invoke": "#c7ccd3"}
ACCELERATOR = "#2b6cb0"
PRIMARY = "#18324a"


def _e(value) -> str:
    return html.escape(str(value))


def unit_colour(unit: str) -> str:
    return UNIT_COLOURS.get(unit, ACCELERATOR)


def partition_colour(k: int | None) -> str:
    return CPU_GREY if k is None else PARTITION_COLOURS[k % len(PARTITION_COLOURS)]


@dataclass(frozen=True)
class Bar:
    label: str
    value: float | None
    colour: str = ACCELERATOR
    text: str = ""  # the figure written after the bar
    bold: bool = False


def bar_chart(bars: list[Bar], label: str, label_w: int = 230, bar_w: int = 420) -> str:
    """Horizontal bars on one scale; a missing value shows its text instead of a bar."""
    row_h = 22
    top = max((b.value for b in bars if b.value), default=0) or 1
    parts = []
    for i, b in enumerate(bars):
        y = i * row_h
        weight = ' font-weight="600"' if b.bold else ""
        parts.append(f'<text x="0" y="{y + 15}" font-size="12"{weight}>{_e(b.label)}</text>')
        length = 0.0 if b.value is None else max(b.value / top * bar_w, 1.0)
        if b.value is not None:
            parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{length:.1f}" height="16" '
                         f'fill="{b.colour}"><title>{_e(b.label)}: {_e(b.text)}</title></rect>')
        parts.append(f'<text x="{label_w + length + 6:.1f}" y="{y + 15}" font-size="12">'
                     f'{_e(b.text)}</text>')
    return (f'<svg role="img" aria-label="{_e(label)}" width="{label_w + bar_w + 140}" '
            f'height="{len(bars) * row_h + 4}">' + "".join(parts) + "</svg>")


def stacked_bar(parts: list[tuple[str, float, str]], label: str, width: int = 760) -> str:
    """One bar split into its parts (name, value in ms, colour), and an HTML legend."""
    total = sum(v for _, v, _ in parts) or 1.0
    x, rects, legend = 0.0, [], []
    for name, value, colour in parts:
        w = value / total * width
        share = f"{name}: {value:.3g} ms ({value / total:.0%})"
        rects.append(f'<rect x="{x:.1f}" y="0" width="{max(w, 0.5):.1f}" height="18" '
                     f'fill="{colour}"><title>{_e(share)}</title></rect>')
        legend.append(f'<span><i class="swatch" style="background:{colour}"></i>'
                      f"{_e(share)}</span>")
        x += w
    return (f'<svg role="img" aria-label="{_e(label)}" width="{width}" height="18">'
            + "".join(rects) + f'</svg><div class="legend">{"".join(legend)}</div>')


def placement_strip(ops: list[dict], partition_of: dict[int, int], label: str) -> str:
    """Every op in graph order as a box named by its op, coloured by the partition that
    runs it (grey: the CPU); a tooltip gives the unit and, for a fallback, the reason."""
    labelled = len(ops) <= 160
    box_w, box_h, gap = (84, 24, 4) if labelled else (12, 12, 2)
    per_row = max(1, 1040 // (box_w + gap))
    parts = []
    for n, op in enumerate(ops):
        x, y = (n % per_row) * (box_w + gap), (n // per_row) * (box_h + gap)
        k = partition_of.get(op["index"])
        where = f"partition {k + 1}" if k is not None else "CPU"
        tip = f"#{op['index']} {op['op']} on {op['unit']} ({where})"
        if op.get("reason"):
            tip += f": {op['reason']}"
        parts.append(f'<g><title>{_e(tip)}</title><rect x="{x}" y="{y}" width="{box_w}" '
                     f'height="{box_h}" rx="3" fill="{partition_colour(k)}"/>')
        if labelled:
            name = op["op"] if len(op["op"]) <= 12 else op["op"][:11] + "…"
            parts.append(f'<text x="{x + 5}" y="{y + 16}" font-size="10" fill="#fff">'
                         f'{_e(name)}</text>')
        parts.append("</g>")
    rows = (len(ops) + per_row - 1) // per_row
    return (f'<svg role="img" aria-label="{_e(label)}" width="{per_row * (box_w + gap)}" '
            f'height="{max(rows, 1) * (box_h + gap)}">' + "".join(parts) + "</svg>")


def comparison_chart(rows: list[dict]) -> str:
    """Latency, energy and the share of ops on the delegate, one row per device, three
    panels on their own scales; the device the artifact was built for in dark blue."""
    label_w, panel_w, row_h, head = 150, 210, 22, 22
    panels = (("latency (ms)", "latency_ms", "{:.3g}"), ("energy (mJ)", "energy_mj", "{:.3g}"),
              ("ops on the delegate", "delegated_share", "{:.0%}"))
    parts = []
    for p, (title, key, fmt) in enumerate(panels):
        x0 = label_w + p * (panel_w + 20)
        parts.append(f'<text x="{x0}" y="14" font-size="12" font-weight="600">{title}</text>')
        top = max((r[key] for r in rows if r[key] is not None), default=0) or 1
        if key == "delegated_share":
            top = 1.0
        for i, r in enumerate(rows):
            y = head + i * row_h
            if r[key] is None:
                parts.append(f'<text x="{x0}" y="{y + 15}" font-size="12">—</text>')
                continue
            w = max(r[key] / top * (panel_w - 60), 1.0)
            colour = PRIMARY if r["primary"] else ACCELERATOR
            parts.append(f'<rect x="{x0}" y="{y + 3}" width="{w:.1f}" height="16" '
                         f'fill="{colour}"/><text x="{x0 + w + 5:.1f}" y="{y + 15}" '
                         f'font-size="12">{fmt.format(r[key])}</text>')
    for i, r in enumerate(rows):
        weight = ' font-weight="600"' if r["primary"] else ""
        name = r["device"] + (" (built for)" if r["primary"] else "")
        tip = f'<title>{_e(r["note"])}</title>' if r.get("note") else ""
        parts.append(f'<text x="0" y="{head + i * row_h + 15}" font-size="12"{weight}>'
                     f'{tip}{_e(name)}</text>')
    width = label_w + len(panels) * (panel_w + 20)
    return (f'<svg role="img" aria-label="device comparison" width="{width}" '
            f'height="{head + len(rows) * row_h + 4}">' + "".join(parts) + "</svg>")
