"""int16 activations on a YOLO-class detector: detections kept against the float model.

Model: NudeNet's 320n.onnx (YOLOv8n-class, 18 classes; output (1, 22, 2100): 4 box rows in
pixels, 18 class-score rows), shipped in the `nudenet` wheel, input fixed to 1x3x320x320.
Data: the package's own preprocessing of the zoo photos (benchmarks/zoo.py
`nudenet_inputs`), CALIB samples to calibrate, EVAL other samples (another seed) to score.
The float reference is the ONNX model in onnxruntime. Every variant is run in its real
runtime (LiteRT for .tflite, onnxruntime for .onnx) on the EVAL samples:

* TFLite converter int8 (full integer, min-max) and 16x8
  (EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8), from onnx2tf's SavedModel;
* ai-edge-quantizer static_wi8_ai8 and static_wi8_ai16 with its own calibration;
* onnxruntime quantize_static QDQ int8 (MinMax);
* edgeopt w8a8, edgeopt w8a16, and edgeopt w8a8 with --accuracy-budget (int16 steps on).

Detections: YOLOv8 decoding as nudenet does (best class score >= SCORE, NMS IoU 0.45 per
class). F1 at IoU 0.5 against the float model's boxes (same class), summed over samples;
"kept" = F1 (the float model scores 1.0 against itself). Sizes are file bytes.

CPU part (`--cpu`): the layers of benchmarks/int4_cpu.py (Keras, seeded), each quantized
by edgeopt as w8a8 and w8a16 and timed in LiteRT with 1 thread, invokes interleaved (5
warm-up, median of REPEATS): int8 under XNNPACK, int8 on the builtin kernels, w8a16 with
the default interpreter (XNNPACK leaves the int16 ops to the builtin reference kernels).
The ratio w8a16 / int8 XNNPACK is the factor the latency estimate applies to an int16 op
on a CPU unit (`devices/roofline.REFERENCE_KERNEL_SLOWDOWN["int16"]`).

    python benchmarks/int16.py [--budget 40] [--only edgeopt_w8a16 ...]
    python benchmarks/int16.py --cpu
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
from _common import print_table, write_results

NAME = "int16"
MODEL = Path("/work/venv/lib/python3.11/site-packages/nudenet/320n.onnx")
SHAPE_FLAG = "images:1,3,320,320"
CALIB, EVAL = 32, 16
CHECK = 8  # calibration samples that score the core's candidates (int16 runs slowly)
SCORE, NMS_IOU, MATCH_IOU = 0.2, 0.45, 0.5   # nudenet's own score threshold and NMS
LOW_SCORE = 0.05   # a second threshold: more (weaker) detections to match
KEPT_BAR, SIZE_BAR = 0.90, 1.3


def inputs(count: int, seed: int) -> np.ndarray:
    sys.path.insert(0, str(Path(__file__).parent))
    import zoo

    return zoo.nudenet_inputs(None, count, seed)["images"].astype(np.float32)


# --- detections -----------------------------------------------------------------------

def iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    x1 = np.maximum(box[0], boxes[:, 0])
    y1 = np.maximum(box[1], boxes[:, 1])
    x2 = np.minimum(box[2], boxes[:, 2])
    y2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


def decode(output: np.ndarray, score: float = SCORE) -> list[tuple[np.ndarray, int, float]]:
    """One image's (xyxy box, class, score) after the score threshold and per-class NMS."""
    rows = output.reshape(output.shape[-2], output.shape[-1]).T  # (2100, 22)
    scores = rows[:, 4:].max(axis=1)
    keep = scores >= score
    rows, scores = rows[keep], scores[keep]
    classes = rows[:, 4:].argmax(axis=1)
    cx, cy, w, h = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    found = []
    for cls in np.unique(classes):
        idx = np.where(classes == cls)[0][np.argsort(-scores[classes == cls])]
        while len(idx):
            best = idx[0]
            found.append((boxes[best], int(cls), float(scores[best])))
            idx = idx[1:][iou(boxes[best], boxes[idx[1:]]) < NMS_IOU]
    return found


