"""A zoo of .tflite models for the delegate benchmarks: Keras applications with random
weights at small input sizes, float and int8, plus tiny models with awkward ops. Float
models keep Keras' dynamic batch; int8 models are built with batch 1, as embedded
deployments ship them.

    python benchmarks/delegates_zoo.py --out /tmp/zoo      # write every model once

`build_zoo(folder)` returns ``{name: path}`` and reuses files already in ``folder``, so the
benchmarks can share one build (``--cache DIR``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SEED = 0


def _keras():
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import keras

    keras.utils.set_random_seed(SEED)
    return keras


def _app(name: str, size: int, **kwargs):
    keras = _keras()
    builder = getattr(keras.applications, name)
    return builder(weights=None, input_shape=(size, size, 3), classes=10, **kwargs)


def awkward_model():
    """Ops that several delegates reject: GELU, LeakyReLU, PReLU, CUMSUM, resize, split,
    strided slice with shrink, transposed conv, batch matmul, division."""
    keras = _keras()
    import tensorflow as tf

    inputs = keras.Input((16, 16, 8), batch_size=1)
    x = keras.layers.Conv2D(8, 3, padding="same", activation="gelu")(inputs)
    x = keras.layers.LeakyReLU(0.2)(x)
    x = keras.layers.PReLU(shared_axes=[1, 2])(x)
    a, b = keras.layers.Lambda(lambda t: tf.split(t, 2, axis=-1))(x)
    a = keras.layers.Lambda(lambda t: tf.math.cumsum(t, axis=2))(a)
    b = keras.layers.Conv2DTranspose(4, 3, strides=2, padding="same")(b)
    b = keras.layers.Lambda(lambda t: tf.image.resize(t, (16, 16)))(b)
    x = keras.layers.Concatenate()([a, b])
    x = keras.layers.Lambda(lambda t: t[:, :, 0, :] / (1.0 + tf.abs(t[:, :, 1, :])))(x)
    x = keras.layers.Lambda(lambda t: tf.matmul(t, t, transpose_b=True))(x)
    x = keras.layers.Flatten()(x)
    outputs = keras.layers.Dense(4, activation="softmax")(x)
    return keras.Model(inputs, outputs)


def attention_model():
    """A transformer block: MultiHeadAttention, LayerNormalization, GELU MLP."""
    keras = _keras()
    inputs = keras.Input((16, 32), batch_size=1)
    x = keras.layers.MultiHeadAttention(num_heads=2, key_dim=16)(inputs, inputs)
    x = keras.layers.LayerNormalization()(x + inputs)
    y = keras.layers.Dense(64, activation="gelu")(x)
    y = keras.layers.Dense(32)(y)
    outputs = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(x + y))
    return keras.Model(inputs, outputs)


def lstm_model():
    keras = _keras()
    inputs = keras.Input((12, 8), batch_size=1)
    x = keras.layers.LSTM(16, return_sequences=True)(inputs)
    x = keras.layers.GRU(8)(x)
    return keras.Model(inputs, keras.layers.Dense(3)(x))


def dynamic_batch_cnn():
    """tests/conftest.py's tiny CNN with the batch left dynamic."""
    keras = _keras()
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.DepthwiseConv2D(3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(4, activation="softmax")(x))


def pool_pad_model():
    """Pooling variants, explicit padding, upsampling, reshape/transposes, element-wise ops."""
    keras = _keras()
    import tensorflow as tf

    inputs = keras.Input((24, 24, 3), batch_size=1)
    x = keras.layers.ZeroPadding2D(2)(inputs)
    x = keras.layers.Conv2D(6, 5, strides=2, dilation_rate=1, activation="relu6")(x)
    x = keras.layers.AveragePooling2D(2)(x)
    x = keras.layers.UpSampling2D(2, interpolation="nearest")(x)
    x = keras.layers.Conv2D(8, 3, padding="same", dilation_rate=2, activation="tanh")(x)
    x = keras.layers.Lambda(lambda t: tf.nn.space_to_depth(t, 2))(x)
    x = keras.layers.Lambda(lambda t: tf.nn.depth_to_space(t, 2))(x)
    x = keras.layers.Permute((2, 1, 3))(x)
    x = keras.layers.Lambda(lambda t: tf.maximum(t, 0.1) * tf.sigmoid(t) - tf.minimum(t, 0.5))(x)
    x = keras.layers.Lambda(lambda t: tf.reduce_max(t, axis=[1, 2]))(x)
    return keras.Model(inputs, keras.layers.Dense(5)(x))


def while_model():
    """A tf.while_loop with a data-dependent trip count: WHILE + body/cond subgraphs."""
    import tensorflow as tf

    class Loop(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 8], tf.float32)])
        def __call__(self, x):
            n = tf.cast(tf.reduce_sum(tf.abs(x)) % 3.0, tf.int32) + 1
            def body(i, v):
                return i + 1, tf.nn.relu(v * 1.5 + 1.0)

            return tf.while_loop(lambda i, v: i < n, body, [tf.constant(0), x])[1]

    return Loop()


def with_batch_one(model):
    """The same Keras model with its batch fixed to 1 (what embedded int8 builds ship)."""
    keras = _keras()
    if not hasattr(model, "inputs") or all(t.shape[0] == 1 for t in model.inputs):
        return model
    inputs = [keras.Input(batch_shape=(1, *t.shape[1:])) for t in model.inputs]
    outputs = model(inputs if len(inputs) > 1 else inputs[0])
    return keras.Model(inputs, outputs)


