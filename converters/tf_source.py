"""What the TFLite converter is built from: a SavedModel with a batch-1 signature.

Mobile delegates (the Edge TPU compiler first among them) refuse a dynamic batch
dimension, so edgeopt traces every TensorFlow-side model with batch 1: a Keras model is
exported with a batch-1 input signature; a SavedModel whose signature has a dynamic batch
is saved again with a batch-1 signature. Both live in the build's work folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgeopt.errors import ConversionError, first_line
from edgeopt.quiet import captured_prints
from edgeopt.tf_env import quiet_tensorflow


@dataclass(frozen=True)
class TFSource:
    """A SavedModel folder the TFLiteConverter reads, and whether edgeopt fixed its batch."""

    saved_model_dir: Path
    batch_fixed: bool = False

    def converter(self):
        quiet_tensorflow()
        import tensorflow as tf

        return tf.lite.TFLiteConverter.from_saved_model(str(self.saved_model_dir))


def _batch_one(tf, shape, dtype, name: str):
    return tf.TensorSpec([1, *list(shape)[1:]], dtype, name=name)


def from_keras(model, workdir: Path) -> TFSource:
    """Export a Keras model as a SavedModel with a batch-1 input signature."""
    import tensorflow as tf

    specs = [_batch_one(tf, t.shape, t.dtype, t.name) for t in model.inputs]
    out = workdir / "keras_export"
    try:
        with captured_prints():
            model.export(str(out), format="tf_saved_model", input_signature=specs,
                         verbose=False)
    except Exception as exc:  # Keras raises many types for models it cannot trace
        raise ConversionError(f"Keras could not export the model for conversion: "
                              f"{first_line(exc)}") from exc
    return TFSource(out, batch_fixed=any(t.shape[0] is None for t in model.inputs))


def from_saved_model(folder: Path, workdir: Path) -> TFSource:
    """The SavedModel itself, or a copy whose serving signature has batch 1."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(folder))
    signature = loaded.signatures["serving_default"]
    inputs = signature.structured_input_signature[1]
    dynamic = [spec for spec in inputs.values() if spec.shape.rank and spec.shape[0] is None]
    if not dynamic:
        return TFSource(folder)
    specs = {name: _batch_one(tf, spec.shape, spec.dtype, name) for name, spec in inputs.items()}
    concrete = tf.function(lambda **kw: signature(**kw)).get_concrete_function(**specs)
    out = workdir / "batch1_saved_model"
    try:
        tf.saved_model.save(loaded, str(out), signatures={"serving_default": concrete})
    except Exception as exc:  # TF raises many types for objects it cannot save again
        raise ConversionError(f"cannot fix the SavedModel's batch to 1: {first_line(exc)}") \
            from exc
    return TFSource(out, batch_fixed=True)


def run_converter(converter, what: str) -> bytes:
    """Convert, turning the converter's long MLIR errors into one line."""
    try:
        with captured_prints():
            return bytes(converter.convert())
    except Exception as exc:  # the converter raises ConverterError, ValueError, RuntimeError
        lines = [ln.strip() for ln in str(exc).splitlines() if "error" in ln.lower()]
        first = (lines or [ln for ln in str(exc).splitlines() if ln.strip()] or
                 [type(exc).__name__])[0]
        raise ConversionError(f"the TFLite converter could not make the {what} model: "
                              f"{first[:300]}") from exc
