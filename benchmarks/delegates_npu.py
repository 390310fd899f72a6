"""Edge TPU rules and Arm Ethos-U (Vela) placement on the int8 zoo, held against what the
vendors publish.

    python benchmarks/delegates_npu.py [--cache /tmp/zoo]

* Edge TPU: the rule table must hold every op of coral.ai's published table; per model,
  the share the compiler would map (prefix rule) and the first op it cannot map.
* Ethos-U55-256 / U65-512: Vela itself on every int8 model. Checks: our CPU-op count equals
  the "CPU operators = N" line Vela prints; every op type we report on the NPU is in Vela's
  own ``--supported-ops-report`` table. Figures: NPU share, SRAM, flash/DRAM, inference time.

Writes ``benchmarks/results/delegates_npu.json``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import print_table, verdict, write_results
from delegates_zoo import build_zoo

ACCELERATORS = ("ethos-u55-256", "ethos-u65-512")
# coral.ai/docs/edgetpu/models-intro "Supported operations", first published version (all
# runtime versions); tests/test_delegates_docs.py holds the same list and its source.
CORAL_TABLE_V1 = ("LOGISTIC RELU RELU6 RELU_N1_TO_1 TANH ADD MAXIMUM MINIMUM MUL SUB "
                  "AVERAGE_POOL_2D CONCATENATION CONV_2D DEPTHWISE_CONV_2D FULLY_CONNECTED "
                  "L2_NORMALIZATION MAX_POOL_2D MEAN PAD RESHAPE RESIZE_BILINEAR "
                  "RESIZE_NEAREST_NEIGHBOR SLICE SOFTMAX SPACE_TO_DEPTH SPLIT SQUEEZE "
                  "STRIDED_SLICE").split()


def vela_supported_types() -> set[str]:
    """Op types in Vela's own U55/U65 summary table (``vela --supported-ops-report``)."""
    from edgeopt.delegates.vela import vela_command

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([*vela_command(), "--supported-ops-report"], cwd=tmp, check=True,
                       capture_output=True)
        report = (Path(tmp) / "SUPPORTED_OPS.md").read_text()
    section = report.split("## Ethos-U55 and Ethos-U65 TFLite Summary Table")[1].split("\n## ")[0]
    return set(re.findall(r"^\| ([A-Z0-9_]+) \|", section, flags=re.M))


def edgetpu_row(name: str, data: bytes) -> dict:
    from edgeopt.delegates import place

    placement = place(data, "edgetpu")
    first = next((op for op in placement.fallbacks() if op.rule != "after_first_unsupported"),
                 None)
    return {"model": name, "ops": len(placement.ops), "tpu_ops": placement.delegated_ops,
            "first_cpu_op": f"#{first.index} {first.op}" if first else None,
            "reason": first.short_reason if first else None}


def ethosu_row(name: str, data: bytes, accelerator: str, supported: set[str]) -> dict:
    from edgeopt.delegates.ethosu import placement_from_run
    from edgeopt.delegates.vela import run_vela, system_for

    system, memory = system_for(accelerator)
    start = time.perf_counter()
    run = run_vela(data, accelerator, system, memory)
    seconds = time.perf_counter() - start
    placement = placement_from_run(data, run, accelerator, system, memory)
    velas_cpu = int(re.search(r"CPU operators = (\d+)", run.stdout).group(1))
    npu_types = {op.op for op in placement.ops if op.unit == "npu"}
    figures = placement.compiler
    return {"model": name, "accelerator": accelerator, "ops": len(placement.ops),
            "npu_ops": placement.delegated_ops, "cpu_ops": placement.cpu_ops,
            "vela_cpu_ops": velas_cpu, "cpu_count_agrees": placement.cpu_ops == velas_cpu,
            "unlisted_npu_types": sorted(npu_types - supported),
            "sram_kib": figures["sram_kib"],
            "flash_or_dram_kib": (figures["off_chip_flash_kib"] or 0) + (figures["dram_kib"] or 0),
            "inference_ms": figures["inference_ms"], "vela_s": round(seconds, 2),
            "top_fallback": placement.top_reasons(1)[0][0] if placement.cpu_ops else None}


def run(zoo: dict[str, Path]) -> dict:
    from edgeopt.delegates import load_delegate_rules

    table = load_delegate_rules("edgetpu").ops
    missing = [op for op in CORAL_TABLE_V1 if op not in table]
    supported = vela_supported_types()
    models = {n: p.read_bytes() for n, p in zoo.items() if n.endswith("_int8")}
    edgetpu = [edgetpu_row(n, d) for n, d in models.items()]
    ethosu = [ethosu_row(n, d, acc, supported) for acc in ACCELERATORS
              for n, d in models.items()]
    return {"coral_table_ops": len(CORAL_TABLE_V1), "coral_ops_missing": missing,
            "edgetpu": edgetpu, "ethosu": ethosu,
            "ethosu_cpu_counts_agree": all(r["cpu_count_agrees"] for r in ethosu),
            "ethosu_npu_types_listed_by_vela": all(not r["unlisted_npu_types"] for r in ethosu)}


def report(result: dict) -> None:
    missing = result["coral_ops_missing"]
    print(f"Edge TPU table vs coral.ai's published table: "
          f"{result['coral_table_ops'] - len(missing)}/{result['coral_table_ops']} ops present "
          f"{verdict(not missing)}\n")
    print_table(["model", "ops", "on TPU", "first CPU op", "reason"],
                [[r["model"], r["ops"], r["tpu_ops"], r["first_cpu_op"] or "-",
                  r["reason"] or "-"] for r in result["edgetpu"]])
    print()
    print_table(["model", "accelerator", "ops", "NPU", "CPU", "Vela CPU", "SRAM KiB",
                 "flash/DRAM KiB", "ms", "top fallback"],
                [[r["model"], r["accelerator"], r["ops"], r["npu_ops"], r["cpu_ops"],
                  r["vela_cpu_ops"], r["sram_kib"], round(r["flash_or_dram_kib"], 1),
                  r["inference_ms"], r["top_fallback"] or "-"] for r in result["ethosu"]])
    print(f"\nEthos-U: our CPU-op count equals Vela's own: "
          f"{verdict(result['ethosu_cpu_counts_agree'])}; every NPU op type is in Vela's "
          f"supported-ops table: {verdict(result['ethosu_npu_types_listed_by_vela'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, help="zoo folder to reuse (default: temporary)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edgeopt-zoo-") as tmp:
        zoo = build_zoo(args.cache or Path(tmp), log=lambda m: print(m, file=sys.stderr))
        result = run(zoo)
    report(result)
    path = write_results("delegates_npu", result)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
