"""onnxruntime.quantization: QDQ int8 per channel, dynamic int8, and fp16 for `.onnx`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeopt.errors import ConversionError, first_line


class _Reader:
    """onnxruntime's CalibrationDataReader protocol over our arrays, one sample per step."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays
        self.count = len(next(iter(arrays.values())))
        self.position = 0

    def get_next(self):
        if self.position >= self.count:
            return None
        i = self.position
        self.position += 1
        return {name: value[i:i + 1] for name, value in self.arrays.items()}

    def rewind(self):
        self.position = 0


def _fail(what: str, exc: Exception) -> ConversionError:
    first = first_line(exc)
    return ConversionError(f"onnxruntime.quantization could not make the {what} model: {first}")


def qdq_int8(model: Path, out: Path, arrays: dict[str, np.ndarray],
             method: str = "MinMax") -> None:
    """Static QDQ: 8-bit symmetric per-channel weights, 8-bit activations per tensor.

    Both are stored as uint8 (weights around 128), as edgeopt's own writer does: int8
    weights saturate in onnxruntime's kernels on x86 CPUs without VNNI (see `onnx_backend`).
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    try:
        quantize_static(
            str(model), str(out), _Reader(arrays), quant_format=QuantFormat.QDQ,
            per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QUInt8,
            calibrate_method=getattr(CalibrationMethod, method),
            extra_options={"WeightSymmetric": True, "ActivationSymmetric": False})
    except Exception as exc:  # onnxruntime raises many types from inside its graph passes
        raise _fail("QDQ int8", exc) from exc


def dynamic_int8(model: Path, out: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    try:
        quantize_dynamic(str(model), str(out), per_channel=True, weight_type=QuantType.QInt8)
    except Exception as exc:  # see above
        raise _fail("dynamic int8", exc) from exc


def float16(model: Path, out: Path) -> None:
    """fp16 weights and compute, float32 IO (onnxruntime's float16 converter)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    try:
        converted = convert_float_to_float16(onnx.load(str(model)), keep_io_types=True)
        onnx.save(converted, str(out))
    except Exception as exc:  # see above
        raise _fail("fp16", exc) from exc
