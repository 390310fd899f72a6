"""Build the bundled ``edgeopt`` sample from real data that ships offline.

The sample is a small digit classifier trained on scikit-learn's
``load_digits()`` (1,797 labelled 8x8 images), upscaled to 32x32 grayscale.
The script writes, into ``--out`` (default: the folder holding this script):

* ``digits_cnn.keras``  - the trained Keras 3 functional model (NHWC input
  ``image`` (N, 32, 32, 1), softmax output ``probs`` (N, 10));
* ``digits_cnn.onnx``   - the same network rebuilt by hand with
  ``onnx.helper`` in the layout of a typical PyTorch export (NCHW input
  ``image`` [N, 1, 32, 32], opset 17), checked against Keras with
  onnxruntime;
* ``digits_calib.npz``  - ``image``: float32 (200, 32, 32, 1) NHWC, no labels;
* ``digits_eval.npz``   - ``image``: float32 (400, 32, 32, 1) NHWC and
  ``labels``: int64 (400,);
* ``images/``           - 24 grayscale 32x32 PNGs from the calibration split,
  named ``digit_<index>_label<digit>.png``;
* ``labels.txt``        - class names 0..9, one per line.

Everything is seeded, so reruns on the same machine give the same model and
data: the ``.npz``, ``.onnx`` and PNG files are byte-identical, and the
``.keras`` archive holds identical weights (Keras itself stamps it with the
save date and Python object ids, so its bytes differ).

Run from the repository root::

    python samples/make_sample.py            # writes next to this script
    python samples/make_sample.py --out DIR  # writes somewhere else
"""

from __future__ import annotations

import argparse
import io
import os
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"

import keras
import numpy as np
import onnx
import onnxruntime as ort
import tensorflow as tf
from onnx import TensorProto, helper, numpy_helper
from PIL import Image
from sklearn.datasets import load_digits

SEED = 0
IMAGE_SIZE = 32
NUM_CLASSES = 10
N_CALIB = 200
N_EVAL = 400
N_PNG = 24
EPOCHS = 25
BATCH_SIZE = 32
MIN_ACCURACY = 0.95
ONNX_CHECK_IMAGES = 50
ONNX_TOLERANCE = 1e-4
ONNX_OPSET = 17
ONNX_IR_VERSION = 8
CONV_FILTERS = (32, 64, 128)


@dataclass(frozen=True)
class Split:
    """Images (float32 NHWC in [0, 1]) and their int64 labels."""

    images: np.ndarray
    labels: np.ndarray


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------


def upscale(image_8x8: np.ndarray, size: int = IMAGE_SIZE) -> np.ndarray:
    """Bilinearly resize one 8x8 digit (values 0..16) to ``size`` x ``size`` in [0, 1]."""
    scaled = (image_8x8 / 16.0).astype(np.float32)
    resized = Image.fromarray(scaled, mode="F").resize((size, size), Image.Resampling.BILINEAR)
    return np.clip(np.asarray(resized, dtype=np.float32), 0.0, 1.0)


def load_dataset() -> tuple[np.ndarray, np.ndarray]:
    """Return all digits as float32 (N, 32, 32, 1) images and int64 labels."""
    digits = load_digits()
    images = np.stack([upscale(img) for img in digits.images])[..., np.newaxis]
    return images.astype(np.float32), digits.target.astype(np.int64)


def split_dataset(images: np.ndarray, labels: np.ndarray, seed: int = SEED) -> dict[str, Split]:
    """Shuffle with a fixed seed and cut into eval (400), calib (200) and train (rest)."""
    order = np.random.default_rng(seed).permutation(len(images))
    parts = {
        "eval": order[:N_EVAL],
        "calib": order[N_EVAL : N_EVAL + N_CALIB],
        "train": order[N_EVAL + N_CALIB :],
    }
    return {name: Split(images[idx], labels[idx]) for name, idx in parts.items()}


# --------------------------------------------------------------------------
# Keras model
# --------------------------------------------------------------------------


def build_model() -> keras.Model:
    """Small functional CNN: 3 x (Conv+ReLU) with 2 max-pools, GAP, Dense, Softmax."""
    def conv(filters: int, name: str) -> keras.layers.Conv2D:
        return keras.layers.Conv2D(filters, 3, padding="same", activation="relu", name=name)

    inputs = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 1), name="image")
    x = conv(CONV_FILTERS[0], "conv1")(inputs)
    x = keras.layers.MaxPooling2D(name="pool1")(x)
    x = conv(CONV_FILTERS[1], "conv2")(x)
    x = keras.layers.MaxPooling2D(name="pool2")(x)
    x = conv(CONV_FILTERS[2], "conv3")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    x = keras.layers.Dense(NUM_CLASSES, name="fc")(x)
    outputs = keras.layers.Softmax(name="probs")(x)
    return keras.Model(inputs, outputs, name="digits_cnn")


