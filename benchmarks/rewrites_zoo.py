"""Issue 16 item 1 on the real-model zoo: the rewrite step's effect per device.

For each device and each zoo model (benchmarks/zoo.py): `edgeopt build MODEL --device D`
with the rewrite step on. The manifest's `rewrites` record holds the placement before the
step (the build `--no-rewrite` ships: same quantization, same seed) and after it, and the
worst-output SQNR of both on the held-out samples; a build whose placement names no
fallback the catalogue answers has no record, and then before = after = its placement.
`--check-off` also runs the `--no-rewrite` build of each model that had a record and
compares its placement with the record's "before".

    python benchmarks/rewrites_zoo.py --workdir /work/zoo/h7 --devices snapdragon-npu \\
        pixel-gpu ethos-u55-256 --stop-at 20:30
    python benchmarks/rewrites_zoo.py --table            # the BENCHMARKS.md table

Models run fastest first (by their last pixel-npu build time in real_models.json), every
model for one device before the next device. Results go to
benchmarks/results/rewrites_zoo.json after every build (a stopped run keeps what it
measured; a second run fills in what is missing, `--redo` runs again).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from _common import RESULTS_DIR, edgeopt_command, git_state, machine_info, package_versions
from real_models import RESULT as REAL_RESULT
from real_models import TASKS
from zoo import ZOO, Entry, _input_shapes, _timed, failure_class, input_value_flags

RESULT = RESULTS_DIR / "rewrites_zoo.json"
DEVICES = ("snapdragon-npu", "pixel-gpu", "ethos-u55-256")


def _order(entries: list[Entry]) -> list[Entry]:
    """Fastest first: the last pixel-npu build's wall time (unknown or failed: last)."""
    try:
        rows = json.loads(REAL_RESULT.read_text())["models"]
    except (OSError, ValueError, KeyError):
        rows = {}

    def cost(e: Entry) -> float:
        pixel = (rows.get(e.name) or {}).get("pixel") or {}
        return pixel.get("wall_s", 1e6) if pixel.get("outcome") == "ok" else 1e6

    return sorted(entries, key=cost)


def _command(e: Entry, device: str, calib: Path, out: Path, off: bool) -> list[str]:
    # the pinned inputs too (silero_vad's sample rate): without them the build refuses
    flags = _input_shapes(e, calib) + input_value_flags(e)
    task = ["--task", TASKS[e.task]] if e.task in TASKS else []
    return ["build", str(e.path()), "--device", device, "--calib", str(calib), *flags, *task,
            *(["--no-rewrite"] if off else []), "-o", str(out), "--json"]


def _placement(manifest: dict) -> dict:
    placed = manifest.get("placement") or {}
    delegated, cpu = placed.get("delegated_ops", 0), placed.get("cpu_ops", 0)
    ops = delegated + cpu
    partitions = placed.get("partitions")
    return {"delegated_ops": delegated, "ops": ops,
            "share": round(delegated / ops, 4) if ops else 0.0,
            "partitions": len(partitions) if isinstance(partitions, list) else partitions}


def _worst_sqnr(manifest: dict) -> float | None:
    outputs = (manifest.get("validation") or {}).get("outputs") or []
    values = [o["sqnr_db"] for o in outputs if o.get("sqnr_db") is not None]
    return round(min(values), 2) if values else None


def _figures(manifest: dict) -> dict:
    """Delegation and worst-output SQNR before and after the rewrite step."""
    shipped, sqnr = _placement(manifest), _worst_sqnr(manifest)
    record = manifest.get("rewrites")
    if not record:
        return {"tried": [], "kept": None, "reason": "no fallback the catalogue answers",
                "before": shipped, "after": shipped, "sqnr_before_db": sqnr,
                "sqnr_after_db": sqnr}
    accuracy = record.get("accuracy") or {}
    return {"tried": record["tried"], "kept": record["kept"], "reason": record["reason"],
            "applied": [{k: a[k] for k in ("name", "changed", "float_max_rel_error", "kept")}
                        for a in record.get("applied", [])],
            "before": record["before"], "after": record.get("after") or record["before"],
            "sqnr_before_db": accuracy.get("before_worst_sqnr_db", sqnr),
            "sqnr_after_db": accuracy.get("after_worst_sqnr_db", sqnr),
            "shipped": shipped}


