"""Import Qualcomm AI Hub's published on-device latencies into the measurement corpus.

Reads every ``qai_hub_models/models/*/perf.yaml`` of a local git mirror of the public
``quic/ai-hub-models`` repository and writes ``devices/measurements/aihub.csv``: one row
per (model, precision, device, runtime path) that AI Hub profiled.

    python benchmarks/corpus_import_aihub.py /path/to/ai-hub-models.git \
        --commit v0.46.1 --extra-commit v0.37.1

``--extra-commit`` adds rows from an older release, only for chipsets that the main commit
no longer measures (the Galaxy S23's Snapdragon 8 Gen 2 left AI Hub's scorecard in 2025);
a proxy board counts as its chip.
The mirror is read with ``git show``; nothing is fetched.
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
from pathlib import Path

import yaml

COLUMNS = (
    "model", "model_family", "input_shape", "precision", "precision_label", "device", "soc",
    "runtime", "runtime_detail", "delegate", "compute_unit", "threads", "latency_ms",
    "layers_npu", "layers_gpu", "layers_cpu", "source", "date", "note",
)
MODELS_DIR = "qai_hub_models/models"
DEVICES_FILE = "qai_hub_models/devices_and_chipsets.yaml"

# AI Hub's profile paths, named as its website names the runtime.
RUNTIMES = {
    "tflite": "tflite", "qnn_dlc": "qnn", "qnn_context_binary": "qnn",
    "onnx": "onnx", "precompiled_qnn_onnx": "onnx",
}
# What runs the layers on the compute unit AI Hub reports, per runtime.
DELEGATES = {
    ("tflite", "npu"): "qnn-htp", ("tflite", "gpu"): "gpu", ("tflite", "cpu"): "cpu",
    ("qnn", "npu"): "qnn-htp", ("qnn", "gpu"): "qnn-gpu", ("qnn", "cpu"): "qnn-cpu",
    ("onnx", "npu"): "qnn-htp", ("onnx", "gpu"): "qnn-gpu", ("onnx", "cpu"): "cpu",
}
QUANTIZED = {"w8a8": "int8", "w8a16": "w8a16", "w16a16": "w16a16", "w4a16": "w4a16"}

# First match wins; a model no pattern matches is its own family.
FAMILIES = (
    (r"^yolo", "yolo"), (r"^(mobilenet|mnasnet)", "mobilenet"), (r"^efficientnet", "efficientnet"),
    (r"^efficientvit", "efficientvit"), (r"^(resnet\d|resnext|wideresnet)", "resnet"),
    (r"^resnet_(2plus1d|3d|mixed)", "video-resnet"), (r"^regnet", "regnet"),
    (r"^(vit|beit|cvt|levit|mobile_vit|efficientformer|sequencer2d)$", "vit"),
    (r"^(convnext)", "convnext"), (r"^(inception|googlenet)", "inception"),
    (r"^(densenet)", "densenet"), (r"^(squeezenet)", "squeezenet"),
    (r"^(shufflenet)", "shufflenet"), (r"^(nasnet)", "nasnet"), (r"^ffnet", "ffnet"),
    (r"detr", "detr"), (r"^(bert|albert|distil_bert|electra|mobile_bert|nomic)", "bert"),
    (r"^whisper", "whisper"), (r"^opus_mt", "marian-mt"), (r"^(depth_anything|midas)", "dpt"),
    (r"^(sam2|mobilesam|fastsam|track_anything)", "sam"), (r"^mediapipe", "mediapipe"),
    # super-resolution models by architecture, not by task: QuickSRNet's three sizes are
    # one network, ESRGAN and Real-ESRGAN x4plus are both RRDBNet; XLSR, SESR and
    # Real-ESRGAN general x4v3 (SRVGGNetCompact) are each their own
    (r"^quicksrnet", "quicksrnet"), (r"^(esrgan|real_esrgan_x4plus)$", "rrdbnet"),
    (r"^(hrnet|litehrnet)", "hrnet"), (r"^(deeplab|fcn|pspnet)", "deeplab"),
    (r"^(stable_diffusion|controlnet)", "stable-diffusion"), (r"^centernet", "centernet"),
    (r"^(bevdet|bevfusion|centerpoint|gkt)", "bev-3d"),
    (r"^(ddrnet|pidnet|bisenet)", "realtime-seg"), (r"^segformer", "segformer"),
)


def git_show(git_dir: Path, commit: str, path: str) -> str:
    """Text of ``path`` at ``commit``; exits with one line naming it when git fails."""
    done = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
                          capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"corpus_import_aihub: error: cannot read {path} at {commit}: "
                 f"{done.stderr.strip()}")
    return done.stdout


def git_out(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True,
                          text=True, check=True).stdout.strip()


def model_family(model_id: str) -> str:
    for pattern, family in FAMILIES:
        if re.search(pattern, model_id):
            return family
    return model_id


def precision_of(label: str, unit: str) -> str:
    """Numeric format the device ran: AI Hub's 'float' runs in fp16 on the NPU and GPU.

    AI Hub's older perf.yaml schema (before 2025) wrote ``precision: fp16`` on every
    NPU/GPU entry of a float model; on the CPU it stays fp32.
    """
    if label == "float":
        return "fp32" if unit == "cpu" else "fp16"
    return QUANTIZED.get(label, label)


def soc_names(git_dir: Path, commit: str) -> dict[str, str]:
    """Device name -> SoC marketing name, from AI Hub's own device table."""
    table = yaml.safe_load(git_show(git_dir, commit, DEVICES_FILE))
    chips = {key: chip["marketing_name"].replace("®", "").removesuffix(" Mobile").strip()
             for key, chip in table["chipsets"].items()}
    return {name: chips.get(dev["chipset"], dev["chipset"])
            for name, dev in table["devices"].items()}