def match_counts(reference, candidate) -> tuple[int, int, int]:
    """(true positives, false positives, false negatives) of one image, greedy by score."""
    used, tp = set(), 0
    for box, cls, _ in sorted(candidate, key=lambda d: -d[2]):
        best, best_iou = None, MATCH_IOU
        for j, (ref_box, ref_cls, _) in enumerate(reference):
            if j in used or ref_cls != cls:
                continue
            value = float(iou(box, ref_box[None])[0])
            if value >= best_iou:
                best, best_iou = j, value
        if best is not None:
            used.add(best)
            tp += 1
    return tp, len(candidate) - tp, len(reference) - tp


def f1_against(reference: np.ndarray, outputs: np.ndarray, score: float = SCORE,
               suffix: str = "") -> dict:
    tp = fp = fn = 0
    for ref, out in zip(reference, outputs):
        a, b, c = match_counts(decode(ref, score), decode(out, score))
        tp, fp, fn = tp + a, fp + b, fn + c
    f1 = 2 * tp / max(2 * tp + fp + fn, 1)
    return {f"f1{suffix}": round(f1, 4), f"tp{suffix}": tp, f"fp{suffix}": fp,
            f"fn{suffix}": fn}


def sqnr(reference: np.ndarray, outputs: np.ndarray, rows: slice = slice(None)) -> float:
    ref = reference[:, rows].astype(np.float64)
    noise = np.sum((ref - outputs[:, rows]) ** 2)
    return round(float(10 * np.log10(np.sum(ref ** 2) / max(noise, 1e-30))), 2)


# --- runners --------------------------------------------------------------------------

def run_tflite(model: bytes, images_nhwc: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model, num_threads=2)
    interpreter.allocate_tensors()
    inp = interpreter.get_input_details()[0]
    out = interpreter.get_output_details()[0]
    results = []
    for image in images_nhwc:
        value = image[None]
        if inp["dtype"] != np.float32:
            scale, zero = inp["quantization"]
            value = np.clip(np.round(value / scale + zero), np.iinfo(inp["dtype"]).min,
                            np.iinfo(inp["dtype"]).max).astype(inp["dtype"])
        interpreter.set_tensor(inp["index"], value)
        interpreter.invoke()
        raw = interpreter.get_tensor(out["index"])
        if out["dtype"] != np.float32:
            scale, zero = out["quantization"]
            raw = (raw.astype(np.float32) - zero) * scale
        results.append(raw[0])
    return np.stack(results)


def run_onnx(model: Path | bytes, images_nchw: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(str(model) if isinstance(model, Path) else model,
                                   options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: image[None]})[0] for image in images_nchw])


# --- variants -------------------------------------------------------------------------

def converter_16x8(source, calib_nhwc: np.ndarray) -> bytes:
    import tensorflow as tf

    from edgeopt.calibration.tflite_converter import representative_dataset
    from edgeopt.converters.tf_source import run_converter

    name = source_input(source)
    converter = source.converter()
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative_dataset(source, {name: calib_nhwc})
    converter.target_spec.supported_ops = [
        tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    return run_converter(converter, "16x8")


def source_input(source) -> str:
    from edgeopt.calibration.tflite_converter import signature_names

    return signature_names(source)[0]


def aeq(float_tflite: bytes, calib_nhwc: np.ndarray, recipe_name: str) -> bytes:
    from ai_edge_quantizer import quantizer, recipe

    from edgeopt.calibration.tflite_aeq import _signature_samples

    qt = quantizer.Quantizer(bytearray(float_tflite), getattr(recipe, recipe_name)())
    calibration = qt.calibrate(_signature_samples(float_tflite, {"images": calib_nhwc}),
                               num_threads=2)
    return bytes(qt.quantize(calibration).quantized_model)


def edgeopt_tflite(float_tflite: bytes, calib_nhwc, eval_nhwc, **config) -> tuple[bytes, dict]:
    from edgeopt.quantize import QuantConfig, quantize_tflite

    name = tflite_input(float_tflite)
    result = quantize_tflite(float_tflite, {name: calib_nhwc},
                             QuantConfig(layer_report=False, check_samples=CHECK, **config),
                             {name: eval_nhwc})
    info = {"method": result.method, "warnings": result.warnings,
            "int16_ops": sum(1 for p in result.precision_per_layer.values() if p == "int16"),
            "search": result.search}
    return result.model, info


def tflite_input(model: bytes) -> str:
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_content=model).get_input_details()[0]["name"]