def _build(e: Entry, device: str, calib: Path, out: Path, limit: int, off: bool) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    row = _timed(["nice", "-n", "10", *edgeopt_command(),
                  *_command(e, device, calib, out, off)], limit)
    row["failure_class"] = failure_class(row)
    row.pop("stdout_tail", None)
    if row["outcome"] == "ok":
        try:
            manifest = json.loads((out / "manifest.json").read_text())
        except (OSError, ValueError):
            return {**row, "outcome": "no manifest"}
        row.update(_figures(manifest) if not off else {"shipped": _placement(manifest)})
    return row


def _source() -> dict:
    """Which edgeopt the builds imported (a snapshot on PYTHONPATH, or this checkout)."""
    # from "/": `python -c` puts the working directory first on sys.path, and from a
    # checkout that finds the checkout's edgeopt, not the snapshot the builds import
    proc = subprocess.run(["python", "-c", "import edgeopt; print(edgeopt.__file__)"],
                          capture_output=True, text=True, env=os.environ, cwd="/")
    path = proc.stdout.strip()
    commit = Path(path).parent.parent.parent / "src" / "COMMIT" if path else None
    return {"edgeopt_module": path, "pythonpath": os.environ.get("PYTHONPATH"),
            "snapshot_commit": commit.read_text().strip() if commit and commit.exists()
            else None}


