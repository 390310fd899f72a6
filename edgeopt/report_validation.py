"""The report's validation section: per-output figures, channel groups, the task metric.

Every figure says what it was measured on (how many held-out samples, which runtime); the
pooled SQNR is shown as a quality figure only when it describes one output of one scale.
"""

from __future__ import annotations

import html


def esc(value) -> str:
    """Text made safe for the report's HTML."""
    return html.escape(str(value))


def num(value, digits: int = 4) -> str:
    """A figure to `digits` significant digits, '—' when there is none."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def share(value) -> str:
    return "—" if value is None else f"{100 * value:.2f}%"


def agreement_text(out: dict) -> str:
    """The agreement metric of the output's kind."""
    if out["kind"] == "classes":
        return f"top-1 agreement {share(out.get('top1_agreement'))}"
    if out["kind"] == "sequence":
        return (f"per-step agreement {share(out.get('step_agreement'))}, decoded-string "
                f"match {share(out.get('string_match'))} (greedy CTC, blank "
                f"{out.get('blank_index')})")
    return f"relative error {share(out.get('relative_error'))}"


def _state(collapsed, unjudged=None) -> str:
    if unjudged:
        return f"<b>not judged</b>: {esc(unjudged)}"
    return f'<b class="bad">collapsed</b>: {esc(collapsed)}' if collapsed else "ok"


def _output_rows(outputs: list[dict]) -> list[tuple]:
    rows = []
    for out in outputs:
        rows.append((f"<code>{esc(out['name'])}</code>", esc(out["kind"]), num(out["sqnr_db"]),
                     num(out["cosine"], 6), num(out["max_abs"]), esc(agreement_text(out)),
                     _state(out.get("collapsed"), out.get("unjudged"))))
        for g in out.get("groups") or []:
            where = f"channels {g['start']}:{g['end']} (axis {g['axis']})"
            role = f", {g['role']}" if g.get("role") else ""
            rows.append((f"&nbsp;&nbsp;↳ {esc(where + role)}", "group", num(g["sqnr_db"]),
                         num(g["cosine"], 6), num(g["max_abs"]),
                         esc(f"float range [{num(g['float_min'])}, {num(g['float_max'])}]"),
                         _state(g.get("collapsed"), g.get("unjudged"))))
    return rows


def _task_rows(task: dict) -> list[tuple]:
    details = ", ".join(f"{k} {v}" for k, v in task["details"].items())
    return [("task", esc(task["task"])), ("metric", esc(task["metric"].replace("_", " "))),
            ("value", esc(share(task["value"]))),
            ("outputs", esc(", ".join(task["outputs"]))), ("samples", task["samples"]),
            ("how", esc(details or "—"))]


def validation_body(v: dict, table) -> str:
    """The section's HTML; `table(rows, header)` is the report's table helper."""
    outputs = v.get("outputs") or []
    intro = (f"<p>The artifact in {esc(v['runtime'])} against the float model on "
             f"<b>{v['samples']} evaluation samples</b>, held out from calibration; "
             "every figure below is measured on those samples.</p>")
    body = intro
    if outputs:
        body += "<h3>Per output</h3>" + table(_output_rows(outputs), (
            "output", "kind", "SQNR (dB)", "cosine", "max abs error", "agreement", "state"))
    if v.get("task"):
        body += "<h3>Task metric</h3>" + table(_task_rows(v["task"]))
    pooled_over = v.get("pooled_over") or []
    honest = len(outputs) <= 1 and not any(o.get("groups") for o in outputs)
    label = "output SQNR (dB)" if honest else (
        f"pooled SQNR over {len(pooled_over)} output(s) and their scales (dB) — not a quality "
        "figure here: read the rows above")
    rows = [(esc(label), num(v["sqnr_db"])), ("pooled cosine", num(v["cosine"], 6)),
            ("pooled max abs error", num(v["max_abs"]))]
    if v.get("collapsed") and v.get("accepted_collapsed"):
        rows.append(("collapsed, accepted", esc("; ".join(v["collapsed"]))))
    return body + "<h3>All outputs together</h3>" + table(rows)
