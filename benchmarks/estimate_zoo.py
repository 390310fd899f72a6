"""Models for the estimator benchmarks: Keras applications (random weights) and small nets,
converted to float or full-int8 `.tflite`, cached on disk; and a LiteRT timing loop.

    >>> blob = zoo_model("mobilenet_v2", 1.0, 224, "int8")            # doctest: +SKIP
    >>> median_ms(blob, threads=1, runs=50)                            # doctest: +SKIP
    4.05

Random weights are fine for latency. Int8 models are calibrated on seeded random inputs.
TensorFlow is imported only when a model has to be built.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edgeopt" / "zoo"


def _keras():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import keras

    return keras


def _app(builder: str, **kwargs) -> Callable[[float, int], object]:
    def build(alpha: float, resolution: int):
        keras = _keras()
        cls = getattr(keras.applications, builder)
        args = {"weights": None, "input_shape": (resolution, resolution, 3), **kwargs}
        if alpha != 1.0:
            args["alpha"] = alpha
        return cls(**args)
    return build


def _small_cnn(alpha: float, resolution: int):
    keras = _keras()
    width = max(int(32 * alpha), 4)
    inputs = keras.Input((resolution, resolution, 3))
    x = inputs
    for i in range(4):
        x = keras.layers.Conv2D(width * 2 ** i, 3, strides=2, padding="same",
                                activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))


def _residual(alpha: float, resolution: int):
    keras = _keras()
    width = max(int(64 * alpha), 8)
    inputs = keras.Input((resolution, resolution, 3))
    x = keras.layers.Conv2D(width, 3, strides=2, padding="same", activation="relu")(inputs)
    for _ in range(4):
        y = keras.layers.Conv2D(width, 3, padding="same", activation="relu")(x)
        y = keras.layers.Conv2D(width, 3, padding="same")(y)
        x = keras.layers.ReLU()(keras.layers.Add()([x, y]))
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x))


def _separable(alpha: float, resolution: int):
    keras = _keras()
    width = max(int(48 * alpha), 8)
    inputs = keras.Input((resolution, resolution, 3))
    x = keras.layers.Conv2D(width, 3, strides=2, padding="same", activation="relu6")(inputs)
    for i in range(5):
        x = keras.layers.DepthwiseConv2D(3, strides=2 if i % 2 else 1, padding="same",
                                         activation="relu6")(x)
        x = keras.layers.Conv2D(width * (1 + i // 2), 1, activation="relu6")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(100)(x))


def _mlp(alpha: float, resolution: int):
    keras = _keras()
    width = max(int(1024 * alpha), 16)
    inputs = keras.Input((resolution,))
    x = inputs
    for _ in range(3):
        x = keras.layers.Dense(width, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x))


BUILDERS: dict[str, Callable[[float, int], object]] = {
    "mobilenet_v1": _app("MobileNet"),
    "mobilenet_v2": _app("MobileNetV2"),
    "mobilenet_v3_small": _app("MobileNetV3Small", include_preprocessing=False),
    "mobilenet_v3_large": _app("MobileNetV3Large", include_preprocessing=False),
    "efficientnet_b0": _app("EfficientNetB0"),
    "resnet50": _app("ResNet50"),
    "resnet50_v2": _app("ResNet50V2"),
    "densenet121": _app("DenseNet121"),
    "vgg16": _app("VGG16"),
    "vgg19": _app("VGG19"),
    "resnet152_v2": _app("ResNet152V2"),
    "inception_resnet_v2": _app("InceptionResNetV2"),
    "nasnet_mobile": _app("NASNetMobile"),
    "small_cnn": _small_cnn,
    "residual": _residual,
    "separable": _separable,
    "mlp": _mlp,
}


def _representative(model, samples: int = 8):
    shape = tuple(int(d) for d in model.inputs[0].shape[1:])
    rng = np.random.default_rng(0)

    def generate():
        for _ in range(samples):
            yield [rng.random((1, *shape), dtype=np.float32)]
    return generate


def with_batch_one(model):
    """The same network with a static batch of 1 (the Edge TPU compiler rejects dynamic
    shapes, and phones run batch 1)."""
    keras = _keras()
    inputs = keras.Input(tuple(int(d) for d in model.inputs[0].shape[1:]), batch_size=1)
    return keras.Model(inputs, model(inputs))


def convert(model, precision: str, io_dtype: str = "float32") -> bytes:
    """Keras model -> float or full-int8 .tflite bytes (int8/uint8 IO when asked)."""
    import tensorflow as tf

    model = with_batch_one(model)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if precision == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = _representative(model)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if io_dtype != "float32":
            converter.inference_input_type = getattr(tf, io_dtype)
            converter.inference_output_type = getattr(tf, io_dtype)
    return converter.convert()


def zoo_model(name: str, alpha: float, resolution: int, precision: str,
              io_dtype: str = "float32") -> bytes:
    """The .tflite bytes of one zoo model, built once and cached."""
    key = f"{name}-{alpha}-{resolution}-{precision}-{io_dtype}"
    path = CACHE / f"{key}.tflite"
    if path.is_file():
        return path.read_bytes()
    _keras().utils.set_random_seed(int(hashlib.sha256(key.encode()).hexdigest()[:6], 16))
    blob = convert(BUILDERS[name](alpha, resolution), precision, io_dtype)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(blob)
    return blob


def median_ms(blob: bytes, threads: int = 1, runs: int = 50, warmup: int = 5) -> float:
    """Median wall time of ``runs`` LiteRT invokes, in milliseconds."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=blob, num_threads=threads)
    interpreter.allocate_tensors()
    rng = np.random.default_rng(0)
    for detail in interpreter.get_input_details():
        data = rng.random(detail["shape"]) * 100
        interpreter.set_tensor(detail["index"], data.astype(detail["dtype"]))
    for _ in range(warmup):
        interpreter.invoke()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        interpreter.invoke()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)
