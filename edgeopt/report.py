"""`report.html`: one self-contained page (inline CSS and SVG, no script, no network) per bundle.

Each part of the page is a `<section id=...>` (summary, comparison, compression, validation,
conversion, io, layers, placement, latency, data, toolchain; notes when there are any), so a
reader can link to it and tests can find it.
"""

from __future__ import annotations

from edgeopt import report_svg as svg
from edgeopt.devices.fitted import PRIOR_BASIS
from edgeopt.devices.render import figure_digits, latency_text, significant
from edgeopt.devices.result import ENERGY_BASIS
from edgeopt.report_compression import compression_body
from edgeopt.report_data import data_rows
from edgeopt.report_svg import Bar
from edgeopt.report_validation import esc as _e
from edgeopt.report_validation import num as _num
from edgeopt.report_validation import validation_body

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d232b;
background:#f5f6f8}
header{background:#18324a;color:#fff;padding:18px 28px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;opacity:.8}main{padding:20px 28px;max-width:1100px}
section{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:14px 18px;
margin:0 0 16px}h2{font-size:16px;margin:0 0 10px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:12px}
.card{border:1px solid #dde1e6;border-radius:6px;padding:10px 12px}
.card b{display:block;font-size:20px}
.card span{color:#5b6672;font-size:12px;text-transform:uppercase;letter-spacing:.04em}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #eceef1;
padding:5px 8px;text-align:left;vertical-align:top}th{color:#5b6672;font-weight:600}
.warn{background:#fff4e0;border-color:#f0c36d}.muted{color:#5b6672}
code{background:#eef1f4;padding:1px 4px;border-radius:3px}
nav{background:#223f5b;padding:6px 28px}nav a{color:#dbe6f0;margin-right:14px;
text-decoration:none;font-size:13px}nav a:hover{text-decoration:underline}
h3{font-size:14px;margin:14px 0 6px}svg{display:block;margin:6px 0}section{overflow-x:auto}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:6px 0;font-size:12px}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px}
details{margin-top:10px}summary{cursor:pointer;color:#2b6cb0}
.layer-chart svg{overflow:visible}.bad{color:#b42318}
"""


def _metric(metric: str, value) -> str:
    """Shares (top-1, F1, string match, relative error) as percentages, SQNR in dB."""
    if value is None:
        return "—"
    return f"{value:.1f} dB" if metric.endswith("sqnr_db") else f"{100 * value:.2f}%"


def _delta(metric: str, value) -> str:
    if value is None:
        return "—"
    return f"{value:+.1f} dB" if metric.endswith("sqnr_db") else f"{100 * value:+.2f} points"


def _size(n: int | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _table(rows: list[tuple], header: tuple | None = None) -> str:
    head = ("<tr>" + "".join(f"<th>{c}</th>" for c in header) + "</tr>") if header else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def _section(key: str, title: str, body: str, cls: str = "") -> str:
    css = f' class="{cls}"' if cls else ""
    return f'<section id="{key}"{css}><h2>{_e(title)}</h2>{body}</section>'


def _card(label: str, value: str, detail: str = "") -> str:
    return f'<div class="card"><span>{_e(label)}</span><b>{value}</b>{_e(detail)}</div>'


def _size_chart(before: int, after: int, base_name: str) -> str:
    return svg.bar_chart([Bar(base_name, before, "#8da4bb", _size(before)),
                      Bar("artifact", after, "#2f7d5b", _size(after), bold=True)],
                     "model size", label_w=110, bar_w=460)


def _estimate_cards(m: dict) -> list[str]:
    est = m.get("estimate")
    if not est:
        note = m.get("estimate_note", "")
        return [_card("latency", "—", note), _card("energy", "—", "")]
    digits = figure_digits(est["latency_ms"], est.get("interval_ms"))
    latency = significant(est["latency_ms"], digits) + " ms"
    energy = "—" if est["energy_mj"] is None else f"~{significant(est['energy_mj'], 1)} mJ"
    return [_card("latency", ("" if est.get("interval_ms") else "~") + latency,
                  f"per inference on {m['device']['name']} (estimate; "
                  f"{est.get('basis', PRIOR_BASIS)})"),
            _card("energy", _e(energy), "per inference (modelled, not measured)")]


def _summary(m: dict) -> str:
    acc = m["accuracy"]
    sizes = m["sizes"]
    base_name, base = "float .tflite", sizes.get("float_tflite_bytes")
    if not base:
        base_name, base = "source", sizes["source_bytes"]
    ratio = sizes["artifact_bytes"] / base if base else None
    cards = [
        _card("device", _e(m["device"]["name"]), m["device"].get("description", "")),
        _card("size", _e(_size(sizes["artifact_bytes"])),
              f"{ratio:.2f}× the {base_name}" if ratio else ""),
        _card(acc["metric"].replace("_", " "), _e(_metric(acc["metric"], acc["value"])),
              f"float {_metric(acc['metric'], acc['reference'])}, "
              f"delta {_delta(acc['metric'], acc['delta'])}"),
        *_estimate_cards(m),
        _card("scheme", _e(m["recipe"]["scheme"]), m["recipe"]["method"]),
    ]
    return _section("summary", "Summary", f'<div class="cards">{"".join(cards)}</div>'
                    + _size_chart(base, sizes["artifact_bytes"], base_name))


def _notes(m: dict) -> str:
    notes = m.get("notes") or []
    if not notes:
        return ""
    items = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return _section("notes", "Read this", f"<ul>{items}</ul>", "warn")


def _io_rows(tensors: list[dict]) -> list[tuple]:
    rows = []
    for t in tensors:
        q = t["quantization"]
        quant = "float" if q is None else f"scale {q['scale']:.6g}, zero point {q['zero_point']}"
        rows.append((f"<code>{_e(t['name'])}</code>", _e(t["shape"]), _e(t["dtype"]), _e(quant)))
    return rows


def _io(m: dict) -> str:
    header = ("name", "shape", "dtype", "quantization")
    return _section("io", "Inputs and outputs", "<h3>inputs</h3>"
                    + _table(_io_rows(m["inputs"]), header) + "<h3>outputs</h3>"
                    + _table(_io_rows(m["outputs"]), header))


def _validation(m: dict) -> str:
    return _section("validation", "Validation", validation_body(m["validation"], _table))


def _conversion(m: dict) -> str:
    c = m["conversion"]
    parity = c.get("parity")
    rows = [("converter", _e(c["converter"]))]
    if parity:
        rows += [("parity samples", parity["samples"]), ("max abs", _num(parity["max_abs"])),
                 ("cosine", _num(parity["cosine"], 8))]
    else:
        rows.append(("parity", _e(c.get("note", "not applicable"))))
    return _section("conversion", "Conversion", _table(rows))


def _comparison(m: dict) -> str:
    """`--device all`: the same artifact estimated on each device named."""
    rows = m.get("comparison")
    if not rows:
        return ""
    failed = [(f"<b>{_e(r['device'])}</b>", _e(r["note"])) for r in rows if r["latency_ms"] is None]
    # every figure with its basis, to the precision its interval allows (issue 15)
    table = _table([(_e(r["device"]), _e(latency_text(r["latency_ms"], r.get("interval_ms"),
                                                        r.get("basis") or PRIOR_BASIS)))
                    for r in rows if r["latency_ms"] is not None], ("device", "latency (basis)"))
    if failed:
        table += "<h3>Devices without an estimate</h3>" + _table(failed, ("device", "why"))
    intro = (f"<p>The artifact built for <b>{_e(m['device']['name'])}</b>, estimated from each "
             "device's profile and placed by its own delegate rules (the same file on every "
             "device: a device with other precision needs would get its own build). "
             "Estimates, not measurements.</p>")
    return _section("comparison", "Device comparison", intro + svg.comparison_chart(rows) + table)


def _partition_legend(detail: dict) -> str:
    items = []
    for k, ops in enumerate(detail["partitions"]):
        span = f"ops {ops[0]}–{ops[-1]}" if len(ops) > 1 else f"op {ops[0]}"
        items.append(f'<span><i class="swatch" style="background:{svg.partition_colour(k)}"></i>'
                     f"partition {k + 1}: {len(ops)} op(s), {span}, on "
                     f"{_e(detail.get('unit') or detail['delegate'])}</span>")
    cpu = sum(op["unit"] == "cpu" for op in detail["ops"])
    if cpu:
        items.append(f'<span><i class="swatch" style="background:{svg.CPU_GREY}"></i>'
                     f"CPU: {cpu} op(s)</span>")
    return f'<div class="legend">{"".join(items)}</div>'


def _all_ops_table(detail: dict, partition_of: dict[int, int]) -> str:
    rows = [(op["index"], _e(op["op"]), _e(op["unit"]),
             "—" if partition_of.get(op["index"]) is None else partition_of[op["index"]] + 1,
             _e(op.get("reason") or "")) for op in detail["ops"]]
    return (f"<details><summary>All {len(rows)} ops</summary>"
            + _table(rows, ("#", "op", "unit", "partition", "why on the CPU")) + "</details>")


def _placement(m: dict, detail: dict | None) -> str:
    """Which op runs where, partitions coloured, CPU fallbacks with their reasons."""
    if detail is None:
        note = _e(m.get("placement_note", ""))
        return _section("placement", "Op placement", f'<p class="muted">{note}</p>')
    partition_of = {i: k for k, ops in enumerate(detail["partitions"]) for i in ops}
    rows = [(op["index"], _e(op["op"]), _e(op["unit"]), _e(op["reason"] or ""),
             _e(op["rewrite"] or "")) for op in detail["ops"] if op["unit"] == "cpu"]
    fallbacks = (_table(rows, ("#", "op", "unit", "why it falls back", "what would fix it"))
                 if rows else "<p>Every op runs on the accelerator.</p>")
    delegated = sum(op["unit"] != "cpu" for op in detail["ops"])
    crossings = detail.get("crossings") or []
    moved = sum(c["bytes"] for c in crossings if c.get("kind") == "internal")
    ep = f' ({_e(detail["execution_provider"])})' if detail.get("execution_provider") else ""
    intro = (f'<p>{delegated} of {len(detail["ops"])} ops on {_e(detail["delegate"])}{ep} in '
             f'{len(detail["partitions"])} partition(s); {_e(_size(moved))} cross between CPU '
             "and accelerator inside the graph. Each box is an op in graph order, coloured by "
             "the partition that runs it; grey runs on the CPU (hover for the reason).</p>")
    return _section("placement", "Op placement", intro + _partition_legend(detail)
                    + svg.placement_strip(detail["ops"], partition_of, "op placement")
                    + fallbacks + _all_ops_table(detail, partition_of))


def _breakdown(ops: list[dict]) -> list[tuple[str, str, float]]:
    """Milliseconds per (op kind, unit), largest first."""
    totals: dict[tuple[str, str], float] = {}
    for op in ops:
        key = (op.get("kind") or op["op"], op["unit"])
        totals[key] = totals.get(key, 0.0) + op["latency_ms"]
    return [(kind, unit, ms) for (kind, unit), ms in sorted(totals.items(), key=lambda kv: -kv[1])]


def _unit_parts(detail: dict) -> list[tuple[str, float, str]]:
    """Where the time goes: each unit's ops, transfers between units, invoke overhead."""
    parts = detail.get("breakdown_ms", {})
    by_unit: dict[str, float] = {}
    for op in detail["ops"]:
        by_unit[op["unit"]] = by_unit.get(op["unit"], 0.0) + op["latency_ms"]
    rows = [(f"ops on {unit}", ms, svg.unit_colour(unit)) for unit, ms in by_unit.items()]
    rows += [(name, parts.get(key) or 0.0, svg.unit_colour(key))
             for name, key in (("transfers between units", "transfers"),
                               ("invoke overhead", "invoke"))]
    return [r for r in rows if r[1] > 0]


def _layers(m: dict, chart: str | None) -> str:
    """Find the bad layer: the calibration core's ranked per-layer error (its own SVG)."""
    if not chart:
        return ""
    return _section("layers", "Quantization error by layer",
                    "<p>Layers ranked by how far their quantized activations depart from the "
                    "float model's (SQNR, lower is worse), and the output SQNR with each worst "
                    "layer quantized alone; <code>manifest.json</code> holds the numbers.</p>"
                    + chart)


def _float_ops(m: dict) -> str:
    """Every op a full-integer artifact still runs in float, with the reason."""
    ops = (m.get("quantization") or {}).get("float_ops")
    if not ops:
        return ""
    rows = [(_e(o["op"]), f"<code>{_e(o['node'])}</code>", _e(o["reason"])) for o in ops]
    return _section("float-ops", f"Ops left in float ({len(ops)})",
                    f"<p>The {_e(m['recipe']['scheme'])} artifact is not full integer: these "
                    "ops run in float between DEQUANTIZE and QUANTIZE (an int8-only "
                    "accelerator hands them to the CPU).</p>"
                    + _table(rows, ("op", "node", "reason")), "warn")


def _rewrites(m: dict) -> str:
    """The rewrite step: delegation before and after, each rewrite with its numeric cost."""
    record = m.get("rewrites")
    if not record:
        return ""

    def share(d: dict | None) -> str:
        if d is None:
            return "not built"
        return (f"{d['delegated_ops']}/{d['ops']} ops ({d['share']:.0%}) on the delegate, "
                f"{d['partitions']} partition(s)")

    rows = [(_e(a["name"]), str(a["changed"]), _e(significant(a["float_max_rel_error"], 2)),
             "yes" if a["kept"] else "no (changes the values)", _e(a["message"]))
            for a in record["applied"]]
    accuracy = record.get("accuracy") or {}
    sqnr = ""
    if accuracy:
        sqnr = (f"<p>Worst output SQNR on the held-out samples: "
                f"{_e(_num(accuracy.get('before_worst_sqnr_db')))} dB before, "
                f"{_e(_num(accuracy.get('after_worst_sqnr_db')))} dB after.</p>")
    body = (f"<p><b>{'Kept' if record['kept'] else 'Not kept'}</b>: {_e(record['reason'])}.</p>"
            + _table([("before", _e(share(record["before"]))),
                      ("after", _e(share(record["after"])))]) + sqnr
            + _table(rows, ("rewrite", "changed", "float max rel. error", "used", "what it does")))
    return _section("rewrites", "Rewrites for the delegate", body)


def _estimate(m: dict, detail: dict | None) -> str:
    title = "Latency and energy estimate"
    if detail is None:
        return _section("latency", title,
                        f'<p class="muted">{_e(m.get("estimate_note", ""))}</p>')
    bars = [Bar(f"{kind} on {unit}", ms, svg.unit_colour(unit), f"{ms:.3g} ms")
            for kind, unit, ms in _breakdown(detail["ops"])[:14]]
    params = ""
    if detail.get("on_chip_param_bytes") is not None:
        params = (f"<p>Parameters: {_e(_size(detail['on_chip_param_bytes']))} cached on chip, "
                  f"{_e(_size(detail['off_chip_param_bytes']))} streamed per inference.</p>")
    latency = latency_text(detail["latency_ms"], detail.get("interval_ms"),
                           detail.get("basis", PRIOR_BASIS))
    body = (f"<p><b>{_e(latency)}</b> per inference on {_e(detail['device'])}: an estimate "
            "from the device profile, not a measurement (<code>edgeopt bench</code> "
            f"measures). Energy, ~{_e(significant(detail['energy_mj'], 1))} mJ, is "
            f"{_e(detail.get('energy_basis') or ENERGY_BASIS)}.</p>" + params
            + "<h3>Where the time goes</h3>"
            + svg.stacked_bar(_unit_parts(detail), "latency by unit")
            + "<h3>Latency by op kind and unit</h3>"
            + svg.bar_chart(bars, "latency breakdown"))
    return _section("latency", title, body)


def _data(m: dict) -> str:
    return _section("data", "Data", _table(data_rows(m)))


def _toolchain(m: dict) -> str:
    rows = [(f"<code>{_e(k)}</code>", _e(v)) for k, v in m["toolchain"].items()]
    return _section("toolchain", "Toolchain", _table(rows))


def _compression(m: dict) -> str:
    record = m.get("compression")
    if not record:
        return ""
    return _section("compression", "Compression", compression_body(record))


def _qat_row(name: str, figures: dict | None) -> tuple:
    f = figures or {}
    metric = f.get("metric") or "sqnr_db"
    return (_e(name), _e(metric), _metric(metric, f.get("value")),
            _metric("sqnr_db", f.get("sqnr_db")), _e(f.get("samples", "—")),
            _e(f.get("layers_above_int8", "—")))


def _qat(m: dict) -> str:
    """--qat: post-training and quantization-aware results side by side (held-out data)."""
    record = m.get("qat")
    if not record:
        return ""
    lines = [f"<p>{_e(record['reason'])}</p>"]
    rows = [_qat_row("post-training", record.get("ptq"))]
    if record.get("ran"):
        rows.append(_qat_row("quantization-aware", record.get("qat")))
        lines.append(f"<p>{_e(record['epochs_run'])} of at most {_e(record['epochs_max'])} "
                     f"epochs (best {_e(record['best_epoch'])}), {record['seconds']:.0f} s, "
                     f"{'labels and distillation' if record['labels'] else 'distillation'} on "
                     f"{_e(record['samples'])} samples; {_e(record['learned_ranges'])} learned "
                     f"activation ranges written; shipped: {_e(record['shipped'])}.</p>")
        if record.get("note"):
            lines.append(f"<p>{_e(record['note'])}</p>")
    table = _table(rows, ("model", "metric", "value", "SQNR", "samples", "layers above int8"))
    return _section("qat", "Quantization-aware training", "".join(lines) + table)


_NAV = (("summary", "Summary"), ("comparison", "Devices"), ("compression", "Compression"),
        ("qat", "QAT"),
        ("float-ops", "Float ops"), ("layers", "Layers"), ("placement", "Placement"),
        ("rewrites", "Rewrites"),
        ("latency", "Latency"),
        ("validation", "Validation"), ("data", "Data"))


def render_report(manifest: dict, details: dict | None = None) -> str:
    """The HTML page for one bundle, from its manifest and the stages' detailed records."""
    m, details = manifest, details or {}
    # What a reader comes for first (the figures and the charts), then the records.
    sections = [_notes(m), _summary(m), _comparison(m), _compression(m), _qat(m),
                _float_ops(m), _layers(m, details.get("layer_chart")),
                _placement(m, details.get("placement")), _rewrites(m),
                _estimate(m, details.get("estimate")), _validation(m), _conversion(m), _io(m),
                _data(m), _toolchain(m)]
    body = "".join(sections)
    nav = "".join(f'<a href="#{key}">{name}</a>' for key, name in _NAV
                  if f'<section id="{key}"' in body)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>edgeopt report: {_e(m['model']['file'])}</title><style>{_CSS}</style></head>"
        f"<body><header><h1>{_e(m['model']['file'])} for {_e(m['device']['name'])}</h1>"
        f"<p>built {_e(m['created'])} by edgeopt {_e(m['toolchain'].get('edgeopt', ''))}</p>"
        f"</header><nav>{nav}</nav><main>{body}</main></body></html>\n"
    )