def run(devices: list[str], entries: list[Entry], workdir: Path, limit: int, redo: bool,
        stop_at: float | None, check_off: bool) -> dict:
    record = json.loads(RESULT.read_text()) if RESULT.exists() else {}
    source = _source()
    record.update({"package_versions": package_versions(), "machine": machine_info(),
                   "git": git_state(), "source": source, "limit_s": limit})
    for device in devices:
        rows = record.setdefault("devices", {}).setdefault(device, {})
        for e in entries:
            if stop_at and time.time() > stop_at:
                return record
            calib = workdir / "calib" / f"{e.name}.npz"
            if not calib.exists() or (e.name in rows and not redo):
                continue
            out = workdir / "rewrites" / device / e.name
            row = _build(e, device, calib, out, limit, off=False)
            if check_off and row["outcome"] == "ok" and row.get("kept") is not None:
                off = _build(e, device, calib, out.with_name(e.name + "_off"), limit, True)
                row["no_rewrite_build"] = {k: off.get(k) for k in
                                           ("outcome", "detail", "wall_s", "shipped")}
            # the top-level "source" is the last run's: each row keeps the snapshot it ran
            row["snapshot_commit"] = source["snapshot_commit"]
            row["started_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                               time.gmtime(time.time() - row["wall_s"]))
            rows[e.name] = row
            print(f"{device:15s} {e.name:26s} {row['outcome']:9s} {row['wall_s']:7.1f} s "
                  f"{_cell(row)[:90]}", flush=True)
            record["date_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            RESULT.write_text(json.dumps(record, indent=1))
    return record


def _cell(row: dict) -> str:
    if row.get("outcome") != "ok":
        return row.get("detail", "")
    b, a = row["before"], row["after"]
    return (f"{b['share']:.0%}/{b['partitions']}p → {a['share']:.0%}/{a['partitions']}p "
            f"{row['sqnr_before_db']} → {row['sqnr_after_db']} dB "
            f"{','.join(row['tried']) or '-'} kept={row['kept']}")


def _db(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"  # None: no SQNR (identical, or no values)


def summary(record: dict) -> list[str]:
    """One line per device: builds, ops on the delegate and partitions summed over the
    models built, before → after (as shipped: a candidate not kept counts as before),
    rewrites kept, and the worst-SQNR change where kept."""
    lines = ["| device | models run | builds ok | step tried / kept | ops on delegate before → "
             "after | partitions before → after | worst SQNR change where kept, dB |",
             "|---|---|---|---|---|---|---|"]
    for device, rows in record.get("devices", {}).items():
        built = [r for r in rows.values() if r.get("outcome") == "ok"]
        ops = sum(r["before"]["ops"] for r in built)
        before = sum(r["before"]["delegated_ops"] for r in built)
        # "after" is what ships: a rewritten candidate the step did not keep counts as before
        shipped = [r["after"] if r.get("kept") else r["before"] for r in built]
        after = sum(a["delegated_ops"] for a in shipped)
        after_ops = sum(a["ops"] for a in shipped)
        parts = [sum(r["before"]["partitions"] or 0 for r in built),
                 sum(a["partitions"] or 0 for a in shipped)]
        kept = [r for r in built if r.get("kept")]
        changes = [r["sqnr_after_db"] - r["sqnr_before_db"] for r in kept
                   if r["sqnr_after_db"] is not None and r["sqnr_before_db"] is not None]
        change = (f"{min(changes):+.2f} to {max(changes):+.2f}" if changes else "—")
        lines.append(f"| {device} | {len(rows)} | {len(built)} | "
                     f"{sum(1 for r in built if r['tried'])} / {len(kept)} | "
                     f"{before}/{ops} ({before / max(ops, 1):.1%}) → {after}/{after_ops} "
                     f"({after / max(after_ops, 1):.1%}) | {parts[0]} → {parts[1]} | {change} |")
    return [*lines, ""]


def table(record: dict) -> str:
    """Per device: share of ops on the delegate, partitions and worst SQNR, before → after."""
    lines = summary(record)
    for device, rows in record.get("devices", {}).items():
        built = {n: r for n, r in rows.items() if r.get("outcome") == "ok"}
        tried = {n: r for n, r in built.items() if r["tried"]}
        kept = [n for n, r in tried.items() if r["kept"]]
        lines += [f"**{device}**: {len(rows)} of the zoo's {len(ZOO)} models run before the "
                  f"stop, {len(built)} built; the step tried rewrites on {len(tried)}, kept "
                  f"them on {len(kept)}.", "",
                  "| model | rewrites tried | ops on delegate before → after | partitions | "
                  "worst SQNR dB before → after | kept | snapshot |",
                  "|---|---|---|---|---|---|---|"]
        for name, row in sorted(rows.items()):
            snapshot = row.get("snapshot_commit") or "—"  # the edgeopt that built it
            if row.get("outcome") != "ok":
                lines.append(f"| {name} | — | build {row['outcome']}: "
                             f"{row.get('detail', '')[:80]} | | | | {snapshot} |")
                continue
            b, a = row["before"], row["after"]
            share = (f"{b['delegated_ops']}/{b['ops']} ({b['share']:.0%}) → "
                     f"{a['delegated_ops']}/{a['ops']} ({a['share']:.0%})")
            kept_cell = ("—" if row["kept"] is None else
                         "yes" if row["kept"] else f"no: {row['reason']}")
            lines.append(f"| {name} | {', '.join(row['tried']) or '—'} | {share} | "
                         f"{b['partitions']} → {a['partitions']} | {_db(row['sqnr_before_db'])} → "
                         f"{_db(row['sqnr_after_db'])} | {kept_cell} | {snapshot} |")
        lines.append("")
    return "\n".join(lines + _cost(record))


def _cost(record: dict) -> list[str]:
    """The step's build-time cost: each build with a rewrite record against its
    `--no-rewrite` build (--check-off), run one after the other on the same machine."""
    pairs = [(device, name, row["wall_s"], row["no_rewrite_build"]["wall_s"], row["kept"])
             for device, rows in record.get("devices", {}).items()
             for name, row in sorted(rows.items())
             if (row.get("no_rewrite_build") or {}).get("outcome") == "ok"]
    if not pairs:
        return []
    lines = ["| device | model | rewrite kept | build s, step on | `--no-rewrite` s | "
             "extra |", "|---|---|---|---|---|---|"]
    for device, name, on, off, kept in pairs:
        lines.append(f"| {device} | {name} | {'yes' if kept else 'no'} | {on:.0f} | "
                     f"{off:.0f} | {on / off - 1:+.0%} |")
    return [*lines, ""]


def _stop_time(text: str | None) -> float | None:
    """--stop-at HH:MM (UTC, today): no build starts after it."""
    if not text:
        return None
    hour, minute = (int(x) for x in text.split(":"))
    now = dt.datetime.now(dt.UTC)
    return now.replace(hour=hour, minute=minute, second=0, microsecond=0).timestamp()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", nargs="+", default=list(DEVICES))
    parser.add_argument("--only", nargs="+", help="zoo model names")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/zoo"))
    parser.add_argument("--limit", type=int, default=600, help="seconds per build")
    parser.add_argument("--stop-at", help="HH:MM UTC: start no build after it")
    parser.add_argument("--redo", action="store_true")
    parser.add_argument("--check-off", action="store_true",
                        help="also run --no-rewrite where the step tried rewrites")
    parser.add_argument("--table", action="store_true", help="print the BENCHMARKS.md table")
    args = parser.parse_args(argv)
    if args.table:
        print(table(json.loads(RESULT.read_text())))
        return 0
    entries = [e for e in ZOO if not args.only or e.name in args.only]
    run(args.devices, _order(entries), args.workdir, args.limit, args.redo,
        _stop_time(args.stop_at), args.check_off)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
