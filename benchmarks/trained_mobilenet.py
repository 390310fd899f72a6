"""A trained MobileNetV2-0.35 (96x96) on real photographs, for quality benchmarks.

`keras.applications.MobileNetV2(alpha=0.35, input_shape=(96, 96, 3), weights=None)` with a
classifier over the photographs scikit-image ships in its wheel (no download): each
sample is a random square crop (a third to all of the photo's short side, mirrored at
random) resized to 96x96 and scaled to [-1, 1] as MobileNetV2 expects; its label is the
photograph it came from. Training, calibration and evaluation crops are drawn with
different seeds, so no crop is shared. Trained briefly (Adam, a few epochs): enough for
BatchNorm statistics and activations of a real trained network, which is what the
quantizers are compared on (an untrained MobileNetV2 outputs a constant softmax).

    python benchmarks/trained_mobilenet.py OUT_DIR     # OUT_DIR/model.keras, calib.npz, eval.npz

The model is cached in ~/.cache/edgeopt/benchmarks/trained_mobilenet/ (keyed by the
settings), so benchmarks that share it train it once.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

SIZE = 96
ALPHA = 0.35
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry",
          "hubble_deep_field", "retina", "camera", "coins", "moon", "brick", "grass")
CACHE = Path.home() / ".cache" / "edgeopt" / "benchmarks" / "trained_mobilenet"
BN_IMAGES = 256
DEFAULTS = {"train": 1200, "calib": 200, "eval": 200, "epochs": 6, "seed": 0}


def photographs() -> list[np.ndarray]:
    import skimage.data

    found = []
    for name in PHOTOS:
        image = np.asarray(getattr(skimage.data, name)())
        if image.ndim == 2:
            image = np.stack([image] * 3, axis=-1)
        found.append(np.ascontiguousarray(image[..., :3]).astype(np.uint8))
    return found


def crops(photos: list[np.ndarray], count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(images in [-1, 1] NHWC float32, labels): random crops, cycling through the photos."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    images = np.empty((count, SIZE, SIZE, 3), np.float32)
    labels = np.arange(count) % len(photos)
    for i, label in enumerate(labels):
        photo = photos[label]
        h, w = photo.shape[:2]
        side = int(min(h, w) * rng.uniform(0.33, 1.0))
        y, x = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        crop = photo[y:y + side, x:x + side]
        crop = crop[:, ::-1] if rng.random() < 0.5 else crop
        resized = Image.fromarray(np.ascontiguousarray(crop)).resize((SIZE, SIZE),
                                                                     Image.BILINEAR)
        images[i] = np.asarray(resized, np.float32) / 127.5 - 1.0
    return images, labels.astype(np.int64)


def reestimate_batchnorm(model, images: np.ndarray) -> None:
    """BatchNorm moving statistics set to the batch statistics of `images`: with momentum
    0.999 a few epochs leave them far from the data (chance-level inference accuracy)."""
    import keras

    layers = [la for la in model.layers if isinstance(la, keras.layers.BatchNormalization)]
    for layer in layers:
        layer.momentum = 0.0
    model(images, training=True)
    for layer in layers:
        layer.momentum = 0.999


def _key(settings: dict) -> str:
    text = json.dumps({**settings, "alpha": ALPHA, "size": SIZE, "photos": PHOTOS},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def train(folder: Path, settings: dict) -> dict:
    """Write model.keras, calib.npz, eval.npz and info.json into `folder`."""
    import keras

    keras.utils.set_random_seed(settings["seed"])
    photos = photographs()
    x, y = crops(photos, settings["train"], settings["seed"] + 1)
    model = keras.applications.MobileNetV2(input_shape=(SIZE, SIZE, 3), alpha=ALPHA,
                                           weights=None, classes=len(photos))
    model.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    start = time.perf_counter()
    model.fit(x, y, batch_size=32, epochs=settings["epochs"], verbose=0)
    reestimate_batchnorm(model, x[:BN_IMAGES])
    seconds = time.perf_counter() - start
    folder.mkdir(parents=True, exist_ok=True)
    model.save(folder / "model.keras")
    name = model.inputs[0].name
    calib, _ = crops(photos, settings["calib"], settings["seed"] + 2)
    evaluation, labels = crops(photos, settings["eval"], settings["seed"] + 3)
    np.savez(folder / "calib.npz", **{name: calib})
    np.savez(folder / "eval.npz", **{name: evaluation, "labels": labels})
    accuracy = float(np.mean(np.argmax(model.predict(evaluation, verbose=0), 1) == labels))
    info = {**settings, "alpha": ALPHA, "size": SIZE, "classes": len(photos),
            "parameters": int(model.count_params()), "input_name": name,
            "train_seconds": round(seconds, 1), "bn_reestimated_on": BN_IMAGES,
            "float_eval_top1": round(accuracy, 4),
            "images": f"scikit-image photographs ({len(photos)}): random crops"}
    (folder / "info.json").write_text(json.dumps(info, indent=2))
    return info


def trained_mobilenet(out: Path, **overrides) -> dict:
    """Copy the (cached, else freshly trained) model and data into `out`; its info."""
    settings = {**DEFAULTS, **overrides}
    cached = CACHE / _key(settings)
    if not (cached / "info.json").exists():
        staging = cached.with_name(cached.name + f".tmp{os.getpid()}")
        train(staging, settings)
        shutil.rmtree(cached, ignore_errors=True)
        staging.rename(cached)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("model.keras", "calib.npz", "eval.npz", "info.json"):
        shutil.copyfile(cached / name, out / name)
    return json.loads((out / "info.json").read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    for key, value in DEFAULTS.items():
        parser.add_argument(f"--{key}", type=int, default=value)
    args = parser.parse_args(argv)
    info = trained_mobilenet(args.out, **{k: getattr(args, k) for k in DEFAULTS})
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
