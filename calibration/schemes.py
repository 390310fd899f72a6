"""Quantization schemes and which target formats can express them."""

from __future__ import annotations

from edgeopt.errors import ConversionError

# scheme -> formats that can express it
SCHEMES = {
    "w8a8": ("tflite", "onnx"),     # full integer: int8 weights per channel, int8 activations
    "w4a8": ("tflite", "onnx"),     # int4 conv/dense weights (GPTQ), int8 activations
    "w4a16": ("tflite", "onnx"),    # weight-only int4; activations stay float (fp32 kernels)
    "w4afp32": ("tflite", "onnx"),  # weight-only int4, float compute
    "dynamic": ("tflite", "onnx"),  # int8 weights, float activations quantized on the fly
    "fp16": ("tflite", "onnx"),     # float16 weights (and compute where the delegate can)
    "float": ("tflite", "onnx"),    # no quantization
}

PRECISION_TO_SCHEME = {"int8": "w8a8", "fp16": "fp16", "float32": "float"}


def check_scheme(scheme: str, fmt: str) -> None:
    if scheme not in SCHEMES:
        raise ConversionError(f"unknown scheme '{scheme}'; choose from {', '.join(SCHEMES)}")
    if fmt not in SCHEMES[scheme]:
        raise ConversionError(f"scheme '{scheme}' cannot be written as .{fmt}")
