"""The table `edgeopt build` prints at the end: what was built, how good, how fast, where.

Plain text in a pipe; on a terminal the labels are bold, the accuracy change green or red
and the notes yellow (edgeopt.terminal decides, NO_COLOR turns it off).
"""

from __future__ import annotations

from edgeopt.devices.fitted import PRIOR_BASIS
from edgeopt.devices.render import figure_text, latency_text, short_basis, significant
from edgeopt.qat_step import qat_summary
from edgeopt.report_validation import agreement_text, share
from edgeopt.terminal import paint, table


def size_text(n) -> str:
    if n is None:
        return "—"
    return f"{n / 1024:.1f} KiB" if n < 1024 ** 2 else f"{n / 1024 ** 2:.2f} MiB"


def placement_text(m: dict) -> str:
    placement = m.get("placement")
    if placement is None:
        return m.get("placement_note", "—")
    total = placement["delegated_ops"] + placement["cpu_ops"]
    share = placement["delegated_ops"] / total if total else 0.0
    ep = f" ({placement['execution_provider']})" if placement.get("execution_provider") else ""
    text = (f"{share:.0%} of ops on {placement['delegate']}{ep} ({placement['delegated_ops']}/"
            f"{total}), {len(placement['partitions'])} partition(s)")
    if m.get("compiled"):
        text += f"; compiled: {m['compiled']['file']}"
    return text


def _size_row(m: dict) -> str:
    sizes = m["sizes"]
    float_bytes = sizes.get("float_tflite_bytes")
    size = f"{size_text(sizes['source_bytes'])} {m['source']['format']}"
    if float_bytes:
        size += f", {size_text(float_bytes)} float .tflite"
    base = float_bytes or sizes["source_bytes"]
    return size + (f" -> {size_text(sizes['artifact_bytes'])} "
                   f"({sizes['artifact_bytes'] / base:.2f}x the "
                   f"{'float .tflite' if float_bytes else 'source'})")


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.4f}"


def _accuracy_row(acc: dict, colour: bool) -> str:
    delta = acc["delta"]
    shade = "" if delta is None else ("green" if delta >= 0 else "red")
    return (f"float {_fmt(acc['reference'])} -> {_fmt(acc['value'])} "
            f"(delta {paint(_fmt(delta), shade, colour)})")


def _db(value) -> str:
    return "—" if value is None else f"{value:.1f} dB"


def output_rows(validation: dict) -> list[tuple[str, str]]:
    """One row per output (and per channel group of a mixed-scale output)."""
    rows = []
    for out in validation.get("outputs") or []:
        state = f"; COLLAPSED: {out['collapsed']}" if out.get("collapsed") else ""
        state += f"; not judged: {out['unjudged']}" if out.get("unjudged") else ""
        rows.append((f"output {out['name']}", f"{out['kind']}: SQNR {_db(out['sqnr_db'])}, "
                     f"cosine {_fmt(out['cosine'])}, {agreement_text(out)}{state}"))
        for g in out.get("groups") or []:
            role = f" {g['role']}" if g.get("role") else ""
            state = f"; COLLAPSED: {g['collapsed']}" if g.get("collapsed") else ""
            state += f"; not judged: {g['unjudged']}" if g.get("unjudged") else ""
            rows.append((f"  {g['start']}:{g['end']}{role}",
                         f"[{g['float_min']:.3g}, {g['float_max']:.3g}]: SQNR "
                         f"{_db(g['sqnr_db'])}, cosine {_fmt(g['cosine'])}{state}"))
    task = validation.get("task")
    if task:
        rows.append((f"task {task['task']}", f"{task['metric'].replace('_', ' ')} "
                     f"{share(task['value'])} against the float model "
                     f"({task['samples']} samples)"))
    return rows


def _estimate_row(m: dict) -> str:
    if not m.get("estimate"):
        return m.get("estimate_note", "—")
    est = m["estimate"]
    energy = est["energy_mj"]
    return (latency_text(est["latency_ms"], est.get("interval_ms"),
                         est.get("basis", PRIOR_BASIS))
            + (f"; ~{significant(energy, 1)} mJ (modelled)" if energy is not None else ""))


