"""What the TFLite converter is built from: a Keras model or a SavedModel folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgeopt.errors import ConversionError


@dataclass(frozen=True)
class TFSource:
    """A TensorFlow-side model the TFLiteConverter can read, with its signature input names."""

    keras_model: object | None = None
    saved_model_dir: Path | None = None

    def converter(self):
        from edgeopt.tf_env import quiet_tensorflow

        quiet_tensorflow()
        import tensorflow as tf

        if self.keras_model is not None:
            return tf.lite.TFLiteConverter.from_keras_model(self.keras_model)
        return tf.lite.TFLiteConverter.from_saved_model(str(self.saved_model_dir))


def run_converter(converter, what: str) -> bytes:
    """Convert, turning the converter's long MLIR errors into one line."""
    from edgeopt.quiet import captured_prints

    try:
        with captured_prints():
            return bytes(converter.convert())
    except Exception as exc:  # the converter raises ConverterError, ValueError, RuntimeError
        lines = [ln.strip() for ln in str(exc).splitlines() if "error" in ln.lower()]
        first = (lines or [ln for ln in str(exc).splitlines() if ln.strip()] or
                 [type(exc).__name__])[0]
        raise ConversionError(f"the TFLite converter could not make the {what} model: "
                              f"{first[:300]}") from exc
