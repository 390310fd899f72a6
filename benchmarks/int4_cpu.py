"""int8 vs w4a8 convolutions under LiteRT on this host: how much slower int4 weights run.

Models built here (Keras, seeded): one CONV_2D 3x3 (56x56x64 -> 64), one CONV_2D 1x1
(28x28x128 -> 256), one FULLY_CONNECTED (1024 -> 1024) and the trained MobileNetV2-0.35
96x96 of benchmarks/trained_mobilenet.py, each quantized by edgeopt's
calibration core as w8a8 and as w4a8 (same calibration data, RTN weights). Each model is
timed in LiteRT three ways: the default interpreter (XNNPACK applied), the builtin
kernels alone (`BUILTIN_WITHOUT_DEFAULT_DELEGATES`), both with 1 thread; 5 warm-up and
the median of 30 invokes, interleaved. The ratio w4a8 / int8 builtin is the factor the
latency estimate applies to an int4-weight op on a CPU unit
(`devices/roofline.REFERENCE_KERNEL_SLOWDOWN`).

    python benchmarks/int4_cpu.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from _common import print_table, write_results

NAME = "int4_cpu"
LAYERS = {
    "conv3x3 56x56x64->64": ((56, 56, 64), "conv", 64, 3),
    "conv1x1 28x28x128->256": ((28, 28, 128), "conv", 256, 1),
    "dense 1024->1024": ((1024,), "dense", 1024, 0),
}


def make_model(shape, kind: str, units: int, kernel: int):
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape)
    if kind == "conv":
        x = keras.layers.Conv2D(units, kernel, padding="same", activation="relu")(inputs)
    else:
        x = keras.layers.Dense(units, activation="relu")(inputs)
    return keras.Model(inputs, x)


def quantized(model, shape) -> dict[str, bytes]:
    import tensorflow as tf

    from edgeopt.quantize import QuantConfig, quantize_tflite

    float_tflite = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    interpreter = tf.lite.Interpreter(model_content=float_tflite)
    name = interpreter.get_signature_list()["serving_default"]["inputs"][0]
    calib = {name: np.random.default_rng(0).normal(size=(16, *shape)).astype(np.float32)}
    models = {}
    for scheme in ("w8a8", "w4a8"):
        config = QuantConfig(scheme=scheme, method="minmax", weight_method="rtn",
                             layer_report=False, check_samples=4)
        models[scheme] = quantize_tflite(float_tflite, calib, config).model
    return models


def interpreter(model: bytes, builtin: bool):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kwargs = {"experimental_op_resolver_type":
              OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES} if builtin else {}
    found = Interpreter(model_content=model, num_threads=1, **kwargs)
    found.allocate_tensors()
    detail = found.get_input_details()[0]
    found.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
    return found


def time_all(runs: dict[str, object], repeats: int) -> dict[str, float]:
    """Median invoke time (ms) of each interpreter, invokes interleaved across them."""
    for it in runs.values():
        for _ in range(5):
            it.invoke()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(repeats):
        for key, it in runs.items():
            start = time.perf_counter()
            it.invoke()
            times[key].append((time.perf_counter() - start) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def mobilenet_models() -> dict[str, bytes]:
    """The trained MobileNetV2-0.35 96x96 (trained_mobilenet.py) as w8a8 and w4a8."""
    import tempfile
    from pathlib import Path

    from trained_mobilenet import trained_mobilenet

    from edgeopt.converters.float_tflite import to_float_tflite
    from edgeopt.model import load_model, tflite_interpreter
    from edgeopt.quantize import QuantConfig, quantize_tflite

    with tempfile.TemporaryDirectory(prefix="edgeopt-int4-") as tmp:
        folder = Path(tmp)
        trained_mobilenet(folder)
        float_tflite = to_float_tflite(load_model(folder / "model.keras"), folder).tflite
        images = next(iter(np.load(folder / "calib.npz").values()))[:32]
    name = tflite_interpreter(float_tflite).get_signature_list()["serving_default"]["inputs"][0]
    models = {}
    for scheme in ("w8a8", "w4a8"):
        config = QuantConfig(scheme=scheme, method="minmax", weight_method="rtn",
                             layer_report=False, check_samples=4)
        models[scheme] = quantize_tflite(float_tflite, {name: images}, config).model
    return models


def _measure(label: str, models: dict, repeats: int, results: list, rows: list) -> None:
    """int8 and w4a8 of one model, each under XNNPACK and the builtin kernels."""
    runs = {"int8 xnnpack": interpreter(models["w8a8"], False),
            "int8 builtin": interpreter(models["w8a8"], True),
            "w4a8 default": interpreter(models["w4a8"], False),
            "w4a8 builtin": interpreter(models["w4a8"], True)}
    ms = time_all(runs, repeats)
    record = {"layer": label, "ms": {k: round(v, 4) for k, v in ms.items()},
              "w4a8_over_int8_xnnpack": round(ms["w4a8 default"] / ms["int8 xnnpack"], 1),
              "w4a8_over_int8_builtin": round(ms["w4a8 default"] / ms["int8 builtin"], 1)}
    results.append(record)
    rows.append((label, *(f"{ms[k]:.3f}" for k in runs),
                 record["w4a8_over_int8_xnnpack"], record["w4a8_over_int8_builtin"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--skip-mobilenet", action="store_true")
    args = parser.parse_args(argv)
    rows, results = [], []
    for label, (shape, kind, units, kernel) in LAYERS.items():
        models = quantized(make_model(shape, kind, units, kernel), shape)
        _measure(label, models, args.repeats, results, rows)
    if not args.skip_mobilenet:
        _measure("MobileNetV2-0.35 96x96 (trained)", mobilenet_models(),
                 max(args.repeats // 3, 5), results, rows)
    print_table(("layer", "int8 xnnpack ms", "int8 builtin ms", "w4a8 default ms",
                 "w4a8 builtin ms", "w4a8/int8 xnnpack", "w4a8/int8 builtin"), rows)
    print(f"\nwrote {write_results(NAME, {'layers': results, 'repeats': args.repeats})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
