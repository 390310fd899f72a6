"""One bound on the size of a tensor a model's signature or a flag declares, checked before
any converter, runtime or data reader allocates it: `MAX_TENSOR_BYTES` (2 GiB), the same
cap the graph readers apply to every tensor of a file.

    >>> check_shape("image", (1, 3, 224, 224), "float32", "--input-shape image:1,3,224,224")

Dynamic dimensions (-1) count as 1: the smallest tensor the shape allows must fit.
"""

from __future__ import annotations

import math

from edgeopt.errors import ModelLoadError
from edgeopt.graph import DTYPE_BITS, MAX_TENSOR_BYTES


def shape_bytes(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes of the smallest tensor of `shape` (dynamic dimensions as 1); exact, no overflow."""
    elements = math.prod(max(int(d), 1) for d in shape)
    return elements * max(DTYPE_BITS.get(dtype, 8), 8) // 8


def check_shape(name: str, shape: tuple[int, ...], dtype: str, where: str) -> None:
    """Refuse a tensor over MAX_TENSOR_BYTES: a converter given one crashes the process
    (a 99999999999-sample batch segfaults the TFLite converter) or asks for terabytes."""
    size = shape_bytes(shape, dtype)
    if size > MAX_TENSOR_BYTES:
        amount = f"{size / 2**30:,.1f} GiB" if size < 2**70 else f"about 2^{size.bit_length()} B"
        raise ModelLoadError(f"{where}: input/output '{name}' of shape {list(shape)} ({dtype}) "
                             f"would take {amount}, over the {MAX_TENSOR_BYTES / 2**30:.0f} "
                             "GiB a tensor may take")


def check_signature(specs, where: str) -> None:
    """`check_shape` for each TensorSpec of a model's inputs or outputs."""
    for spec in specs:
        check_shape(spec.name, spec.shape, spec.dtype, where)
