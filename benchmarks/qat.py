"""Quantization-aware training against post-training int8 on a MobileNetV3-style net.

The model: a small MobileNetV3-style network (hard-swish activations, squeeze-excite
blocks with hard-sigmoid gates, depthwise convolutions, BatchNorm) trained here on
scikit-learn's handwritten digits (1,797 real 8x8 scans shipped in the wheel, upscaled to
32x32, no download). Such nets are the known hard case of full-integer quantization: one
per-tensor int8 range for depthwise outputs whose channels differ by orders of magnitude.

One run compares, on the same held-out digits, in LiteRT:

* float (the Keras model converted to a float .tflite);
* the TFLite converter's full-integer int8 (its own min-max calibration);
* ai-edge-quantizer's static int8 (min-max, per-channel weights);
* edgeopt's post-training quantization (`edgeopt quantize`, ranges `auto`);
* edgeopt's QAT (`edgeopt quantize --qat`): labels + distillation, then the same writer.

    python benchmarks/qat.py [--epochs 10] [--workdir /tmp/qat-bench]   # prints a table,
                                                    # writes benchmarks/results/qat.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
from _common import machine_info, package_versions, print_table, write_results

SIZE = 32
SPLITS = {"train": 900, "calib": 450}  # the rest (447) is the held-out evaluation set
BLOCKS = ((48, 24, 2, True), (72, 24, 1, True), (96, 40, 2, True), (120, 40, 1, True))


def digits() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Digits upscaled to 32x32 in [0, 1] (bilinear), shuffled once and split three ways."""
    from PIL import Image
    from sklearn.datasets import load_digits

    data = load_digits()
    images = np.stack([np.asarray(Image.fromarray((im * 16).astype(np.uint8)).resize(
        (SIZE, SIZE), Image.BILINEAR), np.float32) / 255.0 for im in data.images])[..., None]
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


def accuracy(content: bytes, data) -> float:
    from edgeopt.runtime import TFLiteRunner, run_dataset

    x, y = data["eval"]
    runner = TFLiteRunner(content)
    out = run_dataset(runner, {runner.input_names[0]: x})[0]
    return float((out.argmax(-1) == y).mean() * 100)


def baselines(model_path: Path, data, workdir: Path) -> dict[str, bytes]:
    """Float and the two libraries' own int8 from the same Keras model."""
    from edgeopt.calibration import tflite_aeq, tflite_converter
    from edgeopt.converters.tf_source import from_keras, run_converter
    from edgeopt.model import load_keras

    source = from_keras(load_keras(model_path), workdir)
    float_tflite = run_converter(source.converter(), "float")
    calib = {"image": data["calib"][0]}
    return {"float": float_tflite,
            "TFLite converter int8": tflite_converter.full_integer(source, calib, "float32"),
            "ai-edge-quantizer static int8": tflite_aeq.full_integer(float_tflite, calib,
                                                                    "float32")}


def edgeopt_runs(model_path: Path, workdir: Path, epochs: int, labelled: bool) -> dict:
    from edgeopt.quantize import QuantizeRequest, quantize_file

    runs = {}
    for name, qat in (("edgeopt PTQ (auto)", False), ("edgeopt QAT", True)):
        calib = workdir / ("calib.npz" if labelled or not qat else "calib_unlabelled.npz")
        out = workdir / f"{'qat' if qat else 'ptq'}.tflite"
        started = time.monotonic()
        record = quantize_file(QuantizeRequest(str(model_path), str(calib), str(out),
                                               eval=str(workdir / "eval.npz"), qat=qat,
                                               qat_epochs=epochs))
        runs[name] = {"content": out.read_bytes(), "seconds": time.monotonic() - started,
                      "record": record}
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10, help="QAT epochs at most")
    parser.add_argument("--train-epochs", type=int, default=40)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/edgeopt-qat-bench"))
    parser.add_argument("--unlabelled", action="store_true",
                        help="QAT by distillation only (no labels in its --calib)")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    data = digits()
    np.savez(args.workdir / "calib.npz", image=data["calib"][0], labels=data["calib"][1])
    np.savez(args.workdir / "calib_unlabelled.npz", image=data["calib"][0])
    np.savez(args.workdir / "eval.npz", image=data["eval"][0], labels=data["eval"][1])
    model_path = train_float(data, args.train_epochs, args.workdir)
    models = baselines(model_path, data, args.workdir)
    runs = edgeopt_runs(model_path, args.workdir, args.epochs, not args.unlabelled)
    models.update({k: v["content"] for k, v in runs.items()})
    scores = {name: accuracy(content, data) for name, content in models.items()}
    rows = [[name, f"{acc:.2f}", f"{acc - scores['float']:+.2f}", len(models[name]) // 1024]
            for name, acc in scores.items()]
    print_table(["model", "top-1 %", "vs float", "KiB"], rows)
    qat = runs["edgeopt QAT"]["record"].get("qat") or {}
    print(f"QAT step: {qat.get('seconds')} s ({qat.get('epochs_run')} epochs, best "
          f"{qat.get('best_epoch')}); whole `edgeopt quantize --qat`: "
          f"{runs['edgeopt QAT']['seconds']:.0f} s")
    write_results("qat_unlabelled" if args.unlabelled else "qat", {
        "eval_samples": int(len(data["eval"][1])), "top1_percent": scores,
        "drop_points": {k: round(v - scores["float"], 3) for k, v in scores.items()},
        "qat": {k: v for k, v in qat.items() if k != "history"}, "qat_history": qat.get("history"),
        "quantize_seconds": {k: round(v["seconds"], 1) for k, v in runs.items()},
        "labelled": not args.unlabelled, "versions": package_versions(),
        "machine": machine_info()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
