"""XNNPACK rules vs what the LiteRT interpreter really delegates, over a zoo of models.

    python benchmarks/delegates_xnnpack.py [--cache /tmp/zoo] [--only NAME ...]

Ground truth comes from the interpreter itself (`edgeopt.delegates.probe`): after
``allocate_tensors`` each XNNPACK partition is a ``DELEGATE`` node; an op is delegated when
its outputs are outputs of such a node or intermediates the arena never allocated. Only the
main subgraph is compared (the Python API exposes no per-node view of control-flow bodies).
Target: >= 98 % of ops agree. Prints a table, lists every disagreement, writes
``benchmarks/results/delegates_xnnpack.json``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _common import print_table, verdict, write_results
from delegates_zoo import build_zoo

TARGET = 0.98


def compare(name: str, data: bytes) -> dict:
    """Rules vs interpreter for one model: counts, timings and every disagreement."""
    from edgeopt.delegates import place
    from edgeopt.delegates.probe import xnnpack_delegated_ops

    start = time.perf_counter()
    truth = xnnpack_delegated_ops(data)
    probe_s = time.perf_counter() - start
    start = time.perf_counter()
    placement = place(data, "xnnpack")
    rules_s = time.perf_counter() - start
    main = [op for op in placement.ops if op.subgraph == 0]
    disagreements = [
        {"model": name, "index": op.index, "op": op.op,
         "rules": "xnnpack" if op.unit == "xnnpack" else "cpu",
         "interpreter": "xnnpack" if op.index in truth else "cpu", "reason": op.reason}
        for op in main if (op.unit == "xnnpack") != (op.index in truth)]
    return {"model": name, "ops": len(main), "interpreter_delegated": len(truth),
            "rules_delegated": sum(op.unit == "xnnpack" for op in main),
            "agree": len(main) - len(disagreements), "partitions": len(placement.partitions),
            "rules_ms": round(rules_s * 1000, 1), "probe_ms": round(probe_s * 1000, 1),
            "disagreements": disagreements}


def run(zoo: dict[str, Path]) -> dict:
    rows = [compare(name, path.read_bytes()) for name, path in zoo.items()]
    ops = sum(r["ops"] for r in rows)
    agree = sum(r["agree"] for r in rows)
    return {"models": len(rows), "ops": ops, "agree": agree,
            "agreement": agree / ops if ops else 0.0, "target": TARGET, "per_model": rows,
            "disagreements": [d for r in rows for d in r["disagreements"]]}


def report(result: dict) -> None:
    print_table(
        ["model", "ops", "interpreter", "rules", "agree", "%", "partitions", "rules ms"],
        [[r["model"], r["ops"], r["interpreter_delegated"], r["rules_delegated"], r["agree"],
          f"{100 * r['agree'] / r['ops']:.1f}" if r["ops"] else "-", r["partitions"],
          r["rules_ms"]] for r in result["per_model"]])
    print(f"\nagreement: {result['agree']}/{result['ops']} ops = "
          f"{100 * result['agreement']:.2f}% over {result['models']} models "
          f"(target >= {100 * TARGET:.0f}%): {verdict(result['agreement'] >= TARGET)}")
    for d in result["disagreements"]:
        print(f"  {d['model']} #{d['index']} {d['op']}: rules {d['rules']}, "
              f"interpreter {d['interpreter']} ({d['reason'] or 'no reason'})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, help="zoo folder to reuse (default: temporary)")
    parser.add_argument("--only", nargs="*", help="zoo entries to compare (default: all)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edgeopt-zoo-") as tmp:
        folder = args.cache or Path(tmp)
        start = time.perf_counter()
        zoo = build_zoo(folder, args.only, log=lambda m: print(m, file=sys.stderr))
        build_s = time.perf_counter() - start
        result = run(zoo)
    report(result)
    result["zoo_build_s"] = round(build_s, 1)
    path = write_results("delegates_xnnpack", result)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
