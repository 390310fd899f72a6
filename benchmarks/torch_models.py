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

Each shipped artifact is also checked by this script against the PyTorch program itself, per
output, on 16 held-out inputs (another seed; the artifact's own int8 scales and the input
layout change edgeopt recorded): `torch_sqnr_db`, one yardstick for every route, where
edgeopt's validation compares a by-hand .onnx or a litert-torch .tflite with that file.
`--check-only` adds it to rows recorded earlier whose bundles --workdir still holds.

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
EVAL_SAMPLES = 16  # the benchmark's own check against PyTorch, drawn with another seed
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
    "mobilenet_v2": lambda: _torchvision("mobilenet_v2"),
    "facenet_onet": _onet,
}
PRETRAINED = {"facenet_onet": "facenet-pytorch 2.6.0 (data/onet.pt)"}


def samples(name: str, shape: tuple[int, ...], count: int, seed: int) -> np.ndarray:
    """NCHW float32 inputs: face crops for ONet, normal noise for the random-weight models."""
    rng = np.random.default_rng(seed)
    if name == "facenet_onet":
        from zoo import face_crops  # the zoo's face crops of skimage's photographs

        crops = face_crops(rng, count, shape[3], shape[2])
        return (np.transpose(np.stack(crops), (0, 3, 1, 2)).astype(np.float32) - 127.5) / 128
    return rng.standard_normal((count, *shape[1:])).astype(np.float32)


def calibration(name: str, shape: tuple[int, ...], path: Path) -> Path:
    count = CALIB_SAMPLES + 8 if name == "facenet_onet" else CALIB_SAMPLES
    np.savez(path, x=samples(name, shape, count, seed=0))
    return path


def against_torch(pt2: Path, bundle: Path, name: str) -> dict:
    """The shipped artifact against the PyTorch program itself, per output, on EVAL_SAMPLES
    held-out inputs: one yardstick for every route (edgeopt's own validation compares a
    by-hand .onnx or a litert-torch .tflite with that file, not with PyTorch)."""
    import torch

    module = torch.export.load(pt2).module()  # the benchmark's own file
    manifest = json.loads((bundle / "manifest.json").read_text())
    run = _artifact_runner(bundle / manifest["model"]["file"], manifest)
    inputs = samples(name, _pt2_shape(pt2), EVAL_SAMPLES, seed=1)
    refs: list[list[np.ndarray]] = []
    gots: list[list[np.ndarray]] = []
    for x in inputs:
        with torch.no_grad():
            ref = module(torch.from_numpy(x[None]))
        ref = [r.numpy() for r in (ref if isinstance(ref, (tuple, list)) else (ref,))]
        got = run(x[None])
        refs.append(ref)
        gots.append([_take(got, r.shape) for r in ref])
    per_output = [_sqnr(np.stack([r[i] for r in refs]), np.stack([g[i] for g in gots]))
                  for i in range(len(refs[0]))]
    pooled = _sqnr(np.concatenate([np.concatenate([a.ravel() for a in r]) for r in refs]),
                   np.concatenate([np.concatenate([a.ravel() for a in g]) for g in gots]))
    top1 = [float(np.mean([np.argmax(r[i]) == np.argmax(g[i]) for r, g in zip(refs, gots)]))
            for i in range(len(refs[0])) if refs[0][i].ndim == 2 and refs[0][i].shape[1] > 1]
    return {"torch_sqnr_db": round(pooled, 2), "torch_outputs_db": [round(v, 2) for v in
                                                                      per_output],
            "torch_top1": [round(v, 3) for v in top1], "torch_samples": len(inputs)}


def _pt2_shape(pt2: Path) -> tuple[int, ...]:
    import torch

    return tuple(torch.export.load(pt2).example_inputs[0][0].shape)


