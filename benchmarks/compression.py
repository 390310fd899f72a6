"""Structured pruning + label-free distillation against magnitude pruning (tfmot), measured.

Model: a MobileNetV2-style inverted-residual net (ReLU6, BatchNormalization, depthwise and
1x1 convs, residual adds, about 12 M MACs) trained here on the digits sample's training
split: scikit-learn's 8x8 digits, upscaled to 32x32 as samples/make_sample.py does (same
seeded split: 1,197 train, 200 calibration, 400 evaluation), repeated on 3 channels. The
trained model is cached under ~/.cache/edgeopt/benchmarks/ so reruns skip training.

Rows (every latency is LiteRT with XNNPACK on one thread, the thread's CPU clock, median
of --rounds interleaved rounds; accuracy is top-1 of the .tflite in LiteRT on the 400
held-out images; int8 files come from edgeopt's calibration core on the 200 calibration
images; float files from edgeopt's converter):
- unpruned: float and int8;
- edgeopt structured: `prune_structured(model, 0.5, "taylor", PruneConfig(channel_multiple=
  16))` (half the MACs, channels removed in tiles of 16 and the model rebuilt), then
  `distill` with the unpruned float .tflite as teacher (run in LiteRT) on the training
  images without their labels; float and int8. Also the same target without tiles
  (channel_multiple=1), undistilled: its latency, to show what the tiles buy;
- tfmot magnitude: tensorflow-model-optimization's prune_low_magnitude at the same 50%
  sparsity, fine-tuned on the same unlabeled images with the teacher's top-1 as labels;
  float .tflite dense and in TFLite's sparse format (converter EXPERIMENTAL_SPARSITY);
- edgeopt sparsify: one-shot 50% magnitude sparsity (unstructured, and 2:4), no retraining;
  and unstructured, distilled label-free, sparsified again.

Targets: structured float and int8 latency <= 0.65x the unpruned model's; distilled
accuracy within 1.5 points of the unpruned float model.

    python benchmarks/compression.py                  # ~20 min on 2 cores (+4 to train)
    python benchmarks/compression.py --retrain --rounds 5 --criterion l1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
from _common import REPO, ForeignLoad, print_table, subprocess_env, verdict, write_results

NAME = "compression"
MAX_LATENCY_RATIO = 0.65
MAX_ACCURACY_DROP = 1.5  # points of top-1
SPARSITY = 0.5
SEED = 0
# (expansion, output channels, repeats, first stride) per stage, after a 3x3 stride-2 stem.
STAGES = ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 3, 2), (6, 96, 2, 1))
STEM, HEAD = 32, 256
# Keras' default 0.99 left the moving statistics of a model trained ~600 steps from scratch
# far from the final weights' (38% top-1 in inference mode, 100% in training mode).
BN_MOMENTUM = 0.9
ARCH_VERSION = f"v2-{STAGES}-{STEM}-{HEAD}-bn{BN_MOMENTUM}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--criterion", default="taylor", help="pruning criterion")
    parser.add_argument("--ratio", type=float, default=0.5, help="share of MACs to remove")
    parser.add_argument("--channel-multiple", type=int, default=16,
                        help="pruned layers keep a multiple of this many channels (PruneConfig"
                             ".channel_multiple; 16 = XNNPACK's float tile on AVX-512)")
    parser.add_argument("--sparse-distill-epochs", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=15, help="training epochs (first run)")
    parser.add_argument("--distill-epochs", type=int, default=20)
    parser.add_argument("--tfmot-epochs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved latency rounds")
    parser.add_argument("--runs", type=int, default=200, help="timed runs per measurement")
    parser.add_argument("--retrain", action="store_true", help="ignore the cached model")
    parser.add_argument("--keep", type=Path, default=None, help="keep the .tflite files here")
    parser.add_argument("--name", default=NAME)
    parser.add_argument("--tfmot-worker", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# --- data and model ---------------------------------------------------------------------

def load_digits_splits() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """make_sample.py's seeded split, as 3-channel 32x32 images in [0, 1]."""
    sys.path.insert(0, str(REPO / "samples"))
    from make_sample import load_dataset, split_dataset

    splits = split_dataset(*load_dataset())
    return {name: (np.repeat(s.images, 3, axis=-1), s.labels) for name, s in splits.items()}


