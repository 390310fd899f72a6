"""Name a converted `.tflite`'s tensors after the ONNX tensors they compute.

onnx2tf names TensorFlow ops after Keras layers (`model_2/tf.nn.convolution/convolution`),
so the ONNX node names (for a PyTorch program, its module paths: `features.3.conv.0`)
do not reach the `.tflite`. They are carried over by value: one sample runs through the
ONNX model (onnxruntime, every tensor exposed) and the float `.tflite` (LiteRT, every
tensor kept); a `.tflite` tensor whose values equal an ONNX tensor's, whatever the layout
(sorted values agree: NCHW and NHWC hold the same numbers), takes that tensor's name.
Each ONNX tensor names at most one `.tflite` tensor, the first that matches in execution
order; a fused op (a convolution with its ReLU) matches the ONNX tensor after the fusion.
Model inputs and outputs keep their names.

    >>> tflite, renamed = name_like_onnx(tflite, onnx_path, wanted, feeds, perms)  # doctest: +SKIP
    >>> renamed["model_2/tf.nn.convolution/convolution"]
    'features.0'
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeopt.model import ModelHandle
from edgeopt.runtime import match_input_names
from edgeopt.tflite_edit import pack, unpack

RTOL = 1e-3  # float32 kernels in two runtimes; a different tensor differs far more
# .tflite ops that carry a fused activation, and the ONNX activations they absorb: the
# fused output equals the activation's, but the layer is the convolution's (`features.0`,
# not its ReLU `features.0.2`)
FUSING_OPS = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV"}
FUSED_ACTIVATIONS = {"Relu", "Clip", "Tanh"}


def fused_sources(model, wanted: frozenset[str]) -> dict[str, str]:
    """Activation output -> the wanted tensor it activates, for activations a converter
    fuses into the op before them."""
    producers = {t: node for node in model.graph.node for t in node.output}
    found = {}
    for node in model.graph.node:
        if node.op_type in FUSED_ACTIVATIONS and node.input and node.input[0] in wanted:
            source = producers.get(node.input[0])
            if source is not None and source.op_type in ("Conv", "Gemm", "MatMul",
                                                         "ConvTranspose"):
                found[node.output[0]] = node.input[0]
    return found


def _onnx_values(model, wanted: frozenset[str], feeds: dict[str, np.ndarray]
                 ) -> dict[str, np.ndarray]:
    """Every wanted ONNX tensor's value on `feeds`, in graph order."""
    import onnx
    import onnxruntime as ort

    model = onnx.ModelProto.FromString(model.SerializeToString())
    known = {o.name for o in model.graph.output}
    order = [t for node in model.graph.node for t in node.output if t in wanted]
    model.graph.output.extend(onnx.ValueInfoProto(name=t) for t in order if t not in known)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = dict(zip(names, session.run(None, feeds)))
    return {t: values[t] for t in order if t in values}