def onnxruntime_int8(handle_path: Path, calib_nchw: np.ndarray, workdir: Path) -> bytes:
    from edgeopt.calibration.onnx_static import qdq_int8

    out = workdir / "ort_int8.onnx"
    qdq_int8(handle_path, out, {"images": calib_nchw})
    return out.read_bytes()


VARIANTS = ("edgeopt_w8a8", "converter_int8", "aeq_wi8_ai8", "onnxruntime_int8",
            "edgeopt_w8a16", "aeq_wi8_ai16", "converter_16x8", "edgeopt_budget")


def make_variant(name: str, ctx: dict) -> tuple[bytes, str, dict]:
    from edgeopt.calibration import tflite_converter

    conv, calib, budget = ctx["conv"], ctx["calib_nhwc"], ctx["budget"]
    if name == "converter_int8":
        return tflite_converter.full_integer(conv.tf_source, {source_input(conv.tf_source):
                                                              calib}, "float32"), "tflite", {}
    if name == "converter_16x8":
        return converter_16x8(conv.tf_source, calib), "tflite", {}
    if name.startswith("aeq_"):
        return aeq(conv.tflite, calib, "static_" + name[4:]), "tflite", {}
    if name == "onnxruntime_int8":
        return onnxruntime_int8(ctx["onnx_path"], ctx["calib_nchw"], ctx["workdir"]), "onnx", {}
    scheme = {"edgeopt_w8a8": "w8a8", "edgeopt_w8a16": "w8a16", "edgeopt_budget": "w8a8"}[name]
    extra = {"accuracy_budget": budget, "isolate_layers": 2} if name == "edgeopt_budget" else {}
    if name == "edgeopt_w8a16":  # one range set: every candidate costs int16 reference runs
        extra["method"] = "minmax"
    model, info = edgeopt_tflite(conv.tflite, calib, ctx["eval_nhwc"], scheme=scheme, **extra)
    return model, "tflite", info


def prepare(workdir: Path, calib_nchw: np.ndarray) -> dict:
    from edgeopt.converters.float_tflite import to_float_tflite
    from edgeopt.model import load_model, with_input_shapes

    handle = with_input_shapes(load_model(MODEL), (SHAPE_FLAG,))
    conv = to_float_tflite(handle, workdir, {"images": calib_nchw[:8]})
    return {"conv": conv, "onnx_path": handle.path}


