"""Import Synaptics SyNAP's published inference timings into the measurement corpus.

Reads the benchmark tables (``manual/benchmark/test_report_*.rst``) of a local git mirror
of the public ``synaptics-synap/doc`` repository and writes
``devices/measurements/synaptics.csv``:

    python benchmarks/corpus_import_synap.py MIRROR.git

Per model and board it keeps four timings: TFLite on the CPU (4 threads), TFLite with the
GPU delegate, TFLite with the NPU through the TIM-VX delegate ("online"), and the SyNAP
runtime with the model compiled offline; the init times are left out. Synaptics'
proprietary models (format conversion, super-resolution, ``mobilenet224_full*``) are left
out: their architecture is not published, so no stand-in can be built for them.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from corpus_import_aihub import git_out, git_show, write_rows

BOARDS = {"vs680": ("Synaptics VS680 / SL1680 board", "Synaptics VS680"),
          "vs640": ("Synaptics VS640 / SL1640 board", "Synaptics VS640")}
# Table column -> (runtime, runtime_detail, delegate, compute unit, threads)
TIMINGS = {
    1: ("tflite", "benchmark_model --num_threads=4 (online)", "cpu", "cpu", "4"),
    2: ("tflite", "GPU delegate (online)", "gpu", "gpu", ""),
    4: ("tflite", "TIM-VX external delegate libvx_delegate.so (online)", "timvx", "npu", ""),
    6: ("synap", "SyNAP runtime, compiled offline (median of 10)", "synap-npu", "npu", ""),
}
PROPRIETARY = re.compile(r"^(convert_|sr_|mobilenet224_full)")
FAMILIES = (
    (r"^(mobilenet|mv3|posenet_mobilenet)", "mobilenet"), (r"^inception", "inception"),
    (r"^yolo", "yolo"), (r"^(deeplab)", "deeplab"), (r"^(efficientnet)", "efficientnet"),
    (r"^esrgan", "rrdbnet"),   # super-resolution by architecture (as AI Hub's rows)
    (r"^(dped|pynet|punet)", "image-enhance"),
    (r"^resnet", "resnet"), (r"^vgg", "vgg"), (r"^unet", "unet"), (r"^test_", "synthetic-conv"),
)


def family_of(model: str) -> str:
    """The model's architecture family; a model in none is its own, its float and quant
    files one family."""
    own = re.sub(r"_(float|quant)$", "", model)
    return next((fam for pattern, fam in FAMILIES if re.search(pattern, model)), own)


def precision_of(model: str, unit: str, board: str) -> tuple[str, str]:
    """From the model's name, as the tables give nothing else."""
    if model.endswith("_quant"):
        return "int8", "quant (model name)"
    if model.endswith("_float"):
        # The page: CPU runs of float models on VS640 used --allow_fp16=true; the TFLite GPU
        # delegate runs float models in fp16 unless told otherwise.
        if unit == "gpu" or (unit == "cpu" and board == "vs640"):
            return "fp16", "float (model name), run in fp16"
        return "fp32", "float (model name)"
    return "unknown", "not stated"


def input_of(model: str) -> str:
    match = re.search(r"(\d+)x(\d+)_5_(\d+)_(\d+)$", model)  # test_64_128x128_5_132_132
    if match:
        return f"1x{match[1]}x{match[2]}x{match[3]}"
    match = re.search(r"_([1-9]\d{2})(_quant|_float)$", model) or re.search(r"-(\d+)x(\d+)$", model)
    if match and match.re.pattern.startswith("-"):
        return f"1x{match[2]}x{match[1]}x3"  # yolov5s-640x480: width x height
    return f"1x{match[1]}x{match[1]}x3" if match else ""


def table_rows(text: str) -> list[tuple[str, list[str]]]:
    """(model, cells) of one rst simple table; cells split at the ``=`` column borders."""
    lines = text.splitlines()
    spans = [m.span() for m in re.finditer(r"=+", lines[0])]
    rows = []
    for line in lines[5:]:
        if not line.strip() or line.startswith("="):
            continue
        cells = [line[start:end + 1].strip() if end < len(line) else line[start:].strip()
                 for start, end in spans]
        rows.append((cells[0], cells[1:]))
    return rows


def file_rows(git_dir: Path, sha: str, path: str) -> list[dict]:
    board, suite = re.search(r"test_report_(vs\d+)_(\w+)\.rst$", path).groups()
    # The two AI Benchmark suites reuse names for different networks (other input sizes).
    prefix = f"ai_benchmark_{suite[-1]}:" if suite.startswith("aibench") else ""
    device, soc = BOARDS[board]
    date = git_out(git_dir, "log", "-1", "--format=%cs", sha, "--", path)
    rows = []
    for model, cells in table_rows(git_show(git_dir, sha, path)):
        if PROPRIETARY.match(model):
            continue
        for column, (runtime, detail, delegate, unit, threads) in TIMINGS.items():
            value = cells[column - 1] if column - 1 < len(cells) else ""
            if not value:
                continue
            precision, label = precision_of(model, unit, board)
            rows.append({
                "model": prefix + model, "model_family": family_of(model),
                "input_shape": input_of(model),
                "precision": precision, "precision_label": label, "device": device, "soc": soc,
                "runtime": runtime, "runtime_detail": detail, "delegate": delegate,
                "compute_unit": unit, "threads": threads, "latency_ms": value,
                "layers_npu": "", "layers_gpu": "", "layers_cpu": "",
                "source": f"github:synaptics-synap/doc@{sha}:{path}", "date": date,
                "note": "SyNAP Reference Models timings; online = minimum of runs; "
                        "Android AOSP 64-bit",
            })
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("git_dir", type=Path, help="git directory of a synaptics-synap/doc mirror")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent.parent
                        / "devices/measurements/synaptics.csv")
    args = parser.parse_args(argv)
    sha = git_out(args.git_dir, "rev-parse", "HEAD")
    names = git_out(args.git_dir, "ls-tree", "-r", "--name-only", sha, "manual/benchmark")
    rows = [row for name in sorted(names.splitlines()) if name.endswith(".rst")
            for row in file_rows(args.git_dir, sha, name)]
    if not rows:
        sys.exit("corpus_import_synap: error: no benchmark tables found")
    write_rows(args.out, rows)


if __name__ == "__main__":
    main()
