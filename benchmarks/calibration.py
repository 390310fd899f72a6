"""Benchmark the calibration core against the converters' own int8 quantizers.

Models (all real, all offline):
- digits: the bundled sample (samples/digits_cnn.keras for .tflite, samples/digits_cnn.onnx
  for .onnx); calibration samples/digits_calib.npz (200), evaluation digits_eval.npz (400,
  labelled): top-1 accuracy.
- ppocr-cls: PP-OCR text-direction classifier (rapidocr-onnxruntime's
  ch_ppocr_mobile_v2.0_cls_infer.onnx, 3x48x192). Text-line crops of scikit-image's `page`
  photograph (lines found by a row profile), half of them turned 180 degrees: real labels.
  120 calibration / 80 evaluation crops: top-1 accuracy (0 vs 180).
- ppocr-det: PP-OCRv4 text detector (ch_PP-OCRv4_det_infer.onnx, 3x256x256). Crops of
  scikit-image photographs, half of them of the `page` and `text` photographs (printed and
  handwritten text). 40 calibration / 24 evaluation crops: F1 of the text mask
  (probability > 0.3, rapidocr's threshold) against the float model's mask.
The .tflite of a PP-OCR model comes from edgeopt's own converter (onnx2tf, offline) at that
fixed input size. Preprocessing follows rapidocr: BGR, (pixel / 255 - 0.5) / 0.5.

Rows per model and format, on one calibration/evaluation split:
- mnv2-trained: MobileNetV2-0.35 96x96 trained briefly on scikit-image photographs
  (benchmarks/trained_mobilenet.py; 12 classes, 200 calibration / 200 labelled evaluation
  crops): top-1 accuracy. Keras source, so .tflite rows only.
- baselines: TFLite converter int8 (representative dataset, calibration/tflite_converter),
  ai-edge-quantizer's own `static_wi8_ai8` recipe (its min-max calibration, on the same
  float .tflite edgeopt starts from; calibration/tflite_aeq),
  onnxruntime quantize_static QDQ with MinMax, Entropy, Percentile (on the same
  onnxruntime-preprocessed float model edgeopt starts from);
- edgeopt: w8a8 --method auto; w4a8 round-to-nearest; w4a8 GPTQ (both with auto ranges);
  --accuracy-budget (1 point of top-1 for labelled models, a 12 dB output-SQNR floor for
  the detector), starting from int4 everywhere.
Output SQNR is over all evaluation outputs against the float model in the same runtime.

Also: wall time of calibrating a MobileNetV2 (224x224, 3.5M parameters, untrained weights)
on 200 photograph crops (the capture pass and the range estimation of `edgeopt quantize`).

    python benchmarks/calibration.py                        # ~15-25 min on 2 cores
    python benchmarks/calibration.py --models digits --formats onnx --skip-mobilenet \
        --name calibration_digits_onnx
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
from _common import REPO, print_table, verdict, write_results

NAME = "calibration"
MODELS = ("digits", "ppocr-cls", "ppocr-det", "mnv2-trained")
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "camera", "coins", "moon",
          "immunohistochemistry", "hubble_deep_field", "stereo_motorcycle", "cat",
          "colorwheel", "clock", "brick", "grass", "gravel", "retina", "logo")
TEXT_PHOTOS = ("page", "text")
MNV2_SAMPLES = 200
MNV2_TARGET_S = 30.0


@dataclass
class Case:
    name: str
    onnx: Path | None                # None: a Keras model, .tflite rows only
    calib: np.ndarray                # NCHW (onnx layout)
    evaluation: np.ndarray
    labels: np.ndarray | None
    budget: float
    keras: Path | None = None
    fixed_shape: tuple[int, ...] | None = None
    rows: list[dict] = field(default_factory=list)


# --- data --------------------------------------------------------------------------------

def photo(name: str) -> np.ndarray:
    import skimage.data

    image = getattr(skimage.data, name)()
    image = image[0] if isinstance(image, tuple) else np.asarray(image)
    if image.dtype == bool:
        image = image.astype(np.uint8) * 255
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    return np.ascontiguousarray(image[..., :3]).astype(np.uint8)


def ppocr_input(rgb: np.ndarray) -> np.ndarray:
    """rapidocr's preprocessing: BGR, (x / 255 - 0.5) / 0.5, CHW."""
    return ((rgb[..., ::-1].astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)


def square_crop(image: np.ndarray, rng, size: int, zoom: float) -> np.ndarray:
    from PIL import Image

    h, w = image.shape[:2]
    side = int(min(h, w, size / zoom))
    y, x = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
    crop = Image.fromarray(image[y:y + side, x:x + side]).resize((size, size), Image.BILINEAR)
    return ppocr_input(np.asarray(crop))


def det_images(count: int, seed: int, size: int = 256) -> np.ndarray:
    rng = np.random.default_rng(seed)
    images = []
    for i in range(count):
        if i % 2:
            images.append(square_crop(photo(TEXT_PHOTOS[i // 2 % 2]), rng, size,
                                      rng.uniform(1.0, 2.0)))
        else:
            images.append(square_crop(photo(PHOTOS[i // 2 % len(PHOTOS)]), rng, size,
                                      rng.uniform(0.5, 1.0)))
    return np.stack(images).astype(np.float32)


def text_lines(gray: np.ndarray) -> list[tuple[int, int]]:
    """Row bands of dark text on the page photograph (a local-contrast row profile)."""
    from scipy.ndimage import uniform_filter

    dark = gray < uniform_filter(gray.astype(np.float32), 41) - 30
    rows = dark.mean(axis=1) > 0.03
    bands, y = [], 0
    while y < len(rows):
        if rows[y]:
            start = y
            while y < len(rows) and rows[y]:
                y += 1
            if 8 <= y - start <= 40:
                bands.append((max(start - 3, 0), min(y + 3, len(rows))))
        y += 1
    return bands


def cls_images(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Text-line crops, resized to height 48 and right-padded to 192 (rapidocr); half of
    them rotated by 180 degrees, label 1."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    page = photo("page")
    bands = text_lines(page[..., 0])
    images, labels = [], []
    for i in range(count):
        top, bottom = bands[i % len(bands)]
        width = int(rng.integers(64, page.shape[1]))
        x = int(rng.integers(0, page.shape[1] - width + 1))
        crop = page[max(top + rng.integers(-2, 3), 0):bottom + rng.integers(-2, 3), x:x + width]
        label = int(rng.integers(0, 2))
        crop = np.ascontiguousarray(crop[::-1, ::-1] if label else crop)
        new_w = min(192, int(np.ceil(48 * width / crop.shape[0])))
        resized = np.asarray(Image.fromarray(crop).resize((new_w, 48), Image.BILINEAR))
        canvas = np.zeros((3, 48, 192), np.float32)
        canvas[:, :, :new_w] = ppocr_input(resized)
        images.append(canvas)
        labels.append(label)
    return np.stack(images), np.asarray(labels)


def rapidocr_model(name: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None:
        raise SystemExit("pip install rapidocr-onnxruntime==1.4.4 --no-deps (for PP-OCR)")
    return Path(spec.origin).parent / "models" / name


def cases(names: list[str]) -> list[Case]:
    found = []
    if "digits" in names:
        calib = np.load(REPO / "samples/digits_calib.npz")["image"].transpose(0, 3, 1, 2)
        evaluation = np.load(REPO / "samples/digits_eval.npz")
        found.append(Case("digits", REPO / "samples/digits_cnn.onnx", calib,
                          evaluation["image"].transpose(0, 3, 1, 2), evaluation["labels"], 1.0,
                          keras=REPO / "samples/digits_cnn.keras"))
    if "ppocr-cls" in names:
        images, labels = cls_images(200, seed=0)
        found.append(Case("ppocr-cls", rapidocr_model("ch_ppocr_mobile_v2.0_cls_infer.onnx"),
                          images[:120], images[120:], labels[120:], 1.0,
                          fixed_shape=(1, 3, 48, 192)))
    if "ppocr-det" in names:
        images = det_images(64, seed=0)
        found.append(Case("ppocr-det", rapidocr_model("ch_PP-OCRv4_det_infer.onnx"),
                          images[:40], images[40:], None, 12.0, fixed_shape=(1, 3, 256, 256)))
    if "mnv2-trained" in names:
        found.append(trained_mnv2_case())
    return found


def trained_mnv2_case() -> Case:
    """MobileNetV2-0.35 96x96 trained on scikit-image photographs (trained_mobilenet.py):
    200 calibration / 200 labelled evaluation crops; stored NCHW like the other cases."""
    from trained_mobilenet import trained_mobilenet

    folder = Path(tempfile.mkdtemp(prefix="edgeopt-mnv2-"))
    trained_mobilenet(folder)
    calib = next(iter(np.load(folder / "calib.npz").values()))
    evaluation = np.load(folder / "eval.npz")
    images = next(v for k, v in evaluation.items() if k != "labels")
    return Case("mnv2-trained", None, calib.transpose(0, 3, 1, 2), images.transpose(0, 3, 1, 2),
                evaluation["labels"], 1.0, keras=folder / "model.keras")


# --- metrics -----------------------------------------------------------------------------

def task_metric(case: Case, reference: list[np.ndarray], outputs: list[np.ndarray]) -> float:
    """Top-1 accuracy (%) with labels; else F1 (%) of the text mask against the float one."""
    if case.labels is not None:
        return 100.0 * float(np.mean(outputs[0].argmax(axis=1) == case.labels))
    ref, out = reference[0] > 0.3, outputs[0] > 0.3
    return 100.0 * 2 * float((ref & out).sum()) / max(float(ref.sum() + out.sum()), 1.0)


def record(case: Case, fmt: str, variant: str, reference, outputs, size: int, seconds: float,
           **extra) -> None:
    from edgeopt.validate import sqnr_db

    ref = np.concatenate([r.ravel() for r in reference])
    out = np.concatenate([o.ravel() for o in outputs])
    row = {"model": case.name, "format": fmt, "variant": variant,
           "sqnr_db": round(float(sqnr_db(ref, out)), 2) if variant != "float" else None,
           "metric": round(task_metric(case, reference, outputs), 2),
           "metric_name": "top1_%" if case.labels is not None else "mask_f1_%",
           "size_kib": round(size / 1024, 1), "seconds": round(seconds, 1), **extra}
    case.rows.append(row)
    print(f"  {fmt:6s} {variant:24s} SQNR {row['sqnr_db']} dB  {row['metric_name']} "
          f"{row['metric']}  {row['size_kib']} KiB  {row['seconds']} s", flush=True)


def edgeopt_variants(case: Case) -> list[tuple[str, dict]]:
    return [("edgeopt w8a8 auto", {"scheme": "w8a8"}),
            ("edgeopt w4a8 rtn", {"scheme": "w4a8", "weight_method": "rtn"}),
            ("edgeopt w4a8 gptq", {"scheme": "w4a8", "weight_method": "gptq"}),
            (f"edgeopt budget {case.budget:g}", {"scheme": "w8a8", "accuracy_budget":
                                                 case.budget, "isolate_layers": 4})]


# --- onnx --------------------------------------------------------------------------------

def onnx_rows(case: Case, workdir: Path) -> None:
    from edgeopt.calibration import onnx_static
    from edgeopt.calibration.onnx_format import OnnxFormat
    from edgeopt.quantize import QuantConfig, quantize_onnx

    fmt = OnnxFormat(case.onnx)
    prepared = workdir / f"{case.name}_prepared.onnx"
    prepared.write_bytes(fmt.float_model)
    feeds = {fmt.graph.inputs[0]: case.evaluation}
    reference = fmt.run(fmt.float_model, feeds)
    record(case, "onnx", "float", reference, reference, len(fmt.float_model), 0.0)
    for method in ("MinMax", "Entropy", "Percentile"):
        start, out = time.perf_counter(), workdir / f"{case.name}_{method}.onnx"
        onnx_static.qdq_int8(prepared, out, {fmt.graph.inputs[0]: case.calib}, method)
        record(case, "onnx", f"onnxruntime {method}", reference,
               fmt.run(out.read_bytes(), feeds), out.stat().st_size, time.perf_counter() - start)
    for label, options in edgeopt_variants(case):
        start = time.perf_counter()
        result = quantize_onnx(case.onnx, {fmt.graph.inputs[0]: case.calib},
                               QuantConfig(layer_report=False, **options), feeds, case.labels)
        record(case, "onnx", label, reference, fmt.run(result.model, feeds), len(result.model),
               time.perf_counter() - start, method=result.method, search=result.search)


# --- tflite ------------------------------------------------------------------------------

def float_tflite(case: Case, workdir: Path):
    from edgeopt.converters.float_tflite import to_float_tflite
    from edgeopt.model import load_model

    if case.keras is not None:
        return to_float_tflite(load_model(case.keras), workdir)
    import onnx

    model = onnx.load(str(case.onnx))
    for dim, value in zip(model.graph.input[0].type.tensor_type.shape.dim, case.fixed_shape):
        dim.ClearField("dim_param")
        dim.dim_value = value
    fixed = workdir / f"{case.name}_fixed.onnx"
    onnx.save(model, str(fixed))
    samples = {model.graph.input[0].name: case.calib[:8]}
    (workdir / case.name).mkdir(exist_ok=True)
    return to_float_tflite(load_model(fixed), workdir / case.name, samples)


def tflite_rows(case: Case, workdir: Path) -> None:
    from edgeopt.calibration import tflite_aeq, tflite_converter
    from edgeopt.calibration.tflite_format import TFLiteFormat
    from edgeopt.quantize import QuantConfig, quantize_tflite

    conversion = float_tflite(case, workdir)
    fmt = TFLiteFormat(conversion.tflite)
    key = next(iter(conversion.input_perms), None)
    perm = conversion.input_perms.get(key, (0, 2, 3, 1)) if key else (0, 2, 3, 1)
    name = fmt.capture().interpreter.get_signature_list()["serving_default"]["inputs"][0]
    calib = {name: np.ascontiguousarray(case.calib.transpose(perm))}
    feeds = {name: np.ascontiguousarray(case.evaluation.transpose(perm))}
    reference = fmt.run(conversion.tflite, feeds)
    record(case, "tflite", "float", reference, reference, len(conversion.tflite), 0.0)
    start = time.perf_counter()
    source_name = tflite_converter.signature_names(conversion.tf_source)[0]
    baseline = tflite_converter.full_integer(conversion.tf_source,
                                             {source_name: calib[name]}, "float32")
    record(case, "tflite", "TFLite converter int8", reference, fmt.run(baseline, feeds),
           len(baseline), time.perf_counter() - start)
    start = time.perf_counter()
    static = tflite_aeq.full_integer(conversion.tflite, calib, "float32")
    record(case, "tflite", "ai-edge-quantizer static_wi8_ai8", reference,
           fmt.run(static, feeds), len(static), time.perf_counter() - start)
    for label, options in edgeopt_variants(case):
        start = time.perf_counter()
        result = quantize_tflite(conversion.tflite, calib, QuantConfig(layer_report=False,
                                                                        **options),
                                 feeds, case.labels)
        record(case, "tflite", label, reference, fmt.run(result.model, feeds),
               len(result.model), time.perf_counter() - start, method=result.method,
               search=result.search)


# --- MobileNetV2 calibration time ----------------------------------------------------------

def mobilenet_timing(workdir: Path) -> dict:
    from edgeopt.calibration.calibrate import estimate_ranges, run_calibration
    from edgeopt.calibration.tflite_format import TFLiteFormat
    from edgeopt.converters.float_tflite import to_float_tflite
    from edgeopt.model import load_model
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import keras

    keras.utils.set_random_seed(0)
    keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3)).save(
        workdir / "mnv2.keras")
    tflite = to_float_tflite(load_model(workdir / "mnv2.keras"), workdir).tflite
    rng = np.random.default_rng(0)
    crops = np.stack([square_crop(photo(PHOTOS[i % len(PHOTOS)]), rng, 224, 0.8)
                      for i in range(MNV2_SAMPLES)]).transpose(0, 2, 3, 1)
    fmt = TFLiteFormat(tflite)
    name = fmt.capture().interpreter.get_signature_list()["serving_default"]["inputs"][0]
    start = time.perf_counter()
    stats = run_calibration(fmt, {name: np.ascontiguousarray(crops)}, set())
    capture = time.perf_counter() - start
    estimate_ranges(stats.observers, "auto")
    total = time.perf_counter() - start
    return {"samples": stats.samples, "tensors": len(stats.observers.observers),
            "layers": len(fmt.graph.layers), "capture_s": round(capture, 2),
            "ranges_auto_s": round(total - capture, 2), "calibration_s": round(total, 2),
            "target_s": MNV2_TARGET_S, "verdict": verdict(total <= MNV2_TARGET_S)}


# --- targets -----------------------------------------------------------------------------

def best(rows: list[dict], prefix: str) -> dict | None:
    chosen = [r for r in rows if r["variant"].startswith(prefix)]
    return max(chosen, key=lambda r: r["sqnr_db"]) if chosen else None


def targets(all_cases: list[Case]) -> list[dict]:
    checks = []
    for case in all_cases:
        baselines = [r for r in case.rows
                     if r["variant"].startswith(("TFLite", "onnxruntime", "ai-edge"))]
        ours = [r for r in case.rows if r["variant"] == "edgeopt w8a8 auto"]
        if baselines and ours:
            top, mine = max(baselines, key=lambda r: r["sqnr_db"]), max(
                ours, key=lambda r: r["sqnr_db"])
            gain = mine["sqnr_db"] - top["sqnr_db"]
            checks.append({"target": f"{case.name}: edgeopt int8 >= best baseline",
                           "detail": f"{mine['format']} {mine['sqnr_db']} dB vs "
                                     f"{top['format']} {top['variant']} {top['sqnr_db']} dB "
                                     f"({gain:+.2f} dB)", "gain_db": round(gain, 2),
                           "ok": gain >= 0})
        for fmt in ("tflite", "onnx"):
            rtn = [r for r in case.rows if r["format"] == fmt and r["variant"].endswith("rtn")]
            gptq = [r for r in case.rows if r["format"] == fmt and r["variant"].endswith("gptq")]
            if rtn and gptq:
                gain = gptq[0]["sqnr_db"] - rtn[0]["sqnr_db"]
                checks.append({"target": f"{case.name} {fmt}: GPTQ w4a8 >= RTN w4a8 + 3 dB",
                               "detail": f"{gain:+.2f} dB", "ok": gain >= 3})
            float_row = [r for r in case.rows if r["format"] == fmt and r["variant"] == "float"]
            if case.name == "digits" and gptq and float_row:
                drop = float_row[0]["metric"] - gptq[0]["metric"]
                checks.append({"target": f"digits {fmt}: w4a8 within 1 point of float",
                               "detail": f"{drop:+.2f} points", "ok": drop <= 1.0})
    gains = [c["gain_db"] for c in checks if "gain_db" in c]
    if gains:
        checks.append({"target": ">= 1 dB better than the best baseline on half the models",
                       "detail": f"{sum(g >= 1 for g in gains)} of {len(gains)}",
                       "ok": sum(g >= 1 for g in gains) * 2 >= len(gains)})
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--formats", default="tflite,onnx")
    parser.add_argument("--skip-mobilenet", action="store_true")
    parser.add_argument("--name", default=NAME,
                        help="results/<name>.json (a partial run should not replace the full one)")
    args = parser.parse_args(argv)
    formats = args.formats.split(",")
    all_cases = cases(args.models.split(","))
    results: dict = {"cases": [], "targets": []}
    with tempfile.TemporaryDirectory(prefix="edgeopt-calib-bench-") as tmp:
        workdir = Path(tmp)
        for case in all_cases:
            print(f"{case.name}: {len(case.calib)} calibration / {len(case.evaluation)} "
                  "evaluation samples", flush=True)
            if "onnx" in formats and case.onnx is not None:
                onnx_rows(case, workdir)
            if "tflite" in formats:
                tflite_rows(case, workdir)
            results["cases"].extend(case.rows)
        if not args.skip_mobilenet:
            results["mobilenetv2"] = mobilenet_timing(workdir)
    rows = [(r["model"], r["format"], r["variant"], r["sqnr_db"], r["metric"],
             r["metric_name"], r["size_kib"], r["seconds"]) for r in results["cases"]]
    print()
    print_table(("model", "format", "variant", "SQNR dB", "metric", "metric name", "KiB", "s"),
                rows)
    results["targets"] = targets(all_cases)
    if "mobilenetv2" in results:
        m = results["mobilenetv2"]
        results["targets"].append({"target": "MobileNetV2, 200 samples: calibration <= 30 s",
                                   "detail": f"{m['calibration_s']} s", "ok": m["calibration_s"]
                                   <= MNV2_TARGET_S})
    print()
    print_table(("target", "detail", ""), [(c["target"], c["detail"], verdict(c["ok"]))
                                           for c in results["targets"]])
    print(f"\nwrote {write_results(args.name, results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
