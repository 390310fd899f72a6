"""The terminal summary of `edgeopt bench`: one block per measurement.

    >>> print(render_measurement(measurement))
    model     digits_cnn.tflite (34.1 KiB, sha256 4f1c2a9e...)
    device    host-cpu (cpu, xnnpack) on the host
    latency   median 0.212 ms  mean 0.219  p90 0.231  p99 0.301  min 0.205  max 0.334  std 0.013
    ...
"""

from __future__ import annotations


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _latency(lat: dict) -> str:
    head = f"median {_ms(lat['median'])} ms" if lat["median"] is not None \
        else f"mean {_ms(lat['mean'])} ms"
    rest = [f"{k} {_ms(lat[k])}" for k in ("mean", "p90", "p99", "min", "max", "std")
            if lat[k] is not None and not (k == "mean" and lat["median"] is None)]
    return "  ".join([head, *rest])


def _power(r: dict) -> str:
    if r["power_mw"] is None:
        return f"— ({r.get('power_note', 'not measured')})"
    text = f"{r['power_mw']:.0f} mW above idle, {r['energy_mj']:.4f} mJ per inference"
    return text + (f" ({r['power_note']})" if r.get("power_note") else "")


def _numerics(n: dict) -> str:
    top1 = n.get("top1_agreement")
    sqnr = "inf (identical)" if n.get("sqnr_db") is None else f"{n['sqnr_db']:.1f}"
    parts = [f"SQNR {sqnr} dB", f"max-abs {n['max_abs']:.3g}"]
    if top1 is not None:
        parts.append(f"top-1 agreement {top1:.1%}")
    return ", ".join(parts) + f" on {n['samples']} inputs ({n['candidate']} vs {n['reference']})"


def _memory(mem: dict) -> str:
    return ", ".join(f"{k} +{v:.1f} MB" for k, v in mem.items() if v is not None) or "—"


def render_measurement(record: dict) -> str:
    """Aligned `label  value` lines for one bench record (the JSON form)."""
    model, device = record["model"], record["device"]
    where = "on the host" if device["transport"] == "host" else \
        f"over {device['transport']} {device['serial']}"
    rows = [
        ("model", f"{model['file']} ({model['size_bytes'] / 1024:.1f} KiB, sha256 "
                  f"{model['sha256'][:8]}...)"),
        ("device", f"{device['name']} ({device['kind'] or '?'}, {device['delegate']}) {where}"),
        ("tool", record["tool"]),
        ("runs", f"{record['runs']} after {record['warmup']} warmup, threads "
                 f"{record['threads'] or 'default'}"),
        ("latency", _latency(record["latency_ms"])),
        ("init", f"{_ms(record['init_ms'])} ms, first run {_ms(record['first_ms'])} ms"),
        ("memory", _memory(record["memory_mb"])),
        ("power", _power(record)),
    ]
    if record.get("numerics"):
        rows.append(("numerics", _numerics(record["numerics"])))
    rows += [("note", note) for note in record.get("notes", [])]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def render_outcome(outcome) -> str:
    blocks = [render_measurement(m.to_json()) for m in outcome.measurements]
    blocks += [f"failed: {error}" for error in outcome.errors]
    return "\n\n".join(blocks)
