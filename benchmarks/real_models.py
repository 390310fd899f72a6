"""Every edgeopt command on every real pretrained model of the zoo (benchmarks/zoo.py).

For each model: `inspect`, `build --device pixel-npu` (.tflite), `build --format onnx
--device host-cpu`, `build --device coral-usb`, `build --device ethos-u55-256`,
`quantize --scheme w4a8` and `compress --prune 0.3`, each in its own process under
`/usr/bin/time -v`: outcome (ok / one-line error / internal error / crash / slow), the
failure class the error belongs to, wall time and peak RSS. For what was written, the
figures the manifest records per output (SQNR, cosine, the task metric where the zoo names
the task) and the float islands of a w8a8 artifact; and, as a check independent of
edgeopt, whether the runtime (LiteRT, onnxruntime) loads the artifact and runs one held
sample on it — an artifact the runtime refuses after edgeopt wrote it is a failure.

    python benchmarks/real_models.py                        # all models, all steps
    python benchmarks/real_models.py --only magika --steps pixel onnx
    python benchmarks/real_models.py --table                # the BENCHMARKS.md table

Results go to benchmarks/results/real_models.json, rewritten after every command, so a
run that is stopped keeps what it measured; a second run fills in only what is missing
(`--redo` runs everything again).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from _common import RESULTS_DIR, edgeopt_command, git_state, machine_info, package_versions
from zoo import (
    BY_NAME,
    ZOO,
    Entry,
    _input_shapes,
    _timed,
    failure_class,
    input_value_flags,
    write_calib,
)

RESULT = RESULTS_DIR / "real_models.json"
CALIB_SAMPLES = 16
# zoo task -> edgeopt --task (the task metric against the float model)
TASKS = {"classify": "classify", "ocr-rec": "sequence"}
STEPS = ("inspect", "pixel", "onnx", "coral", "ethos", "w4a8", "prune")


def _commands(e: Entry, calib: Path, flags: list[str], out: Path) -> dict[str, list[str]]:
    """The edgeopt command line of each step (compress takes no --input-value)."""
    model, data = str(e.path()), ["--calib", str(calib)]
    shapes, flags = flags, flags + input_value_flags(e)
    task = ["--task", TASKS[e.task]] if e.task in TASKS else []

    def build(name: str, *device: str) -> list[str]:
        return ["build", model, *device, *data, *flags, *task, "-o", str(out / name), "--json"]

    pruned = out / f"pruned{Path(model).suffix}"
    return {
        "inspect": ["inspect", model, *flags, "--json"],
        "pixel": build("pixel", "--device", "pixel-npu"),
        "onnx": build("onnx", "--format", "onnx", "--device", "host-cpu"),
        "coral": build("coral", "--device", "coral-usb"),
        "ethos": build("ethos", "--device", "ethos-u55-256"),
        "w4a8": ["quantize", model, "--scheme", "w4a8", *data, *flags, *task,
                 "-o", str(out / "w4a8.tflite"), "--json"],
        "prune": ["compress", model, "--prune", "0.3", "--data", str(calib), *shapes,
                  "-o", str(pruned), "--json"],  # compress reads samples with --data
    }


def _manifest(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def _per_output(manifest: dict) -> list[dict]:
    """SQNR / cosine / metric per output, as the manifest records them."""
    validation = manifest.get("validation") or {}
    rows = validation.get("outputs") or []
    return [{k: row.get(k) for k in ("name", "sqnr_db", "cosine", "metric", "value",
                                      "collapsed", "unjudged") if k in row} for row in rows]


def _float_ops(manifest: dict) -> list | None:
    quant = manifest.get("quantization") or {}
    return quant.get("float_ops")


def _artifact(folder: Path, manifest: dict) -> Path | None:
    name = (manifest.get("model") or {}).get("file")
    return folder / name if name and (folder / name).is_file() else None


def _as_input(x: np.ndarray, detail: dict) -> np.ndarray:
    """A float sample as an input of `detail`'s type: an integer input with a scale takes
    it quantized (a bare cast fed int8 audio as zeros: silence, not the sample)."""
    dtype = np.dtype(detail["dtype"])
    scales = detail.get("quantization_parameters", {}).get("scales", [])
    if dtype.kind in "iu" and x.dtype.kind == "f" and len(scales):
        zero = detail["quantization_parameters"]["zero_points"][0]
        info = np.iinfo(dtype)
        return np.clip(np.rint(x / scales[0]) + zero, info.min, info.max).astype(dtype)
    return x.astype(dtype)


def runtime_check(model: Path, calib: Path, layout: dict | None = None,
                  io: dict | None = None) -> str:
    """'ok' when the runtime loads `model` and runs the first calibration sample, else why.
    `layout`: the manifest's conversion.input_layout_changes (input -> permutation), which
    an app applies to its data (onnx2tf made basic-pitch's [1, 43844, 1] [1, 1, 43844]);
    `io`: `edgeopt quantize --json`'s layout record, which says the same per input (the
    sample is fed as it says, by signature key, nothing guessed from shapes)."""
    try:
        with np.load(calib) as data:
            sample = _first_sample({k: data[k] for k in data.files})
        if io and model.suffix == ".tflite" and all(
                row.get("signature_key") for row in io["inputs"]):
            return _run_as_recorded(model, sample, io)
        if model.suffix == ".onnx":
            import onnxruntime as ort

            session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
            feeds = {}
            for i in session.get_inputs():
                x = sample.get(i.name)
                if x is None:
                    return f"no sample for input {i.name}"
                x = _as_declared(x, i.shape)
                feeds[i.name] = x.astype(np.float32) if "float" in i.type else x
            session.run(None, feeds)
            return "ok"
        interpreter = _interpreter(model)
        runner = interpreter.get_signature_runner()
        names = list(runner.get_input_details())
        feeds = {n: sample[n] if n in sample else sample[list(sample)[k]]
                 for k, n in enumerate(names)}
        feeds = {n: _permuted(x, n, layout or {}) for n, x in feeds.items()}
        details = runner.get_input_details()
        runner(**{n: _as_input(_laid_out(feeds[n], tuple(details[n]["shape"])), details[n])
                  for n in names})
        return "ok"
    except Exception as exc:  # the table reports what the runtime said, whatever it is
        return f"refused: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def _run_as_recorded(model: Path, sample: dict[str, np.ndarray], io: dict) -> str:
    """Feed each input as the quantize record lays it out: the source's sample under its
    source name, transposed as recorded, by its signature key."""
    runner = _interpreter(model).get_signature_runner()
    details = runner.get_input_details()
    feeds = {}
    for row in io["inputs"]:
        x = sample.get(row["name"])
        if x is None:
            return f"no sample for input {row['name']}"
        x = np.transpose(x, row["transpose"]) if row["transpose"] else x
        feeds[row["signature_key"]] = _as_input(x, details[row["signature_key"]])
    runner(**feeds)
    return "ok"


def _interpreter(model: Path):
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(str(model))


def _first_sample(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The first sample of each input, in the layout the zoo stored it: a recurrent state
    [layers, N, units] keeps its sample axis where it is, a scalar stays a scalar."""
    count = max(len(a) for a in arrays.values() if a.ndim)
    first = {}
    for name, a in arrays.items():
        axis = 0 if not a.ndim or a.shape[0] == count else next(
            (i for i, n in enumerate(a.shape) if n == count), 0)
        first[name] = np.take(a, [0], axis=axis) if a.ndim else a
    return first