def _compression_rows(m: dict) -> list[tuple[str, str]]:
    record = m.get("compression")
    if not record:
        return []
    macs = record["macs"]
    text = (f"{macs['after'] / macs['before']:.2f}x the MACs ({record['criterion']} channel "
            f"pruning), {record['parameters']['before']:,} -> "
            f"{record['parameters']['after']:,} parameters")
    distillation = record.get("distillation")
    if distillation:
        text += (f"; distilled {distillation['epochs_run']} epochs "
                 f"({'with' if distillation['labels'] else 'without'} labels)")
    return [("pruned", text)]


def _float_ops_rows(m: dict) -> list[tuple[str, str]]:
    ops = (m.get("quantization") or {}).get("float_ops")
    if ops is None:
        return []
    if not ops:
        return [("float ops", "none: every op runs in integer")]
    named = ", ".join(f"{o['op']} '{o['node']}'" for o in ops[:3])
    return [("float ops", f"{len(ops)} ({named}{', ...' if len(ops) > 3 else ''}): "
                          "listed with reasons in manifest quantization.float_ops")]


def _rewrite_rows(m: dict) -> list[tuple[str, str]]:
    record = m.get("rewrites")
    if not record:
        return []
    before, after = record["before"], record["after"]
    moved = (f"{before['share']:.0%} -> {after['share']:.0%} of ops on the delegate"
             if after else "not built")
    verdict = "kept" if record["kept"] else "not kept"
    return [("rewrites", f"{', '.join(record['tried'])}: {verdict} ({moved}; "
                         f"{record['reason']})")]


def build_summary(result, colour: bool = False) -> str:
    """The key/value table (and the device comparison) for a finished build."""
    m = result.manifest
    acc = m["accuracy"]
    rows = [
        ("bundle", f"{result.output}/  ({m['model']['file']}, manifest.json, report.html, "
                   "edgeopt.toml)"),
        ("device", f"{m['device']['name']} ({m['device']['kind']}, {m['device']['delegate']})"),
        ("scheme", f"{m['recipe']['scheme']}: {m['recipe']['method']}"),
        *_compression_rows(m),
        *[("qat", line) for line in qat_summary(m.get("qat"))],
        ("size", _size_row(m)),
        (acc["metric"], _accuracy_row(acc, colour)),
        ("validated", f"{m['validation']['samples']} samples ({m['data']['evaluation']}, "
                      f"not calibrated on), {m['validation']['runtime']}"),
        *output_rows(m["validation"]),
        *_float_ops_rows(m),
        ("placement", placement_text(m)),
        *_rewrite_rows(m),
        ("estimate", _estimate_row(m)),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{paint(k.ljust(width), 'bold', colour)}  {v}" for k, v in rows]
    lines += [f"{paint('note'.ljust(width), 'yellow', colour)}  {n}" for n in m["notes"]]
    if m.get("comparison"):
        lines += ["", comparison_table(m["comparison"], colour)]
    return "\n".join(lines)


def comparison_table(rows: list[dict], colour: bool = False) -> str:
    """One line per device for the same artifact; * marks the device it was built for."""
    body = []
    for r in rows:
        name = r["device"] + (" *" if r["primary"] else "")
        if r["latency_ms"] is None:
            body.append((name, "—", "—", "—", r["note"] or "", ""))
            continue
        total = r["delegated_ops"] + r["cpu_ops"]
        interval = r.get("interval_ms")
        body.append((name, figure_text(r["latency_ms"], interval),
                     f"~{significant(r['energy_mj'], 1)}",
                     f"{r['delegated_ops']}/{total} on {r['delegate']}",
                     f"{r['partitions']} partition(s)",
                     short_basis(r.get("basis") or "", interval)))
    title = "this artifact on each device (estimates, energy modelled; * built for)"
    return paint(title, "bold", colour) + "\n" + table(
        ("device", "ms", "mJ", "ops on delegate", "", "basis"), body, colour, indent="  ")