def build_net(keras) -> object:
    """The MobileNetV2-style net; ``keras`` is Keras 3 or tf_keras (same layers, same order).

    Strided convs pad explicitly by 1 on each side (ZeroPadding2D + valid), the padding
    XNNPACK's sparse path asks for.
    """
    L = keras.layers

    def conv_bn(x, filters: int, kernel: int = 1, stride: int = 1, act: bool = True):
        if stride == 2:
            x = L.ZeroPadding2D(1)(x)
        x = L.Conv2D(filters, kernel, strides=stride, use_bias=False,
                     padding="valid" if stride == 2 or kernel == 1 else "same")(x)
        x = L.BatchNormalization(momentum=BN_MOMENTUM)(x)
        return L.ReLU(6.0)(x) if act else x

    def block(x, expansion: int, out: int, stride: int):
        y = conv_bn(x, x.shape[-1] * expansion) if expansion != 1 else x
        if stride == 2:
            y = L.ZeroPadding2D(1)(y)
        y = L.DepthwiseConv2D(3, strides=stride, use_bias=False,
                              padding="valid" if stride == 2 else "same")(y)
        y = L.ReLU(6.0)(L.BatchNormalization(momentum=BN_MOMENTUM)(y))
        y = conv_bn(y, out, act=False)
        return L.Add()([x, y]) if stride == 1 and x.shape[-1] == out else y

    inputs = keras.Input((32, 32, 3), name="image")
    x = conv_bn(inputs, STEM, 3, 2)
    for expansion, out, repeats, stride in STAGES:
        for i in range(repeats):
            x = block(x, expansion, out, stride if i == 0 else 1)
    x = L.GlobalAveragePooling2D()(conv_bn(x, HEAD))
    x = L.Dropout(0.2)(x)
    return keras.Model(inputs, L.Dense(10, name="logits")(x), name="mnv2_digits")


