"""A `.tflite` whose dynamic inputs are fixed to one shape, every tensor shape written out.

A .tflite may declare dynamic inputs with a placeholder shape it cannot run at
(openWakeWord's melspectrogram: `[-1, -1]` stored as `[1, 1]`, which its CONV_2D refuses to
prepare). Quantizers and delegates read the declared shapes, so resizing in an interpreter
is not enough: the shapes LiteRT propagates from the data's input shape are written into
the flatbuffer, and its shape signatures dropped, which makes the model static.

    >>> static = with_static_inputs(tflite, {"serving_default_input:0": (1, 1760)})
"""

from __future__ import annotations

from edgeopt.errors import ConversionError, first_line


def dynamic_inputs(tflite: bytes) -> dict[str, tuple[int, ...]]:
    """Input name -> shape signature, for the inputs with a dynamic dimension past the batch."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(
        model_content=tflite,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    return {d["name"]: tuple(int(s) for s in d["shape_signature"])
            for d in interpreter.get_input_details()
            if any(int(s) < 0 for s in d["shape_signature"][1:])}


def _propagated(tflite: bytes, shapes: dict[str, tuple[int, ...]]) -> dict[int, list[int]]:
    """Tensor index -> shape, as LiteRT prepares the main subgraph at `shapes`."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(
        model_content=tflite,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    try:
        for detail in interpreter.get_input_details():
            if detail["name"] in shapes:
                interpreter.resize_tensor_input(detail["index"], list(shapes[detail["name"]]))
        interpreter.allocate_tensors()
    except (ValueError, RuntimeError) as exc:
        raise ConversionError(f"LiteRT cannot prepare the model at input shapes "
                              f"{ {k: list(v) for k, v in shapes.items()} }: "
                              f"{first_line(exc)}") from exc
    return {int(d["index"]): [int(x) for x in d["shape"]]
            for d in interpreter.get_tensor_details()}


def with_static_inputs(tflite: bytes, shapes: dict[str, tuple[int, ...]]) -> bytes:
    """`tflite` with the named inputs fixed to `shapes` and every main-subgraph tensor
    static; the bytes unchanged when no input is dynamic."""
    wanted = {name: tuple(shapes[name]) for name in dynamic_inputs(tflite) if name in shapes}
    if not wanted:
        return tflite
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    concrete = _propagated(tflite, wanted)
    model = schema.ModelT.InitFromPackedBuf(bytearray(tflite), 0)
    for index, tensor in enumerate(model.subgraphs[0].tensors or []):
        if index in concrete and tensor.shapeSignature is not None:
            tensor.shape = concrete[index]
            tensor.shapeSignature = None
    builder = flatbuffers.Builder(len(tflite) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())
