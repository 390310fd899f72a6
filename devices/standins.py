"""Random-weight stand-in `.tflite` files for the corpus models that Keras ships.

Latency does not depend on weight values, so a `keras.applications` network built with
``weights=None``, the input size and head the corpus row states, and converted by LiteRT
(int8 by post-training quantization on a few seeded random inputs) has the layer shapes
of the measured model. Each is built once and cached in ``~/.cache/edgeopt-standins/``
(``$EDGEOPT_STANDIN_CACHE`` overrides), keyed by model, input shape, classes and precision.
Nothing touches the network.

    >>> spec = standin_for(row)                       # doctest: +SKIP
    >>> spec.key, build(spec)                         # doctest: +SKIP
    ('resnet50-224x224-c1000-int8', PosixPath('~/.cache/edgeopt-standins/resnet50-...tflite'))

    python -m edgeopt.devices.standins --build [--only MODEL ...] [--limit N]

builds the stand-ins of the corpus, those with the most rows first.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

import numpy as np

from edgeopt.atomic import write_file_atomic
from edgeopt.devices.corpus import Measurement, load_corpus
from edgeopt.devices.corpus_map import PROFILE_ROWS, profile_rows
from edgeopt.devices.standin_nets import NETWORKS, build_network
from edgeopt.quiet import captured_prints, library_output_to_log
from edgeopt.tf_env import offline_environment, quiet_tensorflow

# corpus model -> (keras.applications constructor, alpha or None)
KERAS_STANDINS: dict[str, tuple[str, float | None]] = {
    "convnext_base": ("ConvNeXtBase", None),
    "convnext_tiny": ("ConvNeXtTiny", None),
    "densenet": ("DenseNet121", None),
    "densenet121": ("DenseNet121", None),
    "efficientnet_b0": ("EfficientNetB0", None),
    "efficientnet_b4": ("EfficientNetB4", None),
    "efficientnet_v2_s": ("EfficientNetV2S", None),
    "inception_resnet_v2": ("InceptionResNetV2", None),
    "inception_v3": ("InceptionV3", None),
    "mobilenet_v1_0.25_224_quant": ("MobileNet", 0.25),
    "mobilenet_v2": ("MobileNetV2", None),
    "mobilenet_v2_1.0_224": ("MobileNetV2", None),
    "mobilenet_v2_1.0_224_quant": ("MobileNetV2", None),
    "mobilenet_v3_large": ("MobileNetV3Large", None),
    "mobilenet_v3_small": ("MobileNetV3Small", None),
    "nasnet_large": ("NASNetLarge", None),
    "nasnet_mobile": ("NASNetMobile", None),
    "resnet101": ("ResNet101", None),
    "resnet152_v2": ("ResNet152V2", None),
    "resnet50": ("ResNet50", None),
    "resnet50_v1": ("ResNet50", None),
    "resnet50_v2": ("ResNet50V2", None),
    "resnet_v2_101": ("ResNet101V2", None),
    "vgg16": ("VGG16", None),
    "vgg19": ("VGG19", None),
    # defined in standin_nets.py (not in keras.applications)
    "resnet18": ("ResNet18", None),
    "resnet34": ("ResNet34", None),
    "wideresnet50": ("WideResNet50", None),
    "squeezenet1_1": ("SqueezeNet11", None),
    "vit_tiny": ("ViTTiny16", None),
    "vit": ("ViTBase16", None),
    "shufflenet_v2": ("ShuffleNetV2x05", None),
    "regnet": ("RegNetX3_2GF", None),
    "regnet_y_800mf": ("RegNetY800MF", None),
    "googlenet": ("GoogLeNet", None),
    "resnext50": ("ResNeXt50_32x4d", None),
    "resnext101": ("ResNeXt101_32x8d", None),
    "quicksrnetsmall": ("QuickSRNetSmall", None),
    "quicksrnetmedium": ("QuickSRNetMedium", None),
    "quicksrnetlarge": ("QuickSRNetLarge", None),
    "xlsr": ("XLSR", None),
    "sesr_m5": ("SESR_M5", None),
    "real_esrgan_general_x4v3": ("SRVGGNetCompact", None),
    "real_esrgan_x4plus": ("RRDBNet", None),
    "esrgan": ("RRDBNet", None),
}
for _alpha in ("0.25", "0.5", "0.75", "1.0"):
    for _size in (128, 160, 192, 224):
        KERAS_STANDINS[f"mobilenet_v1_{_alpha}_{_size}"] = ("MobileNet", float(_alpha))

# Input size where the row gives none (Keras' own default for the constructor).
DEFAULT_SIZE = {"InceptionV3": 299, "InceptionResNetV2": 299, "NASNetLarge": 331}
# The ImageNet classifiers of the TFLite and Coral pages have a background class.
BACKGROUND_CLASS_SOURCES = ("hosted_models.md", "performance/benchmarks.md", "coral.ai")
_CLASSES_NOTE = re.compile(r"(\d+) classes")
CALIBRATION_SAMPLES = 2


@dataclass(frozen=True)
class StandIn:
    """One stand-in to build: a Keras constructor at one input size, head and precision."""

    model: str
    builder: str
    alpha: float | None
    height: int
    width: int
    classes: int
    precision: str          # "float" or "int8"

    @property
    def key(self) -> str:
        alpha = f"-a{self.alpha:g}" if self.alpha is not None else ""
        return (f"{self.model}{alpha}-{self.height}x{self.width}-c{self.classes}-"
                f"{self.precision}")


def cache_dir() -> Path:
    """Where stand-ins are kept: ``$EDGEOPT_STANDIN_CACHE`` or ``~/.cache/edgeopt-standins``."""
    override = os.environ.get("EDGEOPT_STANDIN_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "edgeopt-standins"


def build_precision(row: Measurement) -> str | None:
    """The stand-in precision a row needs: float for fp32/fp16 rows (the device computes
    the float graph in fp16 where its unit does), int8 for int8 rows, None otherwise."""
    if row.precision in ("fp32", "fp16"):
        return "float"
    return "int8" if row.precision == "int8" else None


def input_size(text: str, builder: str) -> tuple[int, int]:
    """(height, width) from a corpus input_shape: ``1x224x224x3``, ``224x224``, AI Hub's
    ``1x3x224`` (RegNet's info.yaml), or blank (the constructor's default)."""
    numbers = [int(n) for n in re.findall(r"\d+", text.split(";")[0])]
    sides = [n for n in numbers if n > 4]
    if not sides:
        side = DEFAULT_SIZE.get(builder, 224)
        return side, side
    if len(sides) == 1:
        return sides[0], sides[0]
    return sides[0], sides[1]


def head_classes(row: Measurement) -> int:
    """Classes of the row's head: the note's "N classes", 1001 on the TFLite/Coral pages,
    else ImageNet's 1000."""
    match = _CLASSES_NOTE.search(row.note)
    if match:
        return int(match.group(1))
    return 1001 if any(name in row.source for name in BACKGROUND_CLASS_SOURCES) else 1000