def evaluate(name: str, ctx: dict, reference: np.ndarray) -> dict:
    start = time.perf_counter()
    try:
        model, fmt, info = make_variant(name, ctx)
    except Exception as exc:  # a baseline tool that cannot quantize the model is a result
        return {"variant": name, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    made = time.perf_counter() - start
    outputs = (run_tflite(model, ctx["eval_nhwc"]) if fmt == "tflite"
               else run_onnx(model, ctx["eval_nchw"]))
    if ctx.get("keep"):
        ctx["keep"].mkdir(parents=True, exist_ok=True)
        np.save(ctx["keep"] / f"{name}.npy", outputs)
        (ctx["keep"] / f"{name}.{fmt}").write_bytes(model)
    return {"variant": name, "format": fmt, "size_bytes": len(model),
            "quantize_s": round(made, 1), "sqnr_db": sqnr(reference, outputs),
            "score_sqnr_db": sqnr(reference, outputs, slice(4, None)),
            **f1_against(reference, outputs),
            **f1_against(reference, outputs, LOW_SCORE, "_low"), **info}


REPEATS = 30


def cpu_models(model, shape) -> dict[str, bytes]:
    import tensorflow as tf

    from edgeopt.quantize import QuantConfig, quantize_tflite

    float_tflite = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    name = tflite_input(float_tflite)
    calib = {name: np.random.default_rng(0).normal(size=(16, *shape)).astype(np.float32)}
    config = QuantConfig(method="minmax", layer_report=False, check_samples=4)
    return {scheme: quantize_tflite(float_tflite, calib, config.replace(scheme=scheme)).model
            for scheme in ("w8a8", "w8a16")}


def cpu_part() -> int:
    from int4_cpu import LAYERS, interpreter, make_model, time_all

    rows, results = [], []
    for label, (shape, kind, units, kernel) in LAYERS.items():
        models = cpu_models(make_model(shape, kind, units, kernel), shape)
        runs = {"int8 xnnpack": interpreter(models["w8a8"], False),
                "int8 builtin": interpreter(models["w8a8"], True),
                "w8a16 default": interpreter(models["w8a16"], False)}
        ms = time_all(runs, REPEATS)
        record = {"layer": label, "ms": {k: round(v, 4) for k, v in ms.items()},
                  "w8a16_over_int8_xnnpack": round(ms["w8a16 default"] / ms["int8 xnnpack"], 1),
                  "w8a16_over_int8_builtin": round(ms["w8a16 default"] / ms["int8 builtin"], 1)}
        results.append(record)
        rows.append((label, *(f"{ms[k]:.3f}" for k in runs),
                     record["w8a16_over_int8_xnnpack"], record["w8a16_over_int8_builtin"]))
    print_table(["layer", "int8 xnnpack ms", "int8 builtin ms", "w8a16 ms",
                 "w8a16/int8 xnnpack", "w8a16/int8 builtin"], rows)
    write_results(NAME + "_cpu", {"repeats": REPEATS, "threads": 1, "layers": results})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=40.0,
                        help="edgeopt_budget's output-SQNR floor in dB")
    parser.add_argument("--only", nargs="*", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--cpu", action="store_true", help="only the CPU timing part")
    parser.add_argument("--keep", type=Path, default=None,
                        help="folder for each variant's model and outputs")
    args = parser.parse_args(argv)
    if args.cpu:
        return cpu_part()
    calib, evaluation = inputs(CALIB, 0), inputs(EVAL, 1)
    with tempfile.TemporaryDirectory(prefix="edgeopt-int16-") as tmp:
        ctx = {**prepare(Path(tmp), calib), "workdir": Path(tmp), "budget": args.budget,
               "keep": args.keep,
               "calib_nchw": calib, "eval_nchw": evaluation,
               "calib_nhwc": calib.transpose(0, 2, 3, 1),
               "eval_nhwc": evaluation.transpose(0, 2, 3, 1)}
        reference = run_onnx(ctx["onnx_path"], evaluation)
        float_dets = sum(len(decode(r)) for r in reference)
        low_dets = sum(len(decode(r, LOW_SCORE)) for r in reference)
        print(f"float model: {float_dets} detections on {EVAL} samples ({low_dets} at "
              f"score >= {LOW_SCORE})", flush=True)
        rows = []
        for name in args.only:  # results written after every variant: a long run keeps them
            rows.append(evaluate(name, ctx, reference))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "search"}), flush=True)
            _write(args, float_dets, rows, None)
    int8 = next((r["size_bytes"] for r in rows if r["variant"] == "edgeopt_w8a8"
                 and "size_bytes" in r), None)
    table = [[r["variant"], r.get("size_bytes", "-"), r.get("sqnr_db", "-"),
              r.get("score_sqnr_db", "-"), r.get("f1", "-"), r.get("f1_low", "-"),
              r.get("int16_ops", "-"), r.get("error", "")[:60]] for r in rows]
    print(f"float model: {float_dets} detections on {EVAL} samples (score >= {SCORE})")
    print_table(["variant", "bytes", "SQNR dB", "score SQNR dB", f"F1 @{SCORE}",
                 f"F1 @{LOW_SCORE}", "int16 ops", "error"], table)
    budget = next((r for r in rows if r["variant"] == "edgeopt_budget" and "f1" in r), None)
    verdict = None
    if budget is not None and int8:
        verdict = {"kept": budget["f1"], "size_ratio": round(budget["size_bytes"] / int8, 3),
                   "pass": budget["f1"] >= KEPT_BAR and budget["size_bytes"] <= SIZE_BAR * int8}
        print(f"edgeopt budget: F1 {budget['f1']} (bar {KEPT_BAR}), size "
              f"{verdict['size_ratio']}x int8 (bar {SIZE_BAR}x): "
              f"{'PASS' if verdict['pass'] else 'MISS'}")
    _write(args, float_dets, rows, verdict)
    return 0


def _write(args, float_dets: int, rows: list, verdict) -> None:
    write_results(NAME, {"model": str(MODEL), "calib_samples": CALIB, "eval_samples": EVAL,
                         "check_samples": CHECK, "score_threshold": SCORE,
                         "low_score_threshold": LOW_SCORE,
                         "float_detections": float_dets, "budget_db": args.budget,
                         "rows": rows, "verdict": verdict})


if __name__ == "__main__":
    sys.exit(main())
