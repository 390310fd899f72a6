"""The report's compression section: channels per layer before/after, and the accuracy curve.

Drawn from the manifest's ``compression`` record (or `edgeopt compress --json`'s record):
each pruned layer is a pair of bars (before in grey, after in blue), and distillation's
held-back agreement with the teacher per epoch is a line, the kept epoch marked.
"""

from __future__ import annotations

import html

from edgeopt.report_svg import ACCELERATOR, CPU_GREY, PRIMARY

MAX_LAYERS = 60


def _e(value) -> str:
    return html.escape(str(value))


def channels_chart(layers: list[dict], label_w: int = 200, bar_w: int = 420) -> str:
    """Per layer: the channel count before (grey) and after (blue) pruning."""
    rows = layers[:MAX_LAYERS]
    top = max((r["before"] for r in rows), default=1) or 1
    row_h, parts = 24, []
    for i, r in enumerate(rows):
        y = i * row_h
        before, after = r["before"] / top * bar_w, r["after"] / top * bar_w
        text = f"{r['before']} → {r['after']}" if r["after"] != r["before"] else f"{r['before']}"
        parts += [
            f'<text x="0" y="{y + 15}" font-size="12">{_e(r["layer"])}</text>',
            f'<rect x="{label_w}" y="{y + 3}" width="{before:.1f}" height="16" '
            f'fill="{CPU_GREY}" opacity=".45"><title>{_e(r["layer"])}: {r["before"]} channels '
            "before</title></rect>",
            f'<rect x="{label_w}" y="{y + 6}" width="{max(after, 1):.1f}" height="10" '
            f'fill="{ACCELERATOR}"><title>{_e(r["layer"])}: {r["after"]} channels after'
            "</title></rect>",
            f'<text x="{label_w + before + 6:.1f}" y="{y + 15}" font-size="12">{_e(text)}</text>']
    return (f'<svg role="img" aria-label="channels per layer before and after pruning" '
            f'width="{label_w + bar_w + 110}" height="{len(rows) * row_h + 4}">'
            + "".join(parts) + "</svg>")


def accuracy_curve(history: list[dict], best: int, width: int = 560, height: int = 200) -> str:
    """Held-back top-1 agreement with the teacher per epoch (epoch 0: before training)."""
    points = [(int(h["epoch"]), float(h["agreement"])) for h in history]
    if not points:
        return ""
    left, bottom, right, top = 44, height - 28, width - 12, 10
    last = max(p[0] for p in points) or 1
    low = min(0.9, min(v for _, v in points))
    low = max(0.0, int(low * 10) / 10)

    def xy(epoch: int, value: float) -> tuple[float, float]:
        x = left + epoch / last * (right - left)
        y = bottom - (value - low) / ((1 - low) or 1) * (bottom - top)
        return x, y

    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(e, v) for e, v in points))
    parts = [f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#9aa5b1"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#9aa5b1"/>',
             f'<text x="{left - 6}" y="{top + 4}" font-size="11" text-anchor="end">1.0</text>',
             f'<text x="{left - 6}" y="{bottom}" font-size="11" text-anchor="end">{low:.1f}</text>',
             f'<text x="{(left + right) / 2}" y="{height - 6}" font-size="11" '
             'text-anchor="middle">epoch</text>',
             f'<polyline points="{coords}" fill="none" stroke="{ACCELERATOR}" stroke-width="2"/>']
    for epoch, value in points:
        x, y = xy(epoch, value)
        colour = PRIMARY if epoch == best else ACCELERATOR
        radius = 5 if epoch == best else 3
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius}" fill="{colour}">'
                     f"<title>epoch {epoch}: agreement {value:.3f}"
                     f"{' (kept)' if epoch == best else ''}</title></circle>")
    return (f'<svg role="img" aria-label="held-back agreement with the original per epoch" '
            f'width="{width}" height="{height}">' + "".join(parts) + "</svg>")


def compression_body(record: dict) -> str:
    """The inner HTML of the section (the caller wraps it)."""
    parts = []
    if "macs" in record:
        macs = record["macs"]
        parts.append(f"<p>Structured pruning ({_e(record.get('criterion', ''))} importance) "
                     f"removed channels: MACs {macs['before']:,} → {macs['after']:,} "
                     f"({macs['after'] / macs['before']:.2f}×), parameters "
                     f"{record['parameters']['before']:,} → {record['parameters']['after']:,}."
                     "</p>")
        parts.append("<h3>Channels per layer</h3>" + channels_chart(record.get("layers", [])))
    else:
        parts.append(f"<p>{_e(record['pattern'])} magnitude sparsity: "
                     f"{record['sparsity']:.0%} of the weights of {len(record['density'])} "
                     "layers are zero.</p>")
    distillation = record.get("distillation")
    if distillation:
        labels = "with labels" if distillation["labels"] else "without labels"
        parts.append(f"<h3>Distillation ({_e(labels)}, {distillation['samples']} samples)</h3>"
                     + accuracy_curve(distillation["history"], distillation["best_epoch"])
                     + f'<p class="muted">Kept epoch {distillation["best_epoch"]} of '
                     f'{distillation["epochs_run"]} (lowest held-back loss).</p>')
    return "".join(parts)
