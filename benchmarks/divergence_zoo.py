"""`edgeopt bench --find-divergence` over the zoo's built artifacts: how many op outputs each
way of looking sees, what each does to XNNPACK's partitions, and where XNNPACK first leaves
LiteRT's reference kernels.

    python benchmarks/divergence_zoo.py --artifacts '/work/zoo/lead/real/*/pixel/*.tflite' \\
        --calib /work/zoo/calib --samples 2 --out benchmarks/results/divergence_zoo.json

Each model runs twice through the CLI (`--observe outputs`, `--observe preserve`), on its
zoo calibration inputs (`CALIB/NAME.npz`, NAME the artifact's folder two levels up) when
they exist, else seeded random ones. A model that takes longer than --timeout is recorded
as such (LiteRT's reference kernels are slow on large convolutions).
"""

from __future__ import annotations

import argparse
import glob
import json
import subprocess
import time
from pathlib import Path

from _common import RESULTS_DIR, edgeopt_command, subprocess_env, write_results

MODES = ("outputs", "preserve")


def _run(model: Path, mode: str, calib: Path | None, samples: int, timeout: float) -> dict:
    command = [*edgeopt_command(), "bench", str(model), "--find-divergence", "--observe", mode,
               "--numerics-samples", str(samples), "--json"]
    if calib is not None:
        command += ["--inputs", str(calib)]
    start = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=subprocess_env())
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s", "command": command}
    seconds = round(time.monotonic() - start, 1)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:], "command": command,
                "seconds": seconds}
    return {**_summary(json.loads(done.stdout)), "seconds": seconds, "command": command}


def _summary(record: dict) -> dict:
    first, worst = record["first_divergence"], record["largest_increase"]
    out = [o["error"]["rel_error"] for o in record["outputs"]]
    return {
        "ops": record["ops"], "ops_observed": record["ops_observed"],
        "partitions": record["partitions"],
        "partitions_as_shipped": record["partitions_as_shipped"],
        "first": None if first is None else {
            "index": first["index"], "op": first["op"], "rel_error": first["error"]["rel_error"],
            "max_steps": first["error"]["max_steps"],
            "input_rel_error": first["input_rel_error"], "path_length": len(record["path"])},
        "largest_increase": None if worst is None else {
            "index": worst["index"], "op": worst["op"],
            "added_rel_error": worst["added_rel_error"]},
        "output_rel_error": max(out, key=lambda v: float(v)) if out else None,
    }


def _row(name: str, result: dict) -> str:
    o, p = result["outputs"], result["preserve"]
    if "error" in o:
        return f"{name:<28} {str(o['error'])[:60]}"
    first = o["first"]
    where = "none" if first is None else f"{first['index']} {first['op']} {first['rel_error']:.3g}"
    seen_p = "—" if "error" in p else f"{p['ops_observed']}/{p['ops']}"
    parts_p = "—" if "error" in p else p["partitions"]
    return (f"{name:<28} {o['ops_observed']:>3}/{o['ops']:<3} {seen_p:>7} "
            f"{o['partitions_as_shipped']:>4} {o['partitions']:>4} {parts_p:>4}  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifacts", default="/work/zoo/lead/real/*/pixel/*.tflite")
    parser.add_argument("--calib", type=Path, default=Path("/work/zoo/calib"))
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--only", nargs="*", help="zoo names to run (default: all found)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "divergence_zoo.json")
    args = parser.parse_args()
    models = sorted((Path(p) for p in glob.glob(args.artifacts)), key=lambda p: p.stat().st_size)
    # --only reruns some models: the others' results in --out are kept
    results = json.loads(args.out.read_text())["models"] if args.only and args.out.exists() \
        else {}
    print(f"{'model':<28} {'outputs':>7} {'preserve':>7} {'ship':>4} {'out':>4} {'pres':>4}  "
          "first departing op (rel error)")
    for model in models:
        name = model.parent.parent.name
        if args.only and name not in args.only:
            continue
        calib = args.calib / f"{name}.npz"
        calib = calib if calib.is_file() else None
        results[name] = {"model": str(model), "inputs": str(calib) if calib else "random",
                         **{mode: _run(model, mode, calib, args.samples, args.timeout)
                            for mode in MODES}}
        print(_row(name, results[name]), flush=True)
        write_results(args.out.stem, {"samples": args.samples, "models": results},
                      args.out.parent)


if __name__ == "__main__":
    main()