def train_model(train: Split, seed: int = SEED) -> tuple[keras.Model, float]:
    """Train the CNN deterministically; return the model and fit wall time in seconds."""
    keras.utils.set_random_seed(seed)
    tf.config.experimental.enable_op_determinism()
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=1e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    start = time.perf_counter()
    model.fit(train.images, train.labels, epochs=EPOCHS, batch_size=BATCH_SIZE, shuffle=True,
              verbose=0)
    return model, time.perf_counter() - start


def accuracy(probs: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy of class probabilities against integer labels."""
    return float(np.mean(np.argmax(probs, axis=1) == labels))


# --------------------------------------------------------------------------
# ONNX export (by hand, PyTorch-style NCHW graph)
# --------------------------------------------------------------------------


Nodes = list[onnx.NodeProto]
Initializers = list[onnx.TensorProto]


def _conv_nodes(layer: keras.layers.Conv2D, name: str, x: str) -> tuple[Nodes, Initializers, str]:
    """Conv (HWIO -> OIHW weights, 'same' pads) followed by Relu."""
    kernel, bias = layer.get_weights()
    kh, kw = kernel.shape[:2]
    oihw = np.ascontiguousarray(kernel.transpose(3, 2, 0, 1))
    w = numpy_helper.from_array(oihw, f"{name}.weight")
    b = numpy_helper.from_array(bias.astype(np.float32), f"{name}.bias")
    pads = [kh // 2, kw // 2, kh - 1 - kh // 2, kw - 1 - kw // 2]
    conv = helper.make_node(
        "Conv", [x, w.name, b.name], [f"/{name}/Conv_output_0"], name=f"/{name}/Conv",
        dilations=[1, 1], group=1, kernel_shape=[kh, kw], pads=pads, strides=[1, 1],
    )
    relu = helper.make_node("Relu", conv.output, [f"/relu_{name}/Relu_output_0"],
                            name=f"/relu_{name}/Relu")
    return [conv, relu], [w, b], relu.output[0]


def _maxpool_node(name: str, x: str) -> tuple[onnx.NodeProto, str]:
    """2x2 max-pool with stride 2 (Keras MaxPooling2D defaults)."""
    node = helper.make_node(
        "MaxPool", [x], [f"/{name}/MaxPool_output_0"], name=f"/{name}/MaxPool",
        ceil_mode=0, dilations=[1, 1], kernel_shape=[2, 2], pads=[0, 0, 0, 0], strides=[2, 2],
    )
    return node, node.output[0]


def keras_to_onnx(model: keras.Model) -> onnx.ModelProto:
    """Rebuild the trained CNN as an NCHW ONNX graph with a dynamic batch dim ``N``."""
    nodes: Nodes = []
    inits: Initializers = []
    x = "image"
    for conv_name, pool_name in (("conv1", "pool1"), ("conv2", "pool2"), ("conv3", None)):
        conv_nodes, conv_inits, x = _conv_nodes(model.get_layer(conv_name), conv_name, x)
        nodes += conv_nodes
        inits += conv_inits
        if pool_name:
            pool, x = _maxpool_node(pool_name, x)
            nodes.append(pool)

    kernel, bias = model.get_layer("fc").get_weights()
    inits += [numpy_helper.from_array(kernel, "fc.weight"),
              numpy_helper.from_array(bias, "fc.bias")]
    gap, flat = "/gap/GlobalAveragePool_output_0", "/Flatten_output_0"
    nodes += [
        helper.make_node("GlobalAveragePool", [x], [gap], name="/gap/GlobalAveragePool"),
        helper.make_node("Flatten", [gap], [flat], name="/Flatten", axis=1),
        helper.make_node("Gemm", [flat, "fc.weight", "fc.bias"], ["/fc/Gemm_output_0"],
                         name="/fc/Gemm", alpha=1.0, beta=1.0, transB=0),
        helper.make_node("Softmax", ["/fc/Gemm_output_0"], ["probs"], name="/Softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        inputs=[helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                              ["N", 1, IMAGE_SIZE, IMAGE_SIZE])],
        outputs=[helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", NUM_CLASSES])],
        initializer=inits,
    )
    onnx_model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
        producer_name="edgeopt-samples",
        producer_version="1.0",
        doc_string="Digits CNN rebuilt from digits_cnn.keras by samples/make_sample.py (NCHW).",
    )
    onnx_model.ir_version = ONNX_IR_VERSION
    onnx.checker.check_model(onnx_model, full_check=True)
    return onnx_model


def run_onnx(onnx_model: onnx.ModelProto, images_nhwc: np.ndarray) -> np.ndarray:
    """Run the ONNX model on NHWC images (transposed to NCHW) with onnxruntime."""
    session = ort.InferenceSession(onnx_model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    nchw = np.ascontiguousarray(images_nhwc.transpose(0, 3, 1, 2))
    return session.run(["probs"], {"image": nchw})[0]


# --------------------------------------------------------------------------
# Writers
# --------------------------------------------------------------------------


def save_keras(model: keras.Model, path: Path) -> None:
    """Save the trained weights in a fresh, uncompiled copy of the model.

    Saving the compiled model would also store Adam's two moment slots per
    weight, tripling the file for no benefit to inference or conversion.
    """
    inference_model = build_model()
    inference_model.set_weights(model.get_weights())
    inference_model.save(path)


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    """Write a compressed ``.npz`` (as ``np.savez_compressed``) with fixed zip timestamps.

    ``np.savez_compressed`` stamps each member with the current time, so the
    file would change on every run; this writes the same format reproducibly.
    """
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buffer.getvalue())


def save_pngs(folder: Path, split: Split, count: int = N_PNG) -> None:
    """Write the first ``count`` images of ``split`` as 8-bit grayscale PNGs."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("digit_*.png"):
        old.unlink()
    for i in range(count):
        pixels = np.round(split.images[i, :, :, 0] * 255.0).astype(np.uint8)
        Image.fromarray(pixels, mode="L").save(folder / f"digit_{i:03d}_label{split.labels[i]}.png")


def save_labels(path: Path) -> None:
    """Write class names 0..9, one per line."""
    path.write_text("".join(f"{d}\n" for d in range(NUM_CLASSES)))


def dir_size(folder: Path) -> int:
    """Total size in bytes of all files under ``folder``."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="output folder (default: the folder holding this script)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    splits = split_dataset(*load_dataset())
    train, calib, evaluation = splits["train"], splits["calib"], splits["eval"]
    print(f"data: train={len(train.images)} calib={len(calib.images)} "
          f"eval={len(evaluation.images)}")

    model, train_seconds = train_model(train)
    keras_probs = model.predict(evaluation.images, verbose=0)
    keras_acc = accuracy(keras_probs, evaluation.labels)
    if keras_acc < MIN_ACCURACY:
        raise RuntimeError(f"Keras eval accuracy {keras_acc:.4f} is below {MIN_ACCURACY}")

    onnx_model = keras_to_onnx(model)
    onnx_probs = run_onnx(onnx_model, evaluation.images)
    n = ONNX_CHECK_IMAGES
    max_diff = float(np.max(np.abs(onnx_probs[:n] - keras_probs[:n])))
    assert max_diff < ONNX_TOLERANCE, f"ONNX and Keras differ by {max_diff:.2e} on {n} images"
    onnx_acc = accuracy(onnx_probs, evaluation.labels)

    save_keras(model, out / "digits_cnn.keras")
    onnx.save(onnx_model, out / "digits_cnn.onnx")
    save_npz(out / "digits_calib.npz", image=calib.images)
    save_npz(out / "digits_eval.npz", image=evaluation.images, labels=evaluation.labels)
    save_pngs(out / "images", calib)
    save_labels(out / "labels.txt")

    print(f"params: {model.count_params():,}")
    print(f"training: {EPOCHS} epochs in {train_seconds:.1f} s")
    print(f"eval accuracy: keras={keras_acc:.4f} onnx={onnx_acc:.4f} "
          f"(max |diff| on {ONNX_CHECK_IMAGES} images: {max_diff:.2e})")
    files = ("digits_cnn.keras", "digits_cnn.onnx", "digits_calib.npz", "digits_eval.npz",
             "labels.txt")
    for name in files:
        print(f"  {name:<18} {(out / name).stat().st_size / 1024:8.1f} KiB")
    print(f"  {'images/':<18} {dir_size(out / 'images') / 1024:8.1f} KiB ({N_PNG} PNGs)")
    print(f"total {out}: {dir_size(out) / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
