"""The `.onnx` side of the calibration core: prepare the float model, read it, stream
activations.

Preparation is onnxruntime's own pre-quantization step (`quant_pre_process`: shape
inference, constant folding, BatchNorm folding, `Constant` nodes into initializers),
plus an opset upgrade to 13 when per-channel QDQ needs it. Activations come from
onnxruntime: the prepared model with every float intermediate tensor added as a graph
output, run one batch at a time.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from edgeopt.calibration.graphspec import CalibGraph, ConvGeometry, Layer, LayerKind, OpInfo
from edgeopt.errors import ConversionError, DataError, first_line
from edgeopt.runtime import ort_feed, ort_run, varying_scalar

MIN_OPSET = 13
_FLOAT = 1  # TensorProto.FLOAT
# 8-bit weights of a QDQ model are stored as uint8 around zero point 128 (the symmetric int8
# codes, shifted). onnxruntime runs QDQ Conv/Gemm with uint8 activations; against int8
# weights, x86 CPUs without VNNI (AVX2, AVX-512 without VNNI) use VPMADDUBSW, which
# saturates each pair of products at int16: on the digits sample the output SQNR drops from
# 40 dB to 16.6 dB, while uint8 x uint8 kernels do not saturate (onnxruntime's quantization
# guide names both remedies; the other, 7-bit weights, costs accuracy everywhere).
WEIGHT_UINT8_ZERO_POINT = 128


def prepare(model_bytes: bytes) -> bytes:
    """onnxruntime's pre-quantization pass over the float model (opset >= 13)."""
    import onnx
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model = onnx.load_from_string(model_bytes)
    quantized = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "ConvInteger",
                 "MatMulInteger", "QLinearMatMul", "DynamicQuantizeLinear"}
    if any(node.op_type in quantized for node in model.graph.node):
        raise ConversionError("the .onnx is already quantized (it has quantization ops); "
                              "give the float model")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < MIN_OPSET:
        try:
            model = onnx.version_converter.convert_version(model, MIN_OPSET)
        except Exception as exc:  # the converter raises its own C++ error types
            raise ConversionError(f"cannot lift the model from opset {opset} to "
                                  f"{MIN_OPSET} for per-channel QDQ: {first_line(exc)}") from exc
    with tempfile.TemporaryDirectory(prefix="edgeopt-onnx-") as tmp:
        src, dst = Path(tmp) / "in.onnx", Path(tmp) / "prepared.onnx"
        onnx.save(model, str(src))
        for symbolic in (True, False):
            try:
                # onnxruntime's symbolic shape inference may save 'sym_shape_infer_temp.onnx'
                # into the working folder: keep it in ours, never the user's. On failure it
                # prints a traceback to sys.stderr itself: the error below says it in one line.
                with contextlib.chdir(tmp), contextlib.redirect_stderr(io.StringIO()):
                    quant_pre_process(str(src), str(dst), skip_symbolic_shape=not symbolic)
                return dst.read_bytes()
            except Exception as exc:  # noqa: BLE001 - symbolic shape inference is fragile
                error = exc
    raise ConversionError(f"onnxruntime could not prepare the model: {first_line(error)}")


def _attrs(node) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _conv_layer(node, weight: np.ndarray, bias: str | None) -> Layer | None:
    if weight.ndim != 4:
        return None
    a = _attrs(node)
    groups = int(a.get("group", 1))
    kind = LayerKind.CONV if groups == 1 else (
        LayerKind.DEPTHWISE if weight.shape[1] == 1 else LayerKind.GROUPED)
    pads = tuple(a.get("pads", (0, 0, 0, 0)))
    auto_pad = a.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    geometry = ConvGeometry(tuple(weight.shape[2:]), tuple(a.get("strides", (1, 1))),
                            tuple(a.get("dilations", (1, 1))), (pads[0], pads[1], pads[2], pads[3]),
                            auto_pad in ("SAME_UPPER", "SAME_LOWER"), groups)
    return Layer(node.output[0], node.op_type, kind, node.input[0], node.output[0],
                 node.input[1], bias, "NCHW", geometry)


def canonical_weight(node, weight: np.ndarray) -> np.ndarray | None:
    """(O, I, ...) view of a Conv, Gemm or MatMul weight, or None if not a layer weight."""
    if node.op_type == "Conv":
        return weight if weight.ndim == 4 else None
    if weight.ndim != 2:
        return None
    if node.op_type == "Gemm":
        a = _attrs(node)
        if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0:
            return None
        return weight if a.get("transB", 0) else weight.T
    return weight.T  # MatMul: B is (K, N)


def native_weight(op_type: str, trans_b: bool, canonical: np.ndarray) -> np.ndarray:
    return canonical if op_type == "Conv" or (op_type == "Gemm" and trans_b) else canonical.T


def weight_axis(op_type: str, trans_b: bool) -> int:
    """The output-channel axis of the stored weight."""
    return 0 if op_type == "Conv" or (op_type == "Gemm" and trans_b) else 1


