"""Quantize a float `.tflite` with ai-edge-quantizer (the input is already LiteRT's format).

The first version calibrates with ai-edge-quantizer's own min-max; the calibration core
(issue 3) will hand it our calibration result instead. Integer model IO, where a device
needs it, is set afterwards with LiteRT's model-interface tool.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from edgeopt.calibration.tflite_buffers import inline_buffers
from edgeopt.errors import ConversionError, first_line
from edgeopt.model import tflite_interpreter

# TFLite schema TensorType values accepted by modify_model_interface.
_TENSOR_TYPES = {"float32": 0, "uint8": 3, "int8": 9}


def _signature_samples(float_tflite: bytes, arrays: dict[str, np.ndarray]) -> dict:
    interpreter = tflite_interpreter(float_tflite)
    signatures = interpreter.get_signature_list()
    if not signatures:
        raise ConversionError("the .tflite has no signature; re-export it with a "
                              "serving_default signature to quantize it")
    key, signature = next(iter(signatures.items()))
    names = signature["inputs"]
    values = list(arrays.values()) if set(names) != set(arrays) else [arrays[n] for n in names]
    count = len(values[0])
    samples = [{n: v[i:i + 1].astype(np.float32) for n, v in zip(names, values)}
               for i in range(count)]
    return {key: samples}


def full_integer(float_tflite: bytes, arrays: dict[str, np.ndarray], io_dtype: str) -> bytes:
    from ai_edge_quantizer import quantizer, recipe

    try:
        qt = quantizer.Quantizer(bytearray(float_tflite), recipe.static_wi8_ai8())
        calibration = qt.calibrate(_signature_samples(float_tflite, arrays), num_threads=2)
        model = bytes(qt.quantize(calibration).quantized_model)
    except (ValueError, RuntimeError, KeyError) as exc:
        first = first_line(exc)
        raise ConversionError(f"ai-edge-quantizer could not quantize the model: {first}") from exc
    return model if io_dtype == "float32" else set_io_dtype(model, io_dtype)


def set_io_dtype(model: bytes, io_dtype: str) -> bytes:
    """Replace float model IO by integer IO (drops the boundary quantize/dequantize ops)."""
    from ai_edge_litert._pywrap_modify_model_interface import modify_model_interface

    code = _TENSOR_TYPES[io_dtype]
    with tempfile.TemporaryDirectory(prefix="edgeopt-io-") as tmp:
        src, dst = os.path.join(tmp, "in.tflite"), os.path.join(tmp, "out.tflite")
        with open(src, "wb") as f:  # the tool drops buffers stored after the flatbuffer
            f.write(inline_buffers(model))
        status = modify_model_interface(src, dst, code, code)
        if status != 0 or not os.path.exists(dst):
            raise ConversionError(f"could not give the int8 model {io_dtype} inputs and outputs")
        with open(dst, "rb") as f:
            return f.read()
