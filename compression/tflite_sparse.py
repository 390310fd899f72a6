"""TFLite backend for sparsity: write a float ``.tflite`` in TFLite's sparse format."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edgeopt.quiet import captured_prints


@dataclass(frozen=True)
class SparseTflite:
    """The smaller of the dense and sparse encodings, and both sizes for the report.

    ``dense_content`` is the dense encoding (the same bytes as ``content`` when it won).
    """

    content: bytes
    sparse_format: bool
    dense_bytes: int
    sparse_bytes: int
    dense_content: bytes = field(default=b"", repr=False)


def convert_float(model: Any, sparse: bool = False) -> bytes:
    """A float ``.tflite`` of a Keras model; ``sparse`` stores mostly-zero weights sparsely."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if sparse:
        converter.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
    with captured_prints():
        return converter.convert()


def write_sparse_tflite(model: Any) -> SparseTflite:
    """Convert ``model`` twice (dense, sparse) and keep the sparse file only if it is smaller.

    >>> out = write_sparse_tflite(sparsify(model, SparsityConfig(0.8)).model)  # doctest: +SKIP
    >>> out.sparse_bytes < out.dense_bytes
    """
    dense, sparse = convert_float(model, False), convert_float(model, True)
    use_sparse = len(sparse) < len(dense)
    return SparseTflite(sparse if use_sparse else dense, use_sparse, len(dense), len(sparse),
                        dense)
