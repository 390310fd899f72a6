"""An ONNX model with its dynamic input dimensions fixed, the way onnxruntime's
``make_dynamic_shape_fixed`` tool fixes them, so the estimator costs the shapes the app runs.

    >>> fixed = with_fixed_inputs(onnx_bytes, {"x": (1, 3, 48, 192)})   # doctest: +SKIP
    >>> read_onnx(fixed).input_tensors()[0].shape                       # doctest: +SKIP
    (1, 3, 48, 192)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def with_fixed_inputs(content: bytes, shapes: Mapping[str, Sequence[int]]) -> bytes:
    """``content`` with each named input set to its shape (where the model leaves a dimension
    dynamic) and every other dynamic input dimension set to 1; outputs re-inferred."""
    import onnx
    from onnxruntime.tools.onnx_model_utils import fix_output_shapes

    model = onnx.load_from_string(content)
    initializers = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        wanted = list(shapes.get(value.name, ()))
        dims = value.type.tensor_type.shape.dim
        for position, dim in enumerate(dims):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                continue
            size = wanted[position] if position < len(wanted) and wanted[position] > 0 else 1
            dim.Clear()
            dim.dim_value = size
    del model.graph.value_info[:]  # inferred again from the fixed inputs
    fix_output_shapes(model)
    return model.SerializeToString()


def dynamic_inputs(content: bytes) -> list[str]:
    """Names of the graph inputs with a dimension that is not fixed."""
    import onnx

    model = onnx.load_from_string(content)
    initializers = {i.name for i in model.graph.initializer}
    return [v.name for v in model.graph.input if v.name not in initializers and any(
        not (d.HasField("dim_value") and d.dim_value > 0)
        for d in v.type.tensor_type.shape.dim)]
