"""Quantization schemes and which target formats can express them."""

from __future__ import annotations

from edgeopt.errors import ConversionError

# scheme -> formats that can express it
SCHEMES = {
    "w8a8": ("tflite", "onnx"),     # full integer: int8 weights per channel, int8 activations
    "w4a8": ("tflite", "onnx"),     # int4 conv/dense weights (GPTQ), int8 activations
    "w8a16": ("tflite",),           # int8 weights, int16 activations (TFLite 16x8 kernels)
    "w4a16": ("tflite", "onnx"),    # weight-only int4; activations stay float (fp32 kernels)
    "w4afp32": ("tflite", "onnx"),  # weight-only int4, float compute
    "dynamic": ("tflite", "onnx"),  # int8 weights, float activations quantized on the fly
    "fp16": ("tflite", "onnx"),     # float16 weights (and compute where the delegate can)
    "float": ("tflite", "onnx"),    # no quantization
}

PRECISION_TO_SCHEME = {"int8": "w8a8", "fp16": "fp16", "float32": "float"}
INT4_WEIGHT_SCHEMES = ("w4a8", "w4a16", "w4afp32")


def default_scheme(precision: str, device_kind: str) -> str:
    """The scheme a device gets without --scheme: never int4 weights on a CPU (LiteRT
    runs int4 convolutions on its builtin kernels, not XNNPACK)."""
    scheme = PRECISION_TO_SCHEME[precision]
    if device_kind == "cpu" and scheme in INT4_WEIGHT_SCHEMES:
        return "w8a8"
    return scheme


def int4_cpu_note(scheme: str, device_kind: str) -> str | None:
    """The warning an explicit int4-weight scheme on a CPU device gets (None otherwise)."""
    if device_kind != "cpu" or scheme not in INT4_WEIGHT_SCHEMES:
        return None
    return (f"scheme {scheme} on a CPU: int4-weight convolutions are not run by XNNPACK "
            "but by LiteRT's builtin kernels, slower than int8 (see the estimate); "
            "--scheme w8a8 is the fast choice for a CPU target")


def check_scheme(scheme: str, fmt: str) -> None:
    if scheme not in SCHEMES:
        raise ConversionError(f"unknown scheme '{scheme}'; choose from {', '.join(SCHEMES)}")
    if fmt not in SCHEMES[scheme]:
        raise ConversionError(f"scheme '{scheme}' cannot be written as .{fmt}")
