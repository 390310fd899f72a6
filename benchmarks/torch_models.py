"""PyTorch models through edgeopt (issue 17): a `.pt2` build next to the same model exported
to ONNX by hand, for pixel-npu (.tflite, w8a8) and host-cpu (.onnx).

    python benchmarks/torch_models.py --workdir /work/zoo/h2 [--only resnet18 ...]

Models: torchvision architectures with seeded random weights (BatchNorm statistics
from four batches of random images), and facenet-pytorch's MTCNN
ONet with the pretrained weights its wheel ships (facenet_pytorch/data/onet.pt). Calibration:
seeded normal images for the random-weight models; for ONet, 40 face crops of skimage's
photographs (benchmarks/zoo.py face_crops), (x - 127.5) / 128 as facenet-pytorch's
detect_face normalises them, NCHW. "by hand" is what a user does without edgeopt's
PyTorch input: `torch.onnx.export(module, (x,), "m.onnx", dynamo=True)`, then
`edgeopt build m.onnx`. Prints a table and writes benchmarks/results/torch_models.json.

`--litert-python VENV/bin/python` adds litert-torch's direct route (benchmarks/litert_route.py,
run in that venv: litert-torch does not install beside constraints.txt): the .pt2 converted
to a float .tflite, checked against the PyTorch program per output, then
`edgeopt build that.tflite` for pixel-npu with the same calibration data.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import numpy as np
from _common import (
    RESULTS_DIR,
    edgeopt_command,
    machine_info,
    package_versions,
    print_table,
    subprocess_env,
)

CALIB_SAMPLES = 32
TARGETS = {"pixel-npu": ["--device", "pixel-npu"],
           "host-cpu-onnx": ["--device", "host-cpu", "--format", "onnx"]}


def _torchvision(name: str):
    """Random weights, with BatchNorm statistics from random images: at their initial
    running statistics (mean 0, variance 1) the activations of a fresh MobileNetV3 shrink to
    ~1e-9 by the logits, and any quantized model of it rightly reads as collapsed."""
    import torch
    import torchvision

    module = getattr(torchvision.models, name)(weights=None)
    module.train()
    with torch.no_grad():
        for _ in range(4):
            module(torch.randn(8, 3, 224, 224))
    return module.eval(), (1, 3, 224, 224)


def _onet():
    from facenet_pytorch.models.mtcnn import ONet

    return ONet(pretrained=True).eval(), (1, 3, 48, 48)


MODELS = {
    "mobilenet_v3_small": lambda: _torchvision("mobilenet_v3_small"),
    "resnet18": lambda: _torchvision("resnet18"),
    "facenet_onet": _onet,
}
PRETRAINED = {"facenet_onet": "facenet-pytorch 2.6.0 (data/onet.pt)"}


def calibration(name: str, shape: tuple[int, ...], path: Path) -> Path:
    if name == "facenet_onet":
        from zoo import face_crops  # the zoo's face crops of skimage's photographs

        crops = face_crops(np.random.default_rng(0), CALIB_SAMPLES + 8, 48, 48)
        data = (np.transpose(np.stack(crops), (0, 3, 1, 2)).astype(np.float32) - 127.5) / 128
    else:
        rng = np.random.default_rng(0)
        data = rng.standard_normal((CALIB_SAMPLES, *shape[1:])).astype(np.float32)
    np.savez(path, x=data)
    return path


def export(name: str, folder: Path) -> tuple[Path, Path, dict]:
    """The .pt2 and the by-hand .onnx of one model."""
    import torch

    torch.manual_seed(0)
    module, shape = MODELS[name]()
    example = (torch.randn(*shape),)
    start = time.monotonic()
    pt2 = folder / f"{name}.pt2"
    torch.export.save(torch.export.export(module, example), pt2)
    seconds = {"pt2_export_s": round(time.monotonic() - start, 1)}
    start = time.monotonic()
    hand = folder / f"{name}_by_hand.onnx"
    torch.onnx.export(module, example, str(hand), dynamo=True, input_names=["x"])
    seconds["onnx_by_hand_export_s"] = round(time.monotonic() - start, 1)
    calibration(name, shape, folder / f"{name}_calib.npz")
    return pt2, hand, seconds


def build(source: Path, target: str, calib: Path, out: Path) -> dict:
    start = time.monotonic()
    proc = subprocess.run([*edgeopt_command(), "build", str(source), *TARGETS[target],
                           "--calib", str(calib), "-o", str(out)],
                          capture_output=True, text=True, env=subprocess_env(), timeout=3600)
    row = {"seconds": round(time.monotonic() - start, 1), "exit": proc.returncode}
    if proc.returncode != 0:
        return {**row, "error": proc.stderr.strip().splitlines()[-1:]}
    manifest = json.loads((out / "manifest.json").read_text())
    return {**row, **_figures(manifest)}


def _figures(manifest: dict) -> dict:
    conversion, validation = manifest["conversion"], manifest["validation"]
    torch_export = conversion.get("torch_export") or {}
    placement = manifest.get("placement") or {}
    ops = (placement.get("delegated_ops") or 0) + (placement.get("cpu_ops") or 0)
    return {
        "torch_export_cosine": (torch_export.get("parity") or {}).get("cosine"),
        "torch_export_max_abs": (torch_export.get("parity") or {}).get("max_abs"),
        "named_layers": torch_export.get("named_layers"),
        "float_parity_cosine": (conversion.get("parity") or {}).get("cosine"),
        "sqnr_db": validation.get("sqnr_db"),
        "outputs": {o["name"]: round(o["sqnr_db"], 2) for o in validation.get("outputs", [])},
        "top1_agreement": validation.get("top1_agreement"),
        "artifact_bytes": manifest["model"]["size_bytes"],
        "delegated": f"{placement.get('delegated_ops')}/{ops}" if placement else None,
        "latency_ms": (manifest.get("estimate") or {}).get("latency_ms"),
        "first_layers": [r.get("layer") for r in
                         (manifest.get("quantization") or {}).get("layer_report", [])[:3]],
    }


def litert(pt2: Path, python: str, calib: Path, workdir: Path) -> dict:
    """litert-torch's route for one model: conversion figures, then the pixel-npu build."""
    tflite = workdir / f"{pt2.stem}_litert.tflite"
    proc = subprocess.run([python, str(Path(__file__).with_name("litert_route.py")), str(pt2),
                           str(tflite)], capture_output=True, text=True, timeout=3600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"exit": proc.returncode, "error": proc.stderr.strip().splitlines()[-1:]}
    converted = json.loads(lines[-1])
    row = build(tflite, "pixel-npu", calib, workdir / f"{pt2.stem}_pixel-npu_litert")
    worst = min(converted["parity"], key=lambda o: o["cosine"])
    return {**row, "litert_torch": converted["litert_torch"], "convert_s": converted["convert_s"],
            "float_tflite_bytes": converted["bytes"], "float_ops": converted["ops"],
            "torch_export_cosine": worst["cosine"],
            "torch_export_max_abs": max(o["max_abs"] for o in converted["parity"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--only", nargs="*", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--targets", nargs="*", choices=list(TARGETS), default=list(TARGETS))
    parser.add_argument("--litert-python", help="python of a venv with litert-torch")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    results = []
    for name in args.only:
        pt2, hand, seconds = export(name, args.workdir)
        calib = args.workdir / f"{name}_calib.npz"
        for target in args.targets:
            for route, source in (("pt2", pt2), ("onnx by hand", hand)):
                out = args.workdir / f"{name}_{target}_{route.replace(' ', '_')}"
                row = {"model": name, "target": target, "route": route,
                       "weights": PRETRAINED.get(name, "random (seed 0)"), **seconds,
                       **build(source, target, calib, out)}
                results.append(row)
                print(json.dumps(row), flush=True)
        if args.litert_python and "pixel-npu" in args.targets:
            row = {"model": name, "target": "pixel-npu", "route": "litert-torch",
                   "weights": PRETRAINED.get(name, "random (seed 0)"),
                   **litert(pt2, args.litert_python, calib, args.workdir)}
            results.append(row)
            print(json.dumps(row), flush=True)
    print_table(["model", "target", "route", "export cos", "float cos", "SQNR dB", "top1",
                 "bytes", "delegated", "ms", "s"],
                [[r["model"], r["target"], r["route"], _num(r.get("torch_export_cosine")),
                  _num(r.get("float_parity_cosine")), _num(r.get("sqnr_db"), 1),
                  _num(r.get("top1_agreement"), 3), r.get("artifact_bytes"),
                  r.get("delegated"), _num(r.get("latency_ms"), 2),
                  r["seconds"]] for r in results])
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / "torch_models.json"
    out.write_text(json.dumps({"package_versions": package_versions(), "machine": machine_info(),
                               "results": _merged(out, results)}, indent=1))
    print(f"wrote {out}")


def _merged(path: Path, results: list[dict]) -> list[dict]:
    """This run's rows, and the earlier runs' rows of the models/targets/routes not re-run
    (`run` says when a row was made)."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    fresh = [{**r, "run": stamp} for r in results]
    done = {(r["model"], r["target"], r["route"]) for r in results}
    old = json.loads(path.read_text())["results"] if path.is_file() else []
    return [r for r in old if (r["model"], r["target"], r["route"]) not in done] + fresh


def _num(value, digits: int = 6) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    main()