def _as_declared(x: np.ndarray, declared) -> np.ndarray:
    """One sample (samples first, as the zoo stores them) in the layout an ONNX input
    declares: a scalar gets its value, a recurrent state [layers, N, units] its sample
    on axis 1."""
    if not declared:
        return np.asarray(x.reshape(-1)[0])
    fits = lambda shape: len(shape) == len(declared) and all(  # noqa: E731
        not isinstance(d, int) or d == n for d, n in zip(declared, shape))
    for axis in range(x.ndim):
        moved = np.moveaxis(x, 0, axis)
        if fits(moved.shape):
            return moved
    return x


def _permuted(x: np.ndarray, name: str, layout: dict) -> np.ndarray:
    """`x` as the manifest says the artifact takes input `name` (onnx2tf writes the
    signature name 'in:0' as 'in__0')."""
    def plain(n: str) -> str:
        return n.replace(":", "__").removeprefix("serving_default_")

    perm = next((p for k, p in layout.items() if plain(k) == plain(name)), None)
    return np.transpose(x, perm) if perm and len(perm) == x.ndim and x.ndim != 4 else x


def _laid_out(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """An NCHW sample in the NHWC layout a converted .tflite takes (edgeopt's bundles say
    so in manifest preprocessing; here the shapes tell)."""
    if x.ndim == 4 and x.shape != shape and x.transpose(0, 2, 3, 1).shape[1:] == shape[1:]:
        return x.transpose(0, 2, 3, 1)
    return x


def float_compute_ops(model: Path) -> list[str] | None:
    """Ops of a .tflite that compute in float (a float result), besides the QUANTIZE and
    DEQUANTIZE at the edges: read from LiteRT's own view of the graph, not from edgeopt."""
    if model.suffix != ".tflite":
        return None
    try:
        ops = _interpreter(model)._get_ops_details()
    except Exception:  # runtime_check reports the refusal
        return None
    edges = {"QUANTIZE", "DEQUANTIZE"}
    return [f"{op['op_name']}#{op['index']}" for op in ops if op["op_name"] not in edges
            and any(np.dtype(t) == np.float32 for t in op.get("result_types", []))]


def _rewrites(manifest: dict) -> dict | None:
    """The build's rewrite step: what it tried and the delegate's share before and after."""
    record = manifest.get("rewrites")
    if not record:
        return None
    after = record.get("after") or {}
    return {"tried": record["tried"], "kept": record["kept"], "reason": record["reason"],
            "before": record["before"], "after": after or None}


def rewrites_table(record: dict) -> str:
    """Per model and device step: ops on the delegate and partitions, before -> after."""
    lines = ["| model | step | rewrites | ops on delegate before → after | partitions | kept |",
             "|---|---|---|---|---|---|"]
    for name, row in sorted(record.get("models", {}).items()):
        for step in STEPS:
            rw = (row.get(step) or {}).get("rewrites")
            if not rw:
                continue
            b, a = rw["before"], rw["after"] or {}
            share = (f"{b['delegated_ops']}/{b['ops']} ({b['share']:.0%}) → "
                     + (f"{a['delegated_ops']}/{a['ops']} ({a['share']:.0%})" if a else "—"))
            parts = f"{b['partitions']} → {a.get('partitions', '—')}"
            lines.append(f"| {name} | {step} | {', '.join(rw['tried'])} | {share} | {parts} | "
                         f"{'yes' if rw['kept'] else 'no: ' + rw['reason']} |")
    return "\n".join(lines)


def _validation(record: dict) -> dict:
    """The artifact against its source as a `--json` record gives it: pooled and per-output
    SQNR, cosine and agreement, the worst output, the samples, the warnings."""
    v = record.get("validation") or {}
    outputs = [{k: o.get(k) for k in ("name", "sqnr_db", "cosine", "top1_agreement")}
               for o in v.get("outputs") or ()]
    sqnrs = [o["sqnr_db"] for o in outputs if o["sqnr_db"] is not None]
    return {"sqnr_db": v.get("sqnr_db"), "top1_agreement": v.get("top1_agreement"),
            "outputs": outputs, "worst_sqnr_db": min(sqnrs) if sqnrs else None,
            "samples": v.get("samples"), "task": v.get("task"),
            "warnings": record.get("warnings", [])}


def _compression(record: dict) -> dict:
    """What `compress --json` measured: MACs and parameters kept, the pruned model against
    the source (its SQNR and agreement), and its warnings."""
    return {"macs": record.get("macs"), "parameters": record.get("parameters"),
            **_validation(record)}


def _step(e: Entry, step: str, command: list[str], out: Path, calib: Path, limit: int) -> dict:
    target = Path(command[command.index("-o") + 1]) if "-o" in command else None
    if target is not None:
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(
            missing_ok=True)
    row = _timed([*edgeopt_command(), *command], limit)
    row["failure_class"] = failure_class(row)
    row.pop("stdout_tail", None)
    printed = row.pop("stdout_json", None) or {}
    if step == "prune" and row["outcome"] == "ok":
        row["compression"] = _compression(printed)
    elif step == "w4a8" and row["outcome"] == "ok":
        row["validation"] = _validation(printed)
    if row["outcome"] != "ok" or target is None:
        return row
    if target.is_dir():
        manifest = _manifest(target) or {}
        row["scheme"] = (manifest.get("recipe") or {}).get("scheme")
        row["outputs"] = _per_output(manifest)
        row["float_ops"] = _float_ops(manifest)
        row["rewrites"] = _rewrites(manifest)
        row["rescue"] = (manifest.get("quantization") or {}).get("rescue")
        artifact = _artifact(target, manifest)
        layout = (manifest.get("conversion") or {}).get("input_layout_changes")
        row["runtime"] = (runtime_check(artifact, calib, layout) if artifact
                          else "no artifact found")
        if artifact is not None and row["scheme"] == "w8a8":
            row["runtime_float_ops"] = float_compute_ops(artifact)
    elif target.suffix in (".tflite", ".onnx"):
        row["runtime"] = runtime_check(target, calib, io=printed.get("layout"))
        if (printed.get("layout") or {}).get("changed"):
            row["layout"] = printed["layout"]["inputs"]
    return row


def run(entries: list[Entry], steps: list[str], workdir: Path, limit: int, redo: bool,
        stop_at: float | None) -> dict:
    record = json.loads(RESULT.read_text()) if RESULT.exists() else {}  # --redo: only
    # the steps and models named run again; the rest of the record stays
    models = record.setdefault("models", {})
    for e in entries:
        calib = workdir / "calib" / f"{e.name}.npz"
        if not calib.exists():
            write_calib([e], calib.parent, CALIB_SAMPLES)
        flags = _input_shapes(e, calib) if calib.exists() else []
        out = workdir / "real" / e.name
        out.mkdir(parents=True, exist_ok=True)
        row = models.setdefault(e.name, {})
        row.update({"package": f"{e.package}=={e.version}", "format": e.fmt, "task": e.task,
                    "file": e.relpath, "input_shape_flags": flags})
        if e.pinned:
            row["input_value_flags"] = input_value_flags(e)
        commands = _commands(e, calib, flags, out)
        for step in steps:
            if step in row and not redo:
                continue
            if stop_at and time.time() > stop_at:
                break
            row[step] = _step(e, step, commands[step], out, calib, limit)
            print(f"{e.name:26s} {step:8s} {row[step]['outcome']:14s} "
                  f"{row[step]['wall_s']:7.1f} s {row[step]['peak_rss_mib'] or 0:6d} MiB "
                  f"{row[step].get('runtime', '')[:20]:20s} {row[step]['detail'][:110]}",
                  flush=True)
            record.update({"package_versions": package_versions(), "machine": machine_info(),
                           "git": git_state(), "limit_s": limit,
                           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            RESULT.write_text(json.dumps(record, indent=1))
    return record


def _cell(row: dict | None) -> str:
    if not row:
        return "—"
    if row["outcome"] == "ok":
        runtime = row.get("runtime", "ok")
        if runtime != "ok":
            return "**refused by runtime**"
        figures = row.get("compression") or row.get("validation") or {}
        sqnr = figures.get("worst_sqnr_db", figures.get("sqnr_db"))
        worst = "worst output " if len(figures.get("outputs") or ()) > 1 else ""
        warned = sqnr is not None and sqnr < 15 if "compression" in row else \
            bool(figures.get("warnings"))
        return "ok" if sqnr is None else \
            f"ok ({worst}{sqnr:.1f} dB{', warned' if warned else ''})"
    return {"error": "error", "slow": "slow"}.get(row["outcome"], f"**{row['outcome']}**")


def summary(record: dict) -> dict:
    """Counts per step: ok, clear errors, internal errors, refused artifacts, float islands."""
    counts = {}
    for step in STEPS:
        rows = [m[step] for m in record["models"].values() if step in m]
        ok = [r for r in rows if r["outcome"] == "ok"]
        counts[step] = {
            "run": len(rows), "ok": sum(r.get("runtime", "ok") == "ok" for r in ok),
            "clear_error": sum(r["outcome"] == "error" for r in rows),
            "internal": sum(r["outcome"] in ("internal error", "crash") for r in rows),
            "slow": sum(r["outcome"] == "slow" for r in rows),
            "refused_after_write": sum(r.get("runtime", "ok") != "ok" for r in ok),
            "silent_float_islands": sum(1 for r in ok if _silent_islands(r)),
        }
    return counts


def _silent_islands(row: dict) -> bool:
    """A w8a8 artifact in which LiteRT finds float ops that the manifest does not list."""
    found = row.get("runtime_float_ops") or []
    listed = row.get("float_ops") or []
    return len(found) > len(listed)


def table(record: dict) -> str:
    lines = ["| model | wheel | task | " + " | ".join(STEPS) + " | worst output SQNR (pixel) |",
             "|---|---|---|" + "---|" * len(STEPS) + "---|"]
    for name, m in record["models"].items():
        sqnrs = [o["sqnr_db"] for o in (m.get("pixel") or {}).get("outputs") or []
                 if o.get("sqnr_db") is not None and not o.get("unjudged")]
        worst = f"{min(sqnrs):.1f} dB" if sqnrs else "—"
        lines.append(f"| {name} | {m['package']} | {m['task']} | "
                     + " | ".join(_cell(m.get(s)) for s in STEPS) + f" | {worst} |")
    counts = summary(record)
    lines += ["", "| step | run | ok | clear error | internal | slow | refused after write "
              "| silent float islands |", "|---|---|---|---|---|---|---|---|"]
    for step, c in counts.items():
        lines.append(f"| {step} | {c['run']} | {c['ok']} | {c['clear_error']} | "
                     f"{c['internal']} | {c['slow']} | {c['refused_after_write']} | "
                     f"{c['silent_float_islands']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="model names (default: the whole zoo)")
    parser.add_argument("--steps", nargs="*", choices=STEPS, default=list(STEPS))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/zoo"))
    parser.add_argument("--limit", type=int, default=900, help="seconds per command")
    parser.add_argument("--redo", action="store_true",
                        help="run the named steps again for the named models")
    parser.add_argument("--stop-at", help="UTC HH:MM after which no command starts")
    parser.add_argument("--table", action="store_true", help="print the markdown table")
    parser.add_argument("--rewrites-table", action="store_true",
                        help="print the rewrite step's delegation before/after table")
    args = parser.parse_args(argv)
    if args.table or args.rewrites_table:
        record = json.loads(RESULT.read_text())
        print(table(record) if args.table else rewrites_table(record))
        return 0
    entries = [BY_NAME[n] for n in args.only] if args.only else list(ZOO)
    stop = None
    if args.stop_at:
        hh, mm = map(int, args.stop_at.split(":"))
        now = dt.datetime.now(dt.UTC)
        stop = now.replace(hour=hh, minute=mm, second=0).timestamp()
    record = run(entries, args.steps, args.workdir, args.limit, args.redo, stop)
    print(json.dumps(summary(record), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
