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


def _batch_one(tf, shape, dtype, name: str, fixed: tuple[int, ...] | None = None):
    """Batch 1, and the dimensions --input-shape (or the data) fixed. A dimension left
    dynamic past the batch is refused here: the converter would write a .tflite that LiteRT
    cannot prepare ("XNNPack delegate failed to reshape runtime")."""
    dims = list(shape)
    if fixed is not None and len(fixed) == len(dims):
        dims = [d if d is not None else (f if f > 0 else None) for d, f in zip(dims, fixed)]
    dims = [1, *dims[1:]] if dims else dims
    if any(d is None for d in dims):
        hint = ",".join("1" if i == 0 else (str(d) if d is not None else "?")
                        for i, d in enumerate(dims))
        raise ConversionError(
            f"input '{name}' has dynamic dimensions {[-1 if d is None else d for d in shape]} "
            "beyond the batch; mobile runtimes need static shapes: fix them with "
            f"--input-shape {name}:{hint} (or give data of that shape)")
    return tf.TensorSpec(dims, dtype, name=name)


def _fixed(specs, name: str) -> tuple[int, ...] | None:
    return next((s.shape for s in specs or () if s.name == name), None)


def from_keras(model, workdir: Path, inputs=None) -> TFSource:
    """Export a Keras model as a SavedModel with a batch-1 input signature; `inputs` (the
    handle's TensorSpecs) give the dimensions --input-shape fixed."""
    import tensorflow as tf

    specs = [_batch_one(tf, t.shape, t.dtype, t.name, _fixed(inputs, t.name))
             for t in model.inputs]
    out = workdir / "keras_export"
    try:
        with captured_prints():
            model.export(str(out), format="tf_saved_model", input_signature=specs,
                         verbose=False)
    except Exception as exc:  # Keras raises many types for models it cannot trace
        raise ConversionError(f"Keras could not export the model for conversion: "
                              f"{first_line(exc)}") from exc
    return TFSource(out, batch_fixed=any(t.shape[0] is None for t in model.inputs))


def from_saved_model(folder: Path, workdir: Path, inputs=None) -> TFSource:
    """The SavedModel itself, or a copy whose serving signature has batch 1 (and the
    dimensions `inputs` fixed)."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(folder))
    signature = loaded.signatures["serving_default"]
    specs_in = signature.structured_input_signature[1]
    dynamic = [spec for spec in specs_in.values()
               if spec.shape.rank and any(d is None for d in spec.shape)]
    if not dynamic:
        return TFSource(folder)
    specs = {name: _batch_one(tf, spec.shape, spec.dtype, name, _fixed(inputs, name))
             for name, spec in specs_in.items()}
    concrete = tf.function(lambda **kw: signature(**kw)).get_concrete_function(**specs)
    out = workdir / "batch1_saved_model"
    try:
        tf.saved_model.save(loaded, str(out), signatures={"serving_default": concrete})
    except Exception as exc:  # TF raises many types for objects it cannot save again
        raise ConversionError(f"cannot fix the SavedModel's batch to 1: {first_line(exc)}") \
            from exc
    return TFSource(out, batch_fixed=any(s.shape.rank and s.shape[0] is None
                                         for s in specs_in.values()))


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