def _take(outputs: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """The first artifact output shaped like the PyTorch one (the converters reorder them)."""
    match = next(i for i, o in enumerate(outputs) if o.shape == shape)
    return outputs.pop(match)


def _sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    ref, got = ref.astype(np.float64), got.astype(np.float64)
    return float(10 * np.log10(np.sum(ref ** 2) / np.sum((ref - got) ** 2)))


def _artifact_runner(path: Path, manifest: dict):
    """x (NCHW, batch 1) -> the artifact's float outputs; the layout change edgeopt
    recorded (conversion.input_layout_changes) applied, int8 inputs quantized and outputs
    dequantized with the artifact's own scales."""
    perms = list((manifest["conversion"].get("input_layout_changes") or {}).values())
    perm = perms[0] if perms else None

    def laid_out(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.transpose(x, perm)) if perm else x

    if path.suffix == ".onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed = session.get_inputs()[0].name
        return lambda x: list(session.run(None, {feed: laid_out(x)}))
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    (inp,) = interpreter.get_input_details()

    def run(x: np.ndarray) -> list[np.ndarray]:
        interpreter.set_tensor(inp["index"], _quantized(laid_out(x), inp))
        interpreter.invoke()
        return [_dequantized(interpreter.get_tensor(o["index"]), o)
                for o in interpreter.get_output_details()]
    return run


def _quantized(x: np.ndarray, detail: dict) -> np.ndarray:
    scale, zero = detail["quantization"]
    if detail["dtype"] == np.float32 or not scale:
        return x.astype(detail["dtype"])
    info = np.iinfo(detail["dtype"])
    return np.clip(np.round(x / scale) + zero, info.min, info.max).astype(detail["dtype"])


def _dequantized(y: np.ndarray, detail: dict) -> np.ndarray:
    scale, zero = detail["quantization"]
    return y.astype(np.float32) if not scale else (y.astype(np.float32) - zero) * scale


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
    parser.add_argument("--check-only", action="store_true",
                        help="no builds: add the check against PyTorch to the recorded rows "
                             "whose bundles are in --workdir")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / "torch_models.json"
    if args.check_only:
        _check_recorded(out, args)
        return
    results = []
    for name in args.only:
        results.extend(_model_rows(name, args))
    _print(results)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    _write(out, _merged(out, results))


def _model_rows(name: str, args) -> list[dict]:
    pt2, hand, seconds = export(name, args.workdir)
    calib = args.workdir / f"{name}_calib.npz"
    rows = []
    for target in args.targets:
        for route, source in (("pt2", pt2), ("onnx by hand", hand)):
            out = _bundle(args.workdir, name, target, route)
            row = {"model": name, "target": target, "route": route,
                   "weights": PRETRAINED.get(name, "random (seed 0)"), **seconds,
                   **build(source, target, calib, out)}
            rows.append(_checked(row, pt2, out))
    if args.litert_python and "pixel-npu" in args.targets:
        row = {"model": name, "target": "pixel-npu", "route": "litert-torch",
               "weights": PRETRAINED.get(name, "random (seed 0)"),
               **litert(pt2, args.litert_python, calib, args.workdir)}
        rows.append(_checked(row, pt2, _bundle(args.workdir, name, "pixel-npu", "litert-torch")))
    return rows


def _bundle(workdir: Path, name: str, target: str, route: str) -> Path:
    slug = "litert" if route == "litert-torch" else route.replace(" ", "_")
    return workdir / f"{name}_{target}_{slug}"


def _checked(row: dict, pt2: Path, bundle: Path) -> dict:
    if row.get("exit") == 0:
        row.update(against_torch(pt2, bundle, row["model"]))
    print(json.dumps(row), flush=True)
    return row


def _check_recorded(path: Path, args) -> None:
    """Adds the check against PyTorch to recorded rows whose bundles --workdir still holds."""
    document = json.loads(path.read_text())
    for row in document["results"]:
        bundle = _bundle(args.workdir, row["model"], row["target"], row["route"])
        pt2 = args.workdir / f"{row['model']}.pt2"
        if (row["model"] in args.only and row["target"] in args.targets
                and row.get("exit") == 0 and _same_build(row, bundle)):
            row.update(against_torch(pt2, bundle, row["model"]), checked_in=str(bundle))
            print(json.dumps(row), flush=True)
    path.write_text(json.dumps(document, indent=1))


def _same_build(row: dict, bundle: Path) -> bool:
    """The bundle is the one the row was measured on (its artifact's size)."""
    manifest = bundle / "manifest.json"
    return manifest.is_file() and json.loads(manifest.read_text())["model"][
        "size_bytes"] == row.get("artifact_bytes")


def _write(path: Path, results: list[dict]) -> None:
    path.write_text(json.dumps({"package_versions": package_versions(), "machine": machine_info(),
                                "results": results}, indent=1))
    print(f"wrote {path}")


def _print(results: list[dict]) -> None:
    print_table(["model", "target", "route", "export cos", "SQNR dB", "vs torch dB", "top1",
                 "bytes", "delegated", "ms", "s"],
                [[r["model"], r["target"], r["route"], _num(r.get("torch_export_cosine")),
                  _num(r.get("sqnr_db"), 1), _num(r.get("torch_sqnr_db"), 1),
                  _num(r.get("top1_agreement"), 3), r.get("artifact_bytes"),
                  r.get("delegated"), _num(r.get("latency_ms"), 2),
                  r["seconds"]] for r in results])


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