def standin_for(row: Measurement) -> StandIn | None:
    """The stand-in of one corpus row, or None (no Keras constructor, or a precision such
    as w8a16 that LiteRT's converter does not produce)."""
    entry = KERAS_STANDINS.get(row.model)
    precision = build_precision(row)
    if entry is None or precision is None:
        return None
    builder, alpha = entry
    height, width = input_size(row.input_shape, builder)
    return StandIn(row.model, builder, alpha, height, width, head_classes(row), precision)


def plan(rows: Iterable[Measurement], only: Sequence[str] = ()) -> list[StandIn]:
    """Distinct stand-ins of ``rows``, most rows first (ties: smaller input first)."""
    counts = Counter(s for s in map(standin_for, rows)
                     if s is not None and (not only or s.model in only))
    return sorted(counts, key=lambda s: (-counts[s], s.height * s.width, s.key))


def fitted_plan(rows: Sequence[Measurement], only: Sequence[str] = ()) -> list[StandIn]:
    """The stand-ins of the rows the device profiles are fitted to (corpus_map.py), taking
    each profile's next one in turn, and within a profile each model family in turn (the
    cross validation needs several families more than many rows of one), so a partial
    build serves every profile."""
    queues = [_by_family(profile_rows(rows, name), only) for name in PROFILE_ROWS]
    ordered: list[StandIn] = []
    while any(queues):
        for queue in queues:
            while queue and queue[0] in ordered:
                queue.pop(0)
            if queue:
                ordered.append(queue.pop(0))
    return ordered


