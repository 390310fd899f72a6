"""Find the bad layer: float and quantized activations compared layer by layer.

For every layer with weights the report gives the SQNR and cosine between its output
in the float model and in the quantized model (both read from the real runtime), and
for the `isolate_layers` worst of them the output SQNR of a model in which that layer
alone is quantized: its own effect, free of what the layers before it did. Entries are
ranked worst first. `render_layer_chart` draws the ranking as an inline SVG fragment.
"""

from __future__ import annotations

import html

import numpy as np

from edgeopt.calibration.backend import QuantFormat
from edgeopt.calibration.plan import QuantPlan
from edgeopt.calibration.selection import output_sqnr
from edgeopt.calibration.weights import weight_sqnr_db

REPORT_SAMPLES = 16


class Agreement:
    """Running SQNR and cosine between two streams of one tensor."""

    def __init__(self):
        self.signal = self.noise = self.dot = self.norm_a = self.norm_b = 0.0

    def update(self, ref: np.ndarray, cand: np.ndarray) -> None:
        a, b = ref.astype(np.float64).ravel(), cand.astype(np.float64).ravel()
        self.signal += float(a @ a)
        self.noise += float((a - b) @ (a - b))
        self.dot += float(a @ b)
        self.norm_a, self.norm_b = self.norm_a + float(a @ a), self.norm_b + float(b @ b)

    @property
    def sqnr_db(self) -> float | None:
        if self.noise == 0:
            return None if self.signal == 0 else float("inf")
        return 10 * np.log10(max(self.signal, 1e-30) / self.noise)

    @property
    def cosine(self) -> float | None:
        denominator = np.sqrt(self.norm_a * self.norm_b)
        return None if denominator == 0 else self.dot / denominator


def compare_activations(fmt: QuantFormat, model: bytes, data: dict, tensors: list[str]) -> dict:
    """Agreement per tensor between the float model and `model`, streamed."""
    agreements = {name: Agreement() for name in tensors}
    float_stream = fmt.capture().stream(data, set(tensors))
    quant_stream = fmt.capture_quantized(model).stream(data, set(tensors))
    for ref, cand in zip(float_stream, quant_stream):
        for name in tensors:
            if name in ref and name in cand:
                agreements[name].update(ref[name], cand[name])
        del ref, cand  # else both stay alive while the next batches are read
    return agreements


def isolated_effect(fmt: QuantFormat, plan: QuantPlan, layer, data: dict,
                    reference) -> float | None:
    """Output SQNR of the model with only `layer` quantized (None if it cannot be built)."""
    tensors = (layer.input, layer.output, fmt.report_tensor(layer))
    ranges = {t: plan.activation_ranges[t] for t in tensors if t in plan.activation_ranges}
    try:
        model = fmt.write(plan.only(layer.name, ranges))
        return output_sqnr(reference, fmt.run(model, data))
    except Exception:  # noqa: BLE001 - a layer that cannot stand alone gets no figure
        return None


def _entry(session, plan: QuantPlan, layer, agreement: Agreement) -> dict:
    layer_plan = plan.layers.get(layer.name)
    weight = session.fmt.graph.weights[layer.weight]
    quant = layer_plan.weight if layer_plan else None
    rng = plan.activation_ranges.get(session.fmt.report_tensor(layer))
    return {"layer": layer.name, "op": layer.op, "kind": str(layer.kind),
            "precision": str(layer_plan.precision) if layer_plan else "float",
            "weight_method": layer_plan.weight_method if layer_plan else None,
            "weight_sqnr_db": _finite(weight_sqnr_db(weight, quant)) if quant else None,
            "output_range": list(rng) if rng else None,
            "sqnr_db": _finite(agreement.sqnr_db), "cosine": _finite(agreement.cosine),
            "alone_output_sqnr_db": None}


def _finite(value):
    if value is None or not np.isfinite(value):
        return None
    return round(float(value), 4)


def layer_report(session, plan: QuantPlan, model: bytes, check: dict) -> list[dict]:
    fmt, config = session.fmt, session.config
    data = {k: v[:REPORT_SAMPLES] for k, v in check.items()}
    layers = list(fmt.graph.layers)
    tensors = [fmt.report_tensor(la) for la in layers]
    agreements = compare_activations(fmt, model, data, tensors)
    entries = [_entry(session, plan, la, agreements[t]) for la, t in zip(layers, tensors)]
    worst = sorted(range(len(entries)), key=lambda i: _key(entries[i]["sqnr_db"]))
    reference = fmt.run(fmt.float_model, data)
    for i in worst[:config.isolate_layers]:
        if entries[i]["precision"] != "float":
            entries[i]["alone_output_sqnr_db"] = _finite(
                isolated_effect(fmt, plan, layers[i], data, reference))
    entries.sort(key=lambda e: (_key(e["alone_output_sqnr_db"]), _key(e["sqnr_db"])))
    for rank, entry in enumerate(entries, 1):
        entry["rank"] = rank
    return entries


def _key(value) -> float:
    return float("inf") if value is None else value


def render_layer_chart(report: list[dict], top: int = 20, width: int = 640) -> str:
    """An HTML fragment: the `top` worst layers as horizontal SQNR bars (inline SVG)."""
    rows = report[:top]
    if not rows:
        return "<figure class='layer-chart'><figcaption>No layer report.</figcaption></figure>"
    bar_h, label_w, chart_w = 18, 260, width - 300
    values = [r["alone_output_sqnr_db"] if r["alone_output_sqnr_db"] is not None
              else r["sqnr_db"] for r in rows]
    span = max([v for v in values if v is not None] + [1.0])
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' "
             f"height='{bar_h * len(rows) + 24}' role='img' aria-label='layer SQNR'>"]
    for i, (row, value) in enumerate(zip(rows, values)):
        parts.append(_bar(i, row, value, span, bar_h, label_w, chart_w))
    parts.append("</svg>")
    caption = ("Worst layers first. Bar: output SQNR (dB) with only that layer quantized, "
               "or, grey when not measured alone, the layer's own activation "
               "SQNR. Red: below 20 dB.")
    return (f"<figure class='layer-chart'>{''.join(parts)}<figcaption>{caption}"
            "</figcaption></figure>")


def _bar(i: int, row: dict, value, span: float, bar_h: int, label_w: int,
         chart_w: int) -> str:
    y = i * bar_h + 4
    name = row["layer"] if len(row["layer"]) <= 40 else "…" + row["layer"][-39:]
    length = 0 if value is None else max(value, 0) / span * chart_w
    alone = row["alone_output_sqnr_db"] is not None
    color = "#c0392b" if value is not None and value < 20 else ("#2e86c1" if alone else "#999")
    text = "n/a" if value is None else f"{value:.1f} dB"
    return (f"<text x='{label_w - 6}' y='{y + 13}' font-size='11' text-anchor='end'>"
            f"{html.escape(name)} ({html.escape(row['precision'])})</text>"
            f"<rect x='{label_w}' y='{y}' width='{length:.1f}' height='{bar_h - 4}' "
            f"fill='{color}'><title>{html.escape(row['layer'])}</title></rect>"
            f"<text x='{label_w + length + 4:.1f}' y='{y + 13}' font-size='11'>{text}</text>")
