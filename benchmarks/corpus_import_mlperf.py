"""Import MLPerf Mobile single-stream latencies into the measurement corpus.

Reads every ``closed/**/result.json`` (``results.json`` before v4.0; v3.0 is the oldest
format read) of local git mirrors of MLCommons' ``mobile_results_vX.Y`` repositories and
writes ``devices/measurements/mlperf_mobile.csv``:

    python benchmarks/corpus_import_mlperf.py \
        mlcommons/mobile_results_v3.0=MIRROR_v3.0.git ... \
        mlcommons/mobile_results_v5.0=MIRROR_v5.0.git

Only SingleStream runs (batch 1) are kept: Offline runs are batched throughput runs, and the
stable-diffusion task times a whole multi-step generation. latency_ms is loadgen's mean;
the note carries its 90th percentile, MLPerf's reported metric.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from corpus_import_aihub import git_out, git_show, write_rows

# ro.soc.model -> chip; the codes are the vendors' part numbers.
SOCS = {
    "SM8650": "Snapdragon 8 Gen 3", "SM8635": "Snapdragon 8s Gen 3",
    "SM7550": "Snapdragon 7 Gen 3", "SM7635": "Snapdragon 7s Gen 3",
    "SM8750": "Snapdragon 8 Elite", "s5e9945": "Exynos 2400",
    "SM8550": "Snapdragon 8 Gen 2", "SM7475": "Snapdragon 7+ Gen 2", "SM4450": "Snapdragon 4 Gen 2",
}
# A Qualcomm reference board reports ro.soc.model "QRD"; its submission folder names the chip.
FOLDER_SOCS = {"SD7PG2": "SM7475"}
# benchmark_id -> (model, family, input shape where the model file names it)
TASKS = {
    "image_classification": ("mobilenet_edgetpu_224_1.0", "mobilenet", "1x224x224x3"),
    "image_classification_v2": ("mobilenet_v4", "mobilenet", ""),
    "object_detection": ("ssd_mobiledet", "mobiledet", ""),
    "image_segmentation_v2": ("mosaic", "mosaic", ""),
    "natural_language_processing": ("mobilebert", "bert", ""),
    "super_resolution": ("edsr", "edsr", ""),
}
RUNTIMES = {"SNPE": "snpe", "QNN": "qnn", "ENN": "enn"}
# accelerator_desc -> (compute unit, delegate); SNPE's "DSP" and "HTP" are the Hexagon NPU.
UNITS = {"HTP": ("npu", "qnn-htp"), "DSP": ("npu", "qnn-htp"), "NPU": ("npu", "enn-npu"),
         "CPU": ("cpu", "cpu"), "GPU": ("gpu", "gpu")}


def soc_and_device(env: dict, folder: str) -> tuple[str, str, str] | None:
    """(chip, device, chip code) of an Android result; None for another platform."""
    android = (env.get("value") or {}).get("android")
    if not android:
        return None
    props = {p["type"]: p["value"] for p in android["props"]}
    code = props.get("socName", "")
    if code not in SOCS:
        code = FOLDER_SOCS.get(folder, code)
    return SOCS.get(code, code), f"{android['manufacturer']} {android['model_name']}", code


def precision_of(submitter: str, settings: dict) -> tuple[str, str]:
    """Qualcomm's Calibration.md says its models are INT8 post-training quantized; Samsung's
    files give only the input type, so their compute precision stays unknown."""
    if submitter == "Qualcomm_Innovation_Center":
        return "int8", "INT8 post-training quantization (submitter's Calibration.md)"
    itype = {e["id"]: e["value"] for e in settings["extra_settings"]}.get("i_type", "")
    return "unknown", f"input type {itype}" if itype else "not stated"


def _latency(run: dict) -> tuple[float, str]:
    """Mean latency in ms; files before v4.0 give only the single-stream throughput, whose
    inverse is the mean latency (single-stream issues one query as the last one ends)."""
    loadgen = run.get("loadgen")
    if loadgen:
        return loadgen["latency_mean"] * 1000, f"p90 {loadgen['latency90'] * 1000:.4g} ms"
    qps = run["throughput"]["value"]
    return 1000 / qps, f"1000 / throughput {qps:.4g} queries/s (the file gives no latency)"


def result_rows(repo: str, git_dir: Path, sha: str, path: str) -> list[dict]:
    data = json.loads(git_show(git_dir, sha, path))
    if not isinstance(data, dict):
        sys.exit(f"corpus_import_mlperf: error: {path}: the pre-v3.0 results format is not read")
    found = soc_and_device(data["environment_info"], path.split("/")[-2])
    if found is None:
        print(f"skipped {path}: not an Android result", file=sys.stderr)
        return []
    soc, device, code = found
    submitter = path.split("/")[1]
    rows = []
    for result in data["results"]:
        run, settings = result["performance_run"], result["backend_settings"]
        task = TASKS.get(result["benchmark_id"])
        if task is None or result["loadgen_scenario"] != "SingleStream" or not run:
            continue
        latency, detail_note = _latency(run)
        runtime = RUNTIMES[settings["framework"]]
        unit, delegate = UNITS[settings["accelerator_desc"].upper()]
        precision, label = precision_of(submitter, settings)
        model_file = settings["model_path"].split("/")[-1].rstrip("]")
        detail = f"{settings.get('delegate', settings['accelerator_code'])} "
        detail += f"({settings['accelerator_desc']}), {model_file}"
        rows.append({
            "model": task[0], "model_family": task[1], "input_shape": task[2],
            "precision": precision, "precision_label": label, "device": device, "soc": soc,
            "runtime": runtime, "runtime_detail": detail,
            "delegate": delegate, "compute_unit": unit, "threads": "",
            "latency_ms": f"{latency:.4g}", "layers_npu": "",
            "layers_gpu": "", "layers_cpu": "", "source": f"github:{repo}@{sha}:{path}",
            "date": data["meta"]["creation_date"][:10],
            "note": f"MLPerf Mobile {result['benchmark_id']} SingleStream; {detail_note}; "
            f"{submitter}; ro.soc.model {code}",
        })
    return rows


def mirror_rows(repo: str, git_dir: Path) -> list[dict]:
    sha = git_out(git_dir, "rev-parse", "HEAD")
    names = git_out(git_dir, "ls-tree", "-r", "--name-only", sha).splitlines()
    results = [name for name in names if name.startswith("closed/")
               and name.endswith(("/result.json", "/results.json"))]
    return [row for name in results for row in result_rows(repo, git_dir, sha, name)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mirrors", nargs="+", metavar="OWNER/NAME=GIT_DIR",
                        help="a mobile_results repository and the git directory of its mirror")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent.parent
                        / "devices/measurements/mlperf_mobile.csv")
    args = parser.parse_args(argv)
    rows = []
    for mirror in args.mirrors:
        repo, sep, git_dir = mirror.partition("=")
        if not sep:
            sys.exit(f"corpus_import_mlperf: error: {mirror!r} is not OWNER/NAME=GIT_DIR")
        rows += mirror_rows(repo, Path(git_dir))
    if not rows:
        sys.exit("corpus_import_mlperf: error: no SingleStream results found")
    write_rows(args.out, rows)


if __name__ == "__main__":
    main()