def _tflite_values(tflite: bytes, feeds: dict[str, np.ndarray],
                   perms: dict[str, tuple[int, ...]]) -> list[tuple[str, str, np.ndarray]]:
    """(op, name, value) of every float op output of the .tflite on `feeds` (source names and
    layouts; `perms` gives the .tflite's), in execution order."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(model_content=tflite, experimental_preserve_all_tensors=True,
                              experimental_op_resolver_type=(
                                  OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    interpreter.allocate_tensors()
    inputs = interpreter.get_input_details()
    for detail, source in zip(inputs, match_input_names(list(feeds), [d["name"] for d in inputs])):
        value = feeds[source]
        value = value.transpose(perms[source]) if source in perms else value
        interpreter.set_tensor(detail["index"], value.astype(detail["dtype"]))
    interpreter.invoke()
    details = {d["index"]: d for d in interpreter.get_tensor_details()}
    io = {d["index"] for d in [*interpreter.get_input_details(),
                               *interpreter.get_output_details()]}
    found = []
    for op in interpreter._get_ops_details():  # the public API has no op list
        for index in op["outputs"]:
            if index in io or details[index]["dtype"] != np.float32:
                continue
            found.append((op["op_name"], details[index]["name"], interpreter.get_tensor(index)))
    return found


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.size != b.size or a.size == 0:
        return False
    a, b = np.sort(a, axis=None), np.sort(b.astype(np.float32), axis=None)
    scale = max(float(np.max(np.abs(b))), 1e-6)
    return bool(np.allclose(a, b, rtol=RTOL, atol=RTOL * scale))


def match_names(onnx_values: dict[str, np.ndarray],
                tflite_values: list[tuple[str, str, np.ndarray]],
                fused: dict[str, str] | None = None) -> dict[str, str]:
    """.tflite tensor name -> ONNX tensor name, one ONNX tensor per .tflite tensor;
    `fused` (fused_sources) names a fused op's output by the op it fused."""
    fused = fused or {}
    taken: set[str] = set()
    renamed = {}
    for op, name, value in tflite_values:
        if np.all(value == value.flat[0]) if value.size else True:
            continue  # a constant tensor matches anything of its size
        match = next((t for t, v in onnx_values.items() if t not in taken and _same(value, v)),
                     None)
        if match is None:
            continue
        taken.add(match)
        if op in FUSING_OPS and fused.get(match, "") in onnx_values:
            match = fused[match]
            taken.add(match)
        renamed[name] = match
    return renamed


def rename_tensors(tflite: bytes, renamed: dict[str, str]) -> bytes:
    """The .tflite with tensors renamed (unchanged when it cannot be rewritten)."""
    model = unpack(tflite)
    if model is None or not renamed:
        return tflite
    for subgraph in model.subgraphs:
        for tensor in subgraph.tensors:
            name = tensor.name.decode() if isinstance(tensor.name, bytes) else tensor.name
            if name in renamed:
                tensor.name = renamed[name]
    return pack(model)


def name_like_onnx(tflite: bytes, onnx_path: Path, wanted: frozenset[str],
                   feeds: dict[str, np.ndarray], perms: dict[str, tuple[int, ...]]
                   ) -> tuple[bytes, dict[str, str]]:
    """The .tflite with its tensors named after the `wanted` ONNX tensors they compute,
    and the renaming (old .tflite name -> ONNX name). `feeds`: one sample per ONNX input,
    in its layout; `perms`: ONNX layout -> .tflite layout, per input."""
    import onnx

    if not wanted:
        return tflite, {}
    model = onnx.load(str(onnx_path))
    renamed = match_names(_onnx_values(model, wanted, feeds), _tflite_values(tflite, feeds, perms),
                          fused_sources(model, wanted))
    return rename_tensors(tflite, renamed), renamed


def _one_sample(handle: ModelHandle, samples: dict[str, np.ndarray] | None
                ) -> dict[str, np.ndarray]:
    """The first calibration sample per input, else a seeded normal one."""
    rng = np.random.default_rng(0)
    feeds = {}
    for spec in handle.inputs:
        given = (samples or {}).get(spec.name)
        if given is not None and len(given):
            feeds[spec.name] = np.asarray(given[:1]).astype(spec.dtype)
        else:
            shape = tuple(1 if d < 0 else d for d in spec.shape)
            feeds[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
    return feeds


def module_paths(handle: ModelHandle, tflite: bytes, samples: dict[str, np.ndarray] | None,
                 input_perms: dict[str, tuple[int, ...]]) -> bytes:
    """For a PyTorch program's ONNX export, the .tflite with its tensors named by module
    path (the layer report and placement then show `features.3.conv.0`); any other
    model's .tflite unchanged."""
    if handle.torch is None or not handle.torch.module_tensors:
        return tflite
    renamed, _ = name_like_onnx(tflite, handle.path, handle.torch.module_tensors,
                                _one_sample(handle, samples), input_perms)
    return renamed