def _layer(node, inits: dict) -> tuple[Layer, np.ndarray] | None:
    if node.op_type not in ("Conv", "Gemm", "MatMul") or len(node.input) < 2:
        return None
    if node.input[1] not in inits or node.input[0] in inits:
        return None
    weight = inits[node.input[1]]
    canonical = canonical_weight(node, weight)
    if canonical is None or weight.dtype != np.float32:
        return None
    bias = node.input[2] if len(node.input) > 2 and node.input[2] in inits else None
    if node.op_type == "Conv":
        layer = _conv_layer(node, weight, bias)
    else:
        layer = Layer(node.output[0], node.op_type, LayerKind.DENSE, node.input[0],
                      node.output[0], node.input[1], bias, "NC")
    if layer is None or (bias and inits[bias].shape != (len(canonical),)):
        return None
    return layer, canonical


def read_graph(model_bytes: bytes) -> CalibGraph:
    import onnx
    from onnx import numpy_helper

    model = onnx.shape_inference.infer_shapes(onnx.load_from_string(model_bytes))
    graph = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    layers, weights, biases = [], {}, {}
    for node in graph.node:
        found = _layer(node, inits)
        if found:
            layer, canonical = found
            layers.append(layer)
            weights[layer.weight] = canonical
            if layer.bias:
                biases[layer.bias] = inits[layer.bias]
    types = _value_types(graph)
    inputs = tuple(i.name for i in graph.input if i.name not in inits)
    activations = [n for n in inputs if types.get(n, (0,))[0] == _FLOAT]
    activations += [o for node in graph.node for o in node.output
                    if types.get(o, (0,))[0] == _FLOAT and o not in inits]
    ops = tuple(OpInfo(node.name or node.output[0], node.op_type, tuple(node.input),
                       tuple(node.output), _op_attributes(node, inits)) for node in graph.node)
    shapes = {name: t[1] for name, t in types.items()}
    return CalibGraph("onnx", inputs, tuple(o.name for o in graph.output),
                      tuple(dict.fromkeys(activations)), tuple(layers), weights, biases, ops,
                      shapes)


def _op_attributes(node, inits: dict) -> dict:
    """Attributes the saturation bounds need: HardSigmoid's alpha/beta, Clip's limits."""
    if node.op_type == "HardSigmoid":
        a = _attrs(node)
        return {"alpha": float(a.get("alpha", 0.2)), "beta": float(a.get("beta", 0.5))}
    if node.op_type == "Clip":
        limits = [float(inits[n]) if n in inits and inits[n].size == 1 else None
                  for n in list(node.input[1:3]) + [""] * (3 - len(node.input))]
        return {"min": limits[0], "max": limits[1]}
    return {}


def _value_types(graph) -> dict[str, tuple[int, tuple[int, ...]]]:
    types = {}
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        tensor = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
        types[value.name] = (tensor.elem_type, dims)
    return types


def session(model_bytes: bytes, num_threads: int | None = None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if num_threads:
        options.intra_op_num_threads = num_threads
    try:
        return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
        raise ConversionError(f"onnxruntime cannot load the model: {first_line(exc)}") from exc


def with_outputs(model_bytes: bytes, names: list[str]) -> bytes:
    """The model with extra float graph outputs (intermediate tensors)."""
    import onnx

    model = onnx.load_from_string(model_bytes)
    present = {o.name for o in model.graph.output}
    for name in names:
        if name not in present:
            model.graph.output.append(onnx.helper.make_tensor_value_info(name, _FLOAT, None))
    return model.SerializeToString()


class OnnxCapture:
    """Runs an ONNX model on batches and yields the chosen tensors (renamed on request)."""

    def __init__(self, model_bytes: bytes, num_threads: int | None = None,
                 rename: dict[str, str] | None = None):
        self.model_bytes, self.num_threads = model_bytes, num_threads
        self.rename = rename or {}

    def stream(self, calib: dict[str, np.ndarray], tensors: set[str],
               batch_size: int = 8) -> Iterator[dict[str, np.ndarray]]:
        sources = {self.rename.get(name, name): name for name in tensors}
        run = session(with_outputs(self.model_bytes, sorted(sources)), self.num_threads)
        names = [o.name for o in run.get_outputs() if o.name in sources]
        feeds_names = [i.name for i in run.get_inputs()]
        missing = [n for n in feeds_names if n not in calib]
        if missing:
            raise DataError(f"no calibration array for model input(s) {missing}")
        step = batch_size if _dynamic_batch(run) and not varying_scalar(run, calib) else 1
        count = len(next(iter(calib.values())))
        for start in range(0, count, step):
            feeds = ort_feed(run, calib, start, step)  # scalars and recurrent states as the
            try:                                       # model declares them (samples first here)
                values = ort_run(run, feeds, names)
            except ConversionError:
                raise
            except Exception as exc:  # onnxruntime raises its own Fail/InvalidArgument types
                raise ConversionError(f"onnxruntime could not run the model on the calibration "
                                      f"data: {first_line(exc)}") from exc
            yield {sources[n]: np.asarray(v, np.float32) for n, v in zip(names, values)}


def _dynamic_batch(run) -> bool:
    return all(not (i.shape and isinstance(i.shape[0], int) and i.shape[0] == 1)
               for i in run.get_inputs())
