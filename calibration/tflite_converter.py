"""The TFLite converter's own quantization (min-max calibration over a representative set).

This is the baseline the calibration core must beat; the first version of `edgeopt build`
uses it directly.
"""

from __future__ import annotations

import re

import numpy as np

from edgeopt.converters.tf_source import TFSource, run_converter
from edgeopt.runtime import sample_row

_IO_TYPES = {"int8": "int8", "uint8": "uint8", "float32": "float32"}


def _sanitize(name: str) -> str:
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()


def signature_names(source: TFSource) -> list[str]:
    """Input names of the converter's signature, in the SavedModel's order."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(source.saved_model_dir))
    return list(loaded.signatures["serving_default"].structured_input_signature[1])


def _keyed_for_signature(source: TFSource, arrays: dict[str, np.ndarray]) -> dict:
    names = signature_names(source)
    by_clean = {_sanitize(k): k for k in arrays}
    if all(_sanitize(n) in by_clean for n in names):
        return {n: arrays[by_clean[_sanitize(n)]] for n in names}
    return dict(zip(names, arrays.values()))


def representative_dataset(source: TFSource, arrays: dict[str, np.ndarray]):
    """A generator factory the converter calls: one sample per step, keyed by signature name
    (integer samples keep their type: runtime.sample_row)."""
    keyed = _keyed_for_signature(source, arrays)
    count = len(next(iter(keyed.values())))

    def generate():
        for i in range(count):
            yield {name: sample_row(value, i) for name, value in keyed.items()}

    return generate


def full_integer(source: TFSource, arrays: dict[str, np.ndarray], io_dtype: str) -> bytes:
    """int8 weights (per channel) and activations; model IO as the device needs."""
    import tensorflow as tf

    converter = source.converter()
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative_dataset(source, arrays)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    io_type = getattr(tf, _IO_TYPES[io_dtype])
    converter.inference_input_type = io_type
    converter.inference_output_type = io_type
    return run_converter(converter, "int8")


def float16(source: TFSource) -> bytes:
    import tensorflow as tf

    converter = source.converter()
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.target_spec.supported_types = [tf.float16]
    return run_converter(converter, "float16")


def dynamic_range(source: TFSource) -> bytes:
    import tensorflow as tf

    converter = source.converter()
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return run_converter(converter, "dynamic-range int8")
