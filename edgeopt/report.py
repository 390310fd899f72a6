"""`report.html`: one self-contained page (inline CSS and SVG, no network) per bundle."""

from __future__ import annotations

import html

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d232b;
background:#f5f6f8}
header{background:#18324a;color:#fff;padding:18px 28px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;opacity:.8}main{padding:20px 28px;max-width:1100px}
section{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:14px 18px;
margin:0 0 16px}h2{font-size:16px;margin:0 0 10px}
.cards{display:flex;flex-wrap:wrap;gap:12px}.card{flex:1 1 180px;border:1px solid #dde1e6;
border-radius:6px;padding:10px 12px}.card b{display:block;font-size:20px}
.card span{color:#5b6672;font-size:12px;text-transform:uppercase;letter-spacing:.04em}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #eceef1;
padding:5px 8px;text-align:left;vertical-align:top}th{color:#5b6672;font-weight:600}
.warn{background:#fff4e0;border-color:#f0c36d}.muted{color:#5b6672}
code{background:#eef1f4;padding:1px 4px;border-radius:3px}
.ops{display:flex;flex-wrap:wrap;gap:2px;margin:8px 0}.op{width:12px;height:12px;
border-radius:2px;display:inline-block}
"""


def _e(value) -> str:
    return html.escape(str(value))


def _num(value, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _metric(metric: str, value) -> str:
    """Top-1 figures as percentages, SQNR in dB."""
    if value is None:
        return "—"
    return f"{value:.1f} dB" if metric == "sqnr_db" else f"{100 * value:.2f}%"


def _delta(metric: str, value) -> str:
    if value is None:
        return "—"
    return f"{value:+.1f} dB" if metric == "sqnr_db" else f"{100 * value:+.2f} points"


def _size(n: int | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _table(rows: list[tuple]) -> str:
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{body}</table>"


def _card(label: str, value: str, detail: str = "") -> str:
    return f'<div class="card"><span>{_e(label)}</span><b>{value}</b>{_e(detail)}</div>'


def _size_chart(before: int, after: int) -> str:
    """Two horizontal bars, source vs artifact, as inline SVG."""
    width = 520
    scale = width / max(before, after, 1)
    bars = []
    for i, (label, value, colour) in enumerate((("source", before, "#8da4bb"),
                                                 ("artifact", after, "#2f7d5b"))):
        y = 8 + i * 30
        bars.append(f'<text x="0" y="{y + 15}" font-size="12">{label}</text>'
                    f'<rect x="70" y="{y}" width="{max(value * scale, 1):.1f}" height="20" '
                    f'fill="{colour}"/><text x="{75 + value * scale:.1f}" y="{y + 15}" '
                    f'font-size="12">{_e(_size(value))}</text>')
    return (f'<svg role="img" aria-label="model size" width="{width + 160}" height="70">'
            + "".join(bars) + "</svg>")


def _summary(m: dict) -> str:
    acc = m["accuracy"]
    sizes = m["sizes"]
    base_name, base = "float .tflite", sizes.get("float_tflite_bytes")
    if not base:
        base_name, base = "source", sizes["source_bytes"]
    ratio = sizes["artifact_bytes"] / base if base else None
    cards = [
        _card("device", _e(m["device"]["name"]), m["device"]["description"]),
        _card("artifact", _e(_size(sizes["artifact_bytes"])),
              f"{ratio:.2f}× the {base_name}" if ratio else ""),
        _card(acc["metric"].replace("_", " "), _e(_metric(acc["metric"], acc["value"])),
              f"float {_metric(acc['metric'], acc['reference'])}, "
              f"delta {_delta(acc['metric'], acc['delta'])}"),
        _card("scheme", _e(m["recipe"]["scheme"]), m["recipe"]["method"]),
    ]
    return f'<section><h2>Summary</h2><div class="cards">{"".join(cards)}</div>' \
           f'{_size_chart(sizes["source_bytes"], sizes["artifact_bytes"])}</section>'


def _notes(m: dict) -> str:
    notes = m.get("notes") or []
    if not notes:
        return ""
    items = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return f'<section class="warn"><h2>Read this</h2><ul>{items}</ul></section>'


def _io_rows(tensors: list[dict]) -> list[tuple]:
    rows = []
    for t in tensors:
        q = t["quantization"]
        quant = "float" if q is None else f"scale {q['scale']:.6g}, zero point {q['zero_point']}"
        rows.append((f"<code>{_e(t['name'])}</code>", _e(t["shape"]), _e(t["dtype"]), _e(quant)))
    return rows


def _validation(m: dict) -> str:
    v = m["validation"]
    rows = [("samples", v["samples"]), ("runtime", _e(v["runtime"])),
            ("top-1 agreement with float", _num(v["top1_agreement"])),
            ("output SQNR (dB)", _num(v["sqnr_db"])), ("cosine", _num(v["cosine"], 6)),
            ("max abs error", _num(v["max_abs"]))]
    return f"<section><h2>Validation</h2>{_table(rows)}</section>"


def _conversion(m: dict) -> str:
    c = m["conversion"]
    parity = c.get("parity")
    rows = [("converter", _e(c["converter"]))]
    if parity:
        rows += [("parity samples", parity["samples"]), ("max abs", _num(parity["max_abs"])),
                 ("cosine", _num(parity["cosine"], 8))]
    else:
        rows.append(("parity", _e(c.get("note", "not applicable"))))
    return f"<section><h2>Conversion</h2>{_table(rows)}</section>"


_PARTITION_COLOURS = ("#2f7d5b", "#2b6cb0", "#8e44ad", "#c0392b", "#b7950b", "#16a085")


def _placement(m: dict, detail: dict | None) -> str:
    """Which op runs where, partitions coloured, CPU fallbacks with their reasons."""
    if detail is None:
        note = _e(m.get("placement_note", ""))
        return f'<section><h2>Op placement</h2><p class="muted">{note}</p></section>'
    partition_of = {i: k for k, ops in enumerate(detail["partitions"]) for i in ops}
    cells = []
    for op in detail["ops"]:
        k = partition_of.get(op["index"])
        colour = "#9aa5b1" if k is None else _PARTITION_COLOURS[k % len(_PARTITION_COLOURS)]
        title = _e(f"#{op['index']} {op['op']} on {op['unit']}" +
                   (f": {op['reason']}" if op["reason"] else ""))
        cells.append(f'<span class="op" title="{title}" style="background:{colour}"></span>')
    rows = [(op["index"], _e(op["op"]), _e(op["unit"]), _e(op["reason"] or ""),
             _e(op["rewrite"] or "")) for op in detail["ops"] if op["unit"] == "cpu"]
    fallbacks = (_table([("#", "op", "unit", "why it falls back", "what would fix it"), *rows])
                 if rows else "<p>Every op runs on the accelerator.</p>")
    delegated = sum(op["unit"] != "cpu" for op in detail["ops"])
    crossings = detail.get("crossings") or []
    moved = sum(c["bytes"] for c in crossings if c.get("kind") == "internal")
    return (f'<section><h2>Op placement</h2><p>{delegated} of {len(detail["ops"])} ops on '
            f'{_e(detail["delegate"])} in {len(detail["partitions"])} partition(s); '
            f'{_e(_size(moved))} cross between CPU and accelerator inside the graph. '
            'Each square is an op in graph order, coloured by partition; grey runs on the '
            f'CPU.</p><div class="ops">{"".join(cells)}</div>{fallbacks}</section>')


def _breakdown(ops: list[dict]) -> list[tuple[str, float]]:
    """Milliseconds per (op kind, unit), largest first."""
    totals: dict[str, float] = {}
    for op in ops:
        key = f"{op.get('kind') or op['op']} on {op['unit']}"
        totals[key] = totals.get(key, 0.0) + op["latency_ms"]
    return sorted(totals.items(), key=lambda kv: -kv[1])


def _bar_chart(rows: list[tuple[str, float]], unit: str, label: str) -> str:
    width, height = 420, 22
    top = max((v for _, v in rows), default=0) or 1
    bars = []
    for i, (name, value) in enumerate(rows):
        y = i * height
        bars.append(f'<text x="0" y="{y + 15}" font-size="12">{_e(name)}</text>'
                    f'<rect x="230" y="{y + 3}" width="{max(value / top * width, 1):.1f}" '
                    f'height="16" fill="#2b6cb0"/><text x="{236 + value / top * width:.1f}" '
                    f'y="{y + 15}" font-size="12">{value:.3g} {unit}</text>')
    return (f'<svg role="img" aria-label="{_e(label)}" width="{width + 330}" '
            f'height="{len(rows) * height + 4}">' + "".join(bars) + "</svg>")


def _layers(m: dict, chart: str | None) -> str:
    """Find the bad layer: the calibration core's ranked per-layer error (its own SVG)."""
    if not chart:
        return ""
    return ("<section><h2>Quantization error by layer</h2><p>Layers ranked by how far their "
            "quantized activations depart from the float model's (SQNR, lower is worse), and "
            "the output SQNR with each worst layer quantized alone; "
            "<code>manifest.json</code> holds the numbers.</p>" + chart + "</section>")


def _estimate(m: dict, detail: dict | None) -> str:
    if detail is None:
        note = _e(m.get("estimate_note", ""))
        return f'<section><h2>Latency and energy estimate</h2><p class="muted">{note}</p></section>'
    parts = detail.get("breakdown_ms", {})
    rows = _breakdown(detail["ops"])[:12]
    extra = [("transfers between units", parts.get("transfers", 0.0)),
             ("invoke overhead", parts.get("invoke", 0.0))]
    rows += [(k, v) for k, v in extra if v]
    params = ""
    if detail.get("on_chip_param_bytes") is not None:
        params = (f"<p>Parameters: {_e(_size(detail['on_chip_param_bytes']))} cached on chip, "
                  f"{_e(_size(detail['off_chip_param_bytes']))} streamed per inference.</p>")
    return (f"<section><h2>Latency and energy estimate</h2><p><b>{detail['latency_ms']:.3g} ms"
            f"</b> and <b>{detail['energy_mj']:.3g} mJ</b> per inference on "
            f"{_e(detail['device'])}, from the device profile's published figures and fitted "
            f"efficiencies (an estimate, not a measurement: `edgeopt bench` measures).</p>"
            f"{params}<h3>Latency by op kind and unit</h3>"
            f"{_bar_chart(rows, 'ms', 'latency breakdown')}</section>")


def _data(m: dict) -> str:
    d = m["data"]
    rows = [(k.replace("_", " "), _e("; ".join(v) if isinstance(v, list) else v))
            for k, v in d.items()]
    return f"<section><h2>Data</h2>{_table(rows)}</section>"


def render_report(manifest: dict, details: dict | None = None) -> str:
    """The HTML page for one bundle, from its manifest and the stages' detailed records."""
    m, details = manifest, details or {}
    io = ("<section><h2>Inputs and outputs</h2><h3>inputs</h3>" + _table(_io_rows(m["inputs"]))
          + "<h3>outputs</h3>" + _table(_io_rows(m["outputs"])) + "</section>")
    tools = _table([(f"<code>{_e(k)}</code>", _e(v)) for k, v in m["toolchain"].items()])
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>edgeopt report: {_e(m['model']['file'])}</title><style>{_CSS}</style></head>"
        f"<body><header><h1>{_e(m['model']['file'])} for {_e(m['device']['name'])}</h1>"
        f"<p>built {_e(m['created'])} by edgeopt {_e(m['toolchain'].get('edgeopt', ''))}</p>"
        f"</header><main>{_notes(m)}{_summary(m)}{_validation(m)}{_conversion(m)}{io}"
        f"{_layers(m, details.get('layer_chart'))}"
        f"{_placement(m, details.get('placement'))}{_estimate(m, details.get('estimate'))}"
        f"{_data(m)}<section><h2>Toolchain</h2>{tools}</section>"
        "</main></body></html>\n"
    )