def edge_case_model():
    """Parameters at the edge of what XNNPACK accepts: strided 1x1 pooling, a stride larger
    than the window, a [-1] reshape, a -1 slice size, 6-way concat, 5-way split, softmax
    beta, strided slices, mirror padding."""
    keras = _keras()
    import tensorflow as tf

    inputs = keras.Input((12, 12, 4), batch_size=1)
    a = keras.layers.MaxPooling2D(pool_size=1, strides=2)(inputs)
    b = keras.layers.AveragePooling2D(pool_size=2, strides=3, padding="same")(inputs)
    b = keras.layers.Lambda(lambda t: tf.image.resize(t, (6, 6), method="nearest"))(b)
    c = keras.layers.Lambda(lambda t: tf.slice(t, [0, 0, 0, 0], [-1, 6, 6, -1]))(inputs)
    d = keras.layers.Lambda(lambda t: t[:, ::2, ::2, :])(inputs)
    e = keras.layers.Lambda(lambda t: tf.pad(t, [[0, 0], [1, 1], [1, 1], [0, 0]],
                                             mode="REFLECT")[:, :6, :6, :])(inputs)
    f = keras.layers.Lambda(lambda t: tf.nn.softmax(2.0 * t))(a)
    x = keras.layers.Concatenate()([a, b, c, d, e, f])
    parts = keras.layers.Lambda(lambda t: tf.split(t, 4, axis=-1))(x)
    x = keras.layers.Concatenate()([keras.layers.Add()([parts[0], parts[1]]), parts[2],
                                    parts[3]])
    fives = keras.layers.Lambda(lambda t: tf.split(t, 5, axis=1))(
        keras.layers.Lambda(lambda t: tf.image.resize(t, (10, 10)))(x))
    x = keras.layers.Lambda(lambda ts: tf.reshape(ts[0] * ts[4], [-1]))(fives)
    return keras.Model(inputs, keras.layers.Lambda(lambda t: t[None, :32])(x))


def _representative(model, count: int = 4):
    shapes = [tuple(d or 1 for d in t.shape) for t in model.inputs]
    rng = np.random.default_rng(SEED)

    def gen():
        for _ in range(count):
            yield [rng.random(s, dtype=np.float32) for s in shapes]

    return gen


def convert(model, mode: str) -> bytes:
    """``mode``: float, int8 (full integer, int8 IO), dynamic (int8 weights), fp16 (weights)."""
    import tensorflow as tf

    if mode == "int8":
        model = with_batch_one(model)
    if isinstance(model, tf.Module) and not hasattr(model, "inputs"):
        converter = tf.lite.TFLiteConverter.from_concrete_functions(
            [model.__call__.get_concrete_function()], model)
    else:
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if mode != "float":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode == "fp16":
        converter.target_spec.supported_types = [tf.float16]
    if mode == "int8":
        converter.representative_dataset = _representative(model)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
                                               tf.lite.OpsSet.TFLITE_BUILTINS]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    from edgeopt.quiet import captured_prints, library_output_to_log

    with library_output_to_log(), captured_prints():
        return converter.convert()


# name -> (builder, conversion modes)
ZOO: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "mobilenet_v1_96": (lambda: _app("MobileNet", 96, alpha=0.25), ("float", "int8")),
    "mobilenet_v2_96": (lambda: _app("MobileNetV2", 96, alpha=0.35),
                        ("float", "int8", "fp16", "dynamic")),
    "mobilenet_v3s_96": (lambda: _app("MobileNetV3Small", 96, alpha=0.75), ("float", "int8")),
    "efficientnet_b0_64": (lambda: _app("EfficientNetB0", 64), ("float", "int8")),
    "resnet50_64": (lambda: _app("ResNet50", 64), ("float",)),
    "densenet121_64": (lambda: _app("DenseNet121", 64), ("float",)),
    "nasnet_mobile_64": (lambda: _app("NASNetMobile", 64), ("int8",)),
    "awkward_ops": (awkward_model, ("float", "int8")),
    "attention": (attention_model, ("float", "int8")),
    "lstm_gru": (lstm_model, ("float",)),
    "dynamic_batch_cnn": (dynamic_batch_cnn, ("float", "int8")),
    "pool_pad": (pool_pad_model, ("float", "int8")),
    "while_loop": (while_model, ("float",)),
    "edge_cases": (edge_case_model, ("float", "int8")),
}


def build_zoo(folder: Path, only: list[str] | None = None,
              log: Callable[[str], None] = print) -> dict[str, Path]:
    """Convert every zoo model (reusing files already in ``folder``); ``{name_mode: path}``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name, (builder, modes) in ZOO.items():
        if only and name not in only:
            continue
        todo = [m for m in modes if not (folder / f"{name}_{m}.tflite").exists()]
        model = builder() if todo else None
        for mode in modes:
            path = folder / f"{name}_{mode}.tflite"
            if mode in todo:
                log(f"converting {path.name}")
                path.write_bytes(convert(model, mode))
            paths[f"{name}_{mode}"] = path
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the .tflite files")
    parser.add_argument("--only", nargs="*", help="zoo entries to build (default: all)")
    args = parser.parse_args(argv)
    for name, path in build_zoo(args.out, args.only).items():
        print(f"{name:32s} {path.stat().st_size:>10,d} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
