"""Values of small integer constants in a ``.tflite`` file (axes, paddings, shapes, perms).

`edgeopt.graph.Graph` keeps only the size of constant data. Several delegate rules need the
values (a Pad's paddings, a Reshape's target shape, Mean's axes), so this module reads them
straight from the flatbuffer without unpacking the whole model. Tensor indices are global,
in the same order as `edgeopt.tflite_reader.read_tflite` numbers them (subgraph by subgraph).

    >>> small_int_constants(Path("net.tflite").read_bytes())  # doctest: +SKIP
    {4: (1, 2), 5: (0, 0, 1, 1, 1, 1, 0, 0)}
"""

from __future__ import annotations

import os
from pathlib import Path

# TFLite TensorType enum values of the integer types read here, and their numpy dtypes.
_INT_TYPES = {2: "<i4", 4: "<i8", 3: "u1", 9: "i1", 7: "<i2"}
MAX_ELEMENTS = 1024


def small_int_constants(source: bytes | str | os.PathLike,
                        max_elements: int = MAX_ELEMENTS) -> dict[int, tuple[int, ...]]:
    """Global tensor index -> flat values of every integer constant up to ``max_elements``.

    Unreadable files give an empty dict: rules then treat the values as unknown.
    """
    buf = source if isinstance(source, (bytes, bytearray)) else Path(source).read_bytes()
    try:
        return _read(bytes(buf), max_elements)
    except Exception:  # no flatbuffer verifier in Python; read_tflite reports corrupt files
        return {}


def _read(buf: bytes, max_elements: int) -> dict[int, tuple[int, ...]]:
    import numpy as np
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(buf, 0)
    values: dict[int, tuple[int, ...]] = {}
    offset = 0
    for s in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(s)
        for t in range(subgraph.TensorsLength()):
            tensor = subgraph.Tensors(t)
            dtype = _INT_TYPES.get(tensor.Type())
            if dtype is None or tensor.Buffer() <= 0:
                continue
            shape = tensor.ShapeAsNumpy() if tensor.ShapeLength() else ()
            if int(np.prod(shape)) > max_elements:
                continue
            data = model.Buffers(tensor.Buffer()).DataAsNumpy()
            if isinstance(data, np.ndarray) and data.size:
                values[offset + t] = tuple(int(v) for v in data.view(dtype).ravel())
        offset += subgraph.TensorsLength()
    return values
