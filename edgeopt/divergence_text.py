"""The terminal form of `edgeopt bench --find-divergence` (its JSON record, as lines).

    >>> print(render_divergence(record))
    model       net.tflite (12.3 KiB, sha256 4f1c2a9e...) on the host
    reference   LiteRT 2.3.0 reference kernels (BUILTIN_REF)
    candidate   LiteRT 2.3.0, external delegate ./planted.so
    compared    6 of 6 ops' outputs on 4 inputs (every op output made a model output)
    first       op 2 ADD (partition 0): tensor 9 'add' float32 [1, 8, 8, 4]
                rel error 0.31 (threshold 0.01), max-abs 0.5, SQNR 10.1 dB; inputs 2.4e-07
    path        op 2 ADD 0.31 -> op 3 CONV_2D 0.52 -> op 5 FULLY_CONNECTED 0.17 (output)
"""

from __future__ import annotations


def _num(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return f"{value:.3g}"


def _sqnr(error: dict) -> str:
    sqnr = error["sqnr_db"]
    return "inf (identical)" if sqnr is None else f"{_num(sqnr)} dB"


def _error(error: dict) -> str:
    parts = [f"rel error {_num(error['rel_error'])}", f"max-abs {_num(error['max_abs'])}",
             f"SQNR {_sqnr(error)}"]
    if error["max_steps"] is not None:
        parts.append(f"max {error['max_steps']} quantized steps "
                     f"(mean {error['mean_steps']:.3g})")
    return ", ".join(parts)


def _tensor(tensor: dict) -> str:
    q, quant = tensor["quantization"], ""
    if q is not None:
        scale = "per-channel" if isinstance(q["scale"], list) else _num(q["scale"])
        quant = f" (scale {scale}, zero point {q['zero_point']})"
    return (f"tensor {tensor['index']} '{tensor['name']}' {tensor['dtype']} "
            f"{tensor['shape']}{quant}")


def _first(record: dict) -> list[tuple[str, str]]:
    first = record["first_divergence"]
    if first is None:
        return [("first", f"no op departs beyond rel error {record['threshold']:g}")]
    inputs = first["input_rel_error"]
    return [("first", f"op {first['index']} {first['op']} ({first['unit']}): "
                      f"{_tensor(first['tensor'])}"),
            ("", f"{_error(first['error'])}; threshold {record['threshold']:g}; its inputs' "
                 f"rel error {_num(inputs) if inputs is not None else '— (none observed)'}")]


def _increase(check: dict) -> str:
    """The op that adds the most error (drift accumulates; a broken kernel jumps)."""
    return (f"op {check['index']} {check['op']} ({check['unit']}) adds "
            f"{_num(check['added_rel_error'])} rel error to its inputs' "
            f"{_num(check['input_rel_error'])}")


def _path(record: dict) -> str:
    steps = [f"op {p['index']} {p['op']} {_num(p['error']['rel_error']) if 'error' in p else '?'}"
             for p in record["path"]]
    return " -> ".join(steps) + " (output)"


def _compared(record: dict) -> str:
    how = ("every op output made a model output" if record["observe"] == "outputs"
           else "tensors LiteRT keeps with experimental_preserve_all_tensors")
    text = f"{record['ops_observed']} of {record['ops']} ops' outputs on " \
           f"{record['samples']} inputs ({how})"
    if record.get("partitions") is not None:
        text += (f"; {record['partitions']} delegate partitions "
                 f"({record['partitions_as_shipped']} in the model as shipped)")
    return text


def render_divergence(record: dict) -> str:
    """Aligned `label  value` lines."""
    model, device = record["model"], record["device"]
    where = "on the host" if device["transport"] == "host" else f"over adb {device['serial']}"
    rows = [("model", f"{model['file']} ({model['size_bytes'] / 1024:.1f} KiB, sha256 "
                      f"{model['sha256'][:8]}...) {where}"),
            ("reference", record["reference"]), ("candidate", record["candidate"]),
            ("compared", _compared(record)), *_first(record)]
    if record["path"]:
        rows.append(("path", _path(record)))
    if record.get("largest_increase"):
        rows.append(("worst step", _increase(record["largest_increase"])))
    if record["unobservable"]:
        ops = ", ".join(f"{u['index']} {u['op']}" for u in record["unobservable"][:12])
        more = len(record["unobservable"]) - 12
        why = " (inside delegate partitions)" if record["observe"] == "preserve" else ""
        rows.append(("unobserved", ops + (f" and {more} more" if more > 0 else "") + why))
    for output in record["outputs"]:
        rows.append(("output", f"'{output['name']}' {_error(output['error'])}"))
    rows += [("note", note) for note in record.get("notes", [])]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