def shifted(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random shifts of up to 2 pixels: the digits are small, a little jitter helps."""
    dy, dx = rng.integers(-2, 3, size=2)
    return np.roll(images, (int(dy), int(dx)), axis=(1, 2))


def train(splits: dict, epochs: int) -> object:
    import keras

    keras.utils.set_random_seed(SEED)
    model = build_net(keras)
    images, labels = splits["train"]
    steps = epochs * int(np.ceil(len(images) / 32))
    schedule = keras.optimizers.schedules.CosineDecay(3e-3, steps)
    model.compile(keras.optimizers.Adam(schedule),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(SEED)
    for _ in range(epochs):
        model.fit(shifted(images, rng), labels, batch_size=32, epochs=1, verbose=0)
    recalibrate_bn(model, images)
    return model


def recalibrate_bn(model, images: np.ndarray, passes: int = 3) -> None:
    """Re-estimate the BatchNormalization moving statistics for the final weights."""
    for _ in range(passes):
        for start in range(0, len(images), 64):
            model(images[start:start + 64], training=True)


def cache_dir() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "edgeopt" / "benchmarks" / "compression"


def trained_model(splits: dict, args) -> tuple[object, float | None]:
    """The cached trained model, or a newly trained one (and its training seconds)."""
    import keras

    path = cache_dir() / "mnv2_digits.keras"
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists() and not args.retrain:
        if json.loads(meta.read_text()).get("arch") == ARCH_VERSION:
            return keras.models.load_model(path), None
    start = time.perf_counter()
    model = train(splits, args.epochs)
    seconds = time.perf_counter() - start
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    meta.write_text(json.dumps({"arch": ARCH_VERSION, "epochs": args.epochs,
                                "train_seconds": round(seconds, 1)}))
    return model, seconds


# --- files: float and int8 .tflite through edgeopt ---------------------------------------

def float_tflite(model, folder: Path, name: str) -> Path:
    """Save ``model`` as .keras and convert it with edgeopt's float converter."""
    from edgeopt.converters.float_tflite import to_float_tflite
    from edgeopt.model import load_model

    keras_path = folder / f"{name}.keras"
    model.save(keras_path)
    work = folder / f"{name}_work"
    work.mkdir(exist_ok=True)
    out = folder / f"{name}_float.tflite"
    out.write_bytes(to_float_tflite(load_model(keras_path), work, keras_model=model).tflite)
    return out


def int8_tflite(float_path: Path, calib: np.ndarray) -> Path:
    """w8a8 with edgeopt's calibration core (ai-edge-quantizer writes the file)."""
    from edgeopt.quantize import QuantConfig, quantize_tflite

    result = quantize_tflite(float_path.read_bytes(), {"image": calib},
                             QuantConfig(layer_report=False))
    out = float_path.with_name(float_path.name.replace("_float", "_int8"))
    out.write_bytes(result.model)
    return out


def tflite_accuracy(path: Path, images: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy (percent) of the .tflite in LiteRT."""
    from edgeopt.runtime import TFLiteRunner

    runner = TFLiteRunner(path, num_threads=1)
    outputs = runner.run({runner.input_names[0]: images})[0]
    return round(100.0 * float((outputs.argmax(axis=-1) == labels).mean()), 2)


def latencies(paths: dict[str, Path], args) -> dict[str, dict]:
    """Median latency per file, median over interleaved rounds (other work moves timings)."""
    from edgeopt.compression import MeasureConfig, measure_tflite

    config = MeasureConfig(runs=args.runs, min_secs=1.0, threads=1, clock="cpu")
    rounds: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.rounds):
        for name, path in paths.items():
            rounds[name].append(measure_tflite(path.read_bytes(), config).latency.median)
    return {name: {"median_ms": round(float(np.median(v)), 4), "rounds_ms": [round(x, 4)
                   for x in v]} for name, v in rounds.items()}


# --- edgeopt: structured pruning and distillation ----------------------------------------

def distill_config(epochs: int):
    from edgeopt.compression import DistillConfig

    return DistillConfig(epochs=epochs, patience=5, temperature=4.0, learning_rate=1e-3,
                         augment=("shift",), seed=SEED)


def show_epoch(record: dict) -> None:
    print(f"  distill epoch {record['epoch']}: val_loss {record['val_loss']:.4f}, "
          f"agreement {record['agreement']:.3f}", flush=True)


def untiled_files(model, splits: dict, folder: Path, args) -> tuple[dict[str, Path], int]:
    """The same MAC target without channel tiles (channel_multiple=1), for latency only;
    and its MACs."""
    from edgeopt.compression import PruneConfig, prune_structured

    pruned = prune_structured(model, args.ratio, args.criterion, splits["train"][0][:64],
                              PruneConfig(channel_multiple=1))
    path = float_tflite(pruned.model, folder, "structured_untiled_undistilled")
    return {"structured_untiled_undistilled_float": path,
            "structured_untiled_undistilled_int8": int8_tflite(path, splits["calib"][0])}, \
        pruned.macs_after

def prune_and_distill(model, teacher_path: Path, splits: dict, folder: Path,
                      args) -> tuple[object, dict]:
    """Prune, convert the pruned model as it is (for its accuracy), then distill it."""
    from edgeopt.compression import (
        PruneConfig,
        count_macs,
        distill,
        prune_structured,
        runtime_teacher,
    )

    images = splits["train"][0]
    start = time.perf_counter()
    pruned = prune_structured(model, args.ratio, args.criterion, images[:64],
                              PruneConfig(channel_multiple=args.channel_multiple))
    prune_s = time.perf_counter() - start
    float_tflite(pruned.model, folder, "pruned_undistilled")
    teacher = runtime_teacher(teacher_path, pruned.model, num_threads=1)
    start = time.perf_counter()
    result = distill(teacher, pruned.model, images, config=distill_config(args.distill_epochs),
                     progress=show_epoch)
    record = {"criterion": args.criterion, "channel_multiple": args.channel_multiple,
              "macs_before": pruned.macs_before,
              "macs_after": pruned.macs_after, "macs_check": count_macs(result.student),
              "params_before": int(model.count_params()),
              "params_after": int(result.student.count_params()),
              "prune_seconds": round(prune_s, 1),
              "distill_seconds": round(time.perf_counter() - start, 1),
              "distill_epochs_run": len(result.history) - 1, "best_epoch": result.best_epoch,
              "held_back_agreement": result.history[result.best_epoch]["agreement"],
              "group_ratios": pruned.group_ratios}
    return result.student, record


# --- tensorflow-model-optimization, in its own process (it switches TF to tf_keras) ---------

def tfmot_worker(folder: Path, args) -> None:
    """Rebuild the net in tf_keras, load the weights, prune 50% by magnitude, fine-tune."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tensorflow_model_optimization as tfmot
    import tf_keras

    data = np.load(folder / "tfmot_in.npz")
    weights = [data[f"w{i}"] for i in range(int(data["count"]))]
    model = build_net(tf_keras)
    model.set_weights(weights)
    images, targets = data["images"], data["targets"]
    steps = int(np.ceil(len(images) / 32)) * args.tfmot_epochs
    schedule = tfmot.sparsity.keras.PolynomialDecay(0.0, SPARSITY, 0, int(0.7 * steps),
                                                    frequency=10)
    pruned = tfmot.sparsity.keras.prune_low_magnitude(model, pruning_schedule=schedule)
    pruned.compile(tf_keras.optimizers.Adam(1e-4),
                   tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    start = time.perf_counter()
    rng = np.random.default_rng(SEED)
    callbacks = [tfmot.sparsity.keras.UpdatePruningStep()]
    for _ in range(args.tfmot_epochs):
        pruned.fit(shifted(images, rng), targets, batch_size=32, epochs=1, verbose=0,
                   callbacks=callbacks)
    stripped = tfmot.sparsity.keras.strip_pruning(pruned)
    for sparse in (False, True):
        converter = tf.lite.TFLiteConverter.from_keras_model(stripped)
        if sparse:
            converter.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
        name = "tfmot_sparse_float.tflite" if sparse else "tfmot_float.tflite"
        (folder / name).write_bytes(converter.convert())
    kernels = [w for w in stripped.get_weights() if w.ndim >= 2]
    zeros = sum(int((k == 0).sum()) for k in kernels) / sum(k.size for k in kernels)
    (folder / "tfmot_out.json").write_text(json.dumps({
        "tfmot_version": tfmot.__version__, "fine_tune_seconds":
        round(time.perf_counter() - start, 1), "kernel_zero_share": round(zeros, 4),
        "epochs": args.tfmot_epochs}))


def run_tfmot(model, teacher_targets: np.ndarray, images: np.ndarray, folder: Path,
              args) -> dict:
    """The tfmot rows' files and facts, or the reason it could not run."""
    weights = model.get_weights()
    np.savez(folder / "tfmot_in.npz", count=len(weights), images=images,
             targets=teacher_targets, **{f"w{i}": w for i, w in enumerate(weights)})
    command = [sys.executable, __file__, "--tfmot-worker", str(folder),
               "--tfmot-epochs", str(args.tfmot_epochs)]
    proc = subprocess.run(command, capture_output=True, text=True, env=subprocess_env())
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        return {"error": lines[-1] if lines else f"exit status {proc.returncode}"}
    return json.loads((folder / "tfmot_out.json").read_text())


# --- edgeopt: one-shot magnitude sparsity ---------------------------------------------------

def write_sparse(model, folder: Path, tag: str) -> dict[str, Path]:
    """Dense and (when smaller) sparse-format float .tflite of a sparsified model."""
    from edgeopt.compression.tflite_sparse import write_sparse_tflite

    written = write_sparse_tflite(model)
    files = {f"{tag}_float": folder / f"{tag}_float.tflite"}
    files[f"{tag}_float"].write_bytes(written.dense_content)
    if written.sparse_format:
        files[f"{tag}_sparse_float"] = folder / f"{tag}_sparse_float.tflite"
        files[f"{tag}_sparse_float"].write_bytes(written.content)
    return files


def sparsify_files(model, teacher, images: np.ndarray, folder: Path,
                   args) -> dict[str, Path]:
    """One-shot 50% magnitude sparsity (unstructured, 2:4); then unstructured + distillation
    + sparsify again (what `edgeopt compress --pattern unstructured --distill` does)."""
    from edgeopt.compression import SparsityConfig, distill, sparsify

    files = {}
    for pattern, tag in (("unstructured", "sparsify"), ("2:4", "sparsify_24")):
        result = sparsify(model, SparsityConfig(sparsity=SPARSITY, pattern=pattern))
        files.update(write_sparse(result.model, folder, tag))
    student = sparsify(model, SparsityConfig(sparsity=SPARSITY)).model
    distill(teacher, student, images, config=distill_config(args.sparse_distill_epochs),
            progress=show_epoch)
    again = sparsify(student, SparsityConfig(sparsity=SPARSITY)).model
    files.update(write_sparse(again, folder, "sparsify_distilled"))
    return files


# --- the run ----------------------------------------------------------------------------------

def make_files(model, splits: dict, folder: Path, args) -> tuple[dict[str, Path], dict]:
    from edgeopt.compression import runtime_teacher

    calib, images = splits["calib"][0], splits["train"][0]
    files = {"unpruned_float": float_tflite(model, folder, "unpruned")}
    files["unpruned_int8"] = int8_tflite(files["unpruned_float"], calib)
    student, facts = prune_and_distill(model, files["unpruned_float"], splits, folder, args)
    files["pruned_undistilled_float"] = folder / "pruned_undistilled_float.tflite"
    files["structured_float"] = float_tflite(student, folder, "structured")
    files["structured_int8"] = int8_tflite(files["structured_float"], calib)
    untiled, facts["untiled_macs_after"] = untiled_files(model, splits, folder, args)
    files.update(untiled)
    teacher = runtime_teacher(files["unpruned_float"], model, num_threads=1)
    facts["tfmot"] = run_tfmot(model, teacher(images).argmax(axis=-1), images, folder, args)
    for name in ("tfmot_float", "tfmot_sparse_float"):
        if (folder / f"{name}.tflite").exists():
            files[name] = folder / f"{name}.tflite"
    files.update(sparsify_files(model, teacher, images, folder, args))
    return files, facts


def measure(files: dict[str, Path], splits: dict, args) -> dict[str, dict]:
    images, labels = splits["eval"]
    timed = {k: v for k, v in files.items() if k != "pruned_undistilled_float"}
    timings = latencies(timed, args)
    return {name: {"size_bytes": path.stat().st_size,
                   "accuracy": tflite_accuracy(path, images, labels), **timings.get(name, {})}
            for name, path in files.items()}


def verdicts(rows: dict[str, dict]) -> dict[str, dict]:
    def ratio(a: str, b: str) -> float:
        return round(rows[a]["median_ms"] / rows[b]["median_ms"], 3)

    float_ratio = ratio("structured_float", "unpruned_float")
    int8_ratio = ratio("structured_int8", "unpruned_int8")
    drop = round(rows["unpruned_float"]["accuracy"] - rows["structured_float"]["accuracy"], 2)
    return {"float_latency_ratio": {"value": float_ratio, "target": MAX_LATENCY_RATIO,
                                    "ok": float_ratio <= MAX_LATENCY_RATIO},
            "int8_latency_ratio": {"value": int8_ratio, "target": MAX_LATENCY_RATIO,
                                   "ok": int8_ratio <= MAX_LATENCY_RATIO},
            "accuracy_drop_points": {"value": drop, "target": MAX_ACCURACY_DROP,
                                     "ok": drop <= MAX_ACCURACY_DROP}}


def print_rows(rows: dict[str, dict]) -> None:
    def base(name: str) -> str:
        return "unpruned_int8" if name.endswith("int8") else "unpruned_float"

    table = []
    for name, row in rows.items():
        latency = row.get("median_ms")
        ratio = "" if latency is None else f"{latency / rows[base(name)]['median_ms']:.2f}x"
        table.append((name, f"{row['size_bytes']:,}", "" if latency is None else
                      f"{latency:.4f}", ratio, f"{row['accuracy']:.2f}"))
    print_table(("model", "bytes", "latency ms (median)", "vs unpruned", "top-1 %"), table)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.tfmot_worker is not None:
        tfmot_worker(args.tfmot_worker, args)
        return 0
    splits = load_digits_splits()
    model, train_seconds = trained_model(splits, args)
    with tempfile.TemporaryDirectory(prefix="edgeopt-compression-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        with ForeignLoad() as load:
            files, facts = make_files(model, splits, folder, args)
            rows = measure(files, splits, args)
    print_rows(rows)
    checks = verdicts(rows)
    for name, check in checks.items():
        print(f"{name}: {check['value']} (target {check['target']}) {verdict(check['ok'])}")
    tfmot = facts["tfmot"]
    print("tfmot:", tfmot.get("error") or json.dumps(tfmot))
    path = write_results(args.name, {
        "model": {"arch": ARCH_VERSION, "train_seconds": train_seconds,
                  "macs": facts["macs_before"]},
        "settings": {k: v for k, v in vars(args).items() if k not in ("keep", "tfmot_worker")},
        "rows": rows, "checks": checks, "facts": facts, "foreign_load": load.result()})
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