def input_size(git_dir: Path, commit: str, model_id: str) -> str:
    info = yaml.safe_load(git_show(git_dir, commit, f"{MODELS_DIR}/{model_id}/info.yaml"))
    size = (info.get("technical_details") or {}).get("Input resolution")
    return str(size).strip() if size else ""


def entry_row(ctx: dict, precision_label: str, device: str, path: str, entry: dict) -> dict:
    unit = str(entry.get("primary_compute_unit") or "").lower()
    runtime = RUNTIMES[path]
    layers = entry.get("layer_counts") or {}
    versions = entry.get("tool_versions") or {}
    note = f"AI Hub job {entry.get('job_id')}; " + ", ".join(
        f"{tool} {ver}" for tool, ver in sorted(versions.items()))
    return {
        "model": ctx["model"], "model_family": ctx["family"], "input_shape": ctx["input"],
        "precision": precision_of(precision_label, unit), "precision_label": precision_label,
        "device": device, "soc": ctx["socs"].get(device, ""), "runtime": runtime,
        "runtime_detail": path, "delegate": DELEGATES[(runtime, unit)], "compute_unit": unit,
        "threads": "", "latency_ms": f"{float(entry['inference_time_milliseconds']):g}",
        "layers_npu": layers.get("npu", 0), "layers_gpu": layers.get("gpu", 0),
        "layers_cpu": layers.get("cpu", 0), "source": ctx["source"], "date": ctx["date"],
        "note": note,
    }


def perf_rows(git_dir: Path, commit: str, model_id: str, socs: dict[str, str]) -> list[dict]:
    """Rows of one perf.yaml; LLM entries (tokens/s, no inference time) are left out."""
    path = f"{MODELS_DIR}/{model_id}/perf.yaml"
    perf = yaml.safe_load(git_show(git_dir, commit, path)) or {}
    if "models" in perf and "precisions" not in perf:
        sys.exit(f"corpus_import_aihub: error: {path} at {commit} has the pre-2025 schema "
                 "(inference_time in microseconds); use a commit from 2025 or later")
    base = {"family": model_family(model_id), "input": input_size(git_dir, commit, model_id),
            "socs": socs, "date": git_out(git_dir, "log", "-1", "--format=%cs", commit, "--", path),
            "source": f"github:quic/ai-hub-models@{commit}:{path}"}
    rows = []
    for label, details in (perf.get("precisions") or {}).items():
        components = details.get("components") or {}
        for name, comp in components.items():
            ctx = dict(base, model=model_id if len(components) == 1 else f"{model_id}:{name}")
            for device, paths in (comp.get("performance_metrics") or {}).items():
                for runtime_path, entry in paths.items():
                    if entry.get("inference_time_milliseconds") is None:
                        continue
                    if entry.get("job_status") != "Passed":
                        continue
                    rows.append(entry_row(ctx, label, device, runtime_path, entry))
    return rows


def commit_rows(git_dir: Path, commit: str) -> list[dict]:
    sha = git_out(git_dir, "rev-parse", f"{commit}^{{commit}}")
    names = git_out(git_dir, "ls-tree", "-r", "--name-only", sha, MODELS_DIR).splitlines()
    model_ids = sorted(n.split("/")[2] for n in names if n.endswith("/perf.yaml"))
    socs = soc_names(git_dir, sha)
    return [row for mid in model_ids for row in perf_rows(git_dir, sha, mid, socs)]


def chip_key(soc: str) -> str:
    """A proxy board ("QCS9075 (Proxy)") measures the same chip as the real one."""
    return soc.removesuffix(" (Proxy)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("git_dir", type=Path, help="git directory of a quic/ai-hub-models mirror")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--extra-commit", action="append", default=[],
                        help="older commit: add its rows for chipsets the main commit lacks")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent.parent / "devices/measurements/aihub.csv")
    args = parser.parse_args(argv)
    rows = commit_rows(args.git_dir, args.commit)
    for extra in args.extra_commit:
        covered = {chip_key(row["soc"]) for row in rows}
        rows += [row for row in commit_rows(args.git_dir, extra)
                 if chip_key(row["soc"]) not in covered]
    write_rows(args.out, rows)


def write_rows(out: Path, rows: list[dict]) -> None:
    """The corpus CSV: the columns devices/corpus.py reads, one row per measurement."""
    with out.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} rows -> {out}")


if __name__ == "__main__":
    main()