def _by_family(rows: Sequence[Measurement], only: Sequence[str]) -> list[StandIn]:
    """`plan` of ``rows``, taking the most-measured stand-in of each family in turn."""
    family = {r.model: r.model_family for r in rows}
    groups: dict[str, list[StandIn]] = {}
    for spec in plan(rows, only):
        groups.setdefault(family[spec.model], []).append(spec)
    return [spec for round_ in zip_longest(*groups.values()) for spec in round_ if spec]


def cached(spec: StandIn) -> Path | None:
    """The cached file of ``spec``, or None when it has not been built."""
    path = cache_dir() / f"{spec.key}.tflite"
    return path if path.is_file() else None


def build(spec: StandIn) -> Path:
    """The cached `.tflite` of ``spec``, built (TensorFlow, seconds to minutes) if absent."""
    path = cache_dir() / f"{spec.key}.tflite"
    if path.is_file():
        return path
    blob = convert(keras_model(spec), spec.precision)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(path, blob)
    return path


def _keras():
    offline_environment()
    quiet_tensorflow()
    import keras

    return keras


def keras_model(spec: StandIn):
    """The random-weight Keras network of ``spec``, batch 1."""
    keras = _keras()
    keras.utils.set_random_seed(zlib.crc32(spec.key.encode()))
    inputs = keras.Input((spec.height, spec.width, 3), batch_size=1)
    if spec.builder in NETWORKS:
        return build_network(keras, spec.builder, inputs, spec.classes)
    constructor = getattr(keras.applications, spec.builder)
    accepted = inspect.signature(constructor).parameters
    args = {"weights": None, "classes": spec.classes,
            "input_tensor": inputs}
    if spec.alpha is not None:
        args["alpha"] = spec.alpha
    if "include_preprocessing" in accepted:  # the measured models take normalised input
        args["include_preprocessing"] = False
    return constructor(**args)


def convert(model, precision: str) -> bytes:
    """Keras model -> float `.tflite`, or full int8 (uint8 IO, as the hosted and Coral
    quantized models have) calibrated on a few seeded random inputs."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if precision == "int8":
        shape = tuple(int(d) for d in model.inputs[0].shape)
        rng = np.random.default_rng(0)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: (
            [rng.random(shape, np.float32)] for _ in range(CALIBRATION_SAMPLES))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = converter.inference_output_type = tf.uint8
    with library_output_to_log(), captured_prints():
        return converter.convert()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m edgeopt.devices.standins",
                                     description="Build the corpus stand-ins (cached).")
    parser.add_argument("--build", action="store_true", help="build what is not cached")
    parser.add_argument("--only", nargs="*", default=(), help="corpus model names")
    parser.add_argument("--limit", type=int, default=None, help="at most N stand-ins")
    parser.add_argument("--fitted", action="store_true",
                        help="only the rows device profiles are fitted to, profiles in turn")
    parser.add_argument("--measurements", type=Path, default=None, help="corpus folder")
    args = parser.parse_args(argv)
    rows = load_corpus(args.measurements)
    specs = (fitted_plan(rows, args.only) if args.fitted else plan(rows, args.only))[:args.limit]
    for spec in specs:
        if cached(spec) or not args.build:
            print(f"{'cached ' if cached(spec) else 'missing'} {spec.key}", flush=True)
            continue
        start = time.perf_counter()
        build(spec)
        print(f"built   {spec.key} ({time.perf_counter() - start:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
