"""The `.tflite` side of the calibration core: read the float model, stream activations.

Activations come from LiteRT itself: an interpreter with
`experimental_preserve_all_tensors=True` runs one sample at a time, and every float
tensor is read after each invoke and handed on in batches. The quantized model is read
the same way, its integer tensors dequantized with their own scale and zero point, so
float and quantized activations compare tensor by tensor (ai-edge-quantizer keeps the
float model's tensor names).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator

import numpy as np

from edgeopt.calibration.graphspec import CalibGraph, ConvGeometry, Layer, LayerKind, OpInfo
from edgeopt.calibration.tflite_branches import CONTROL_FLOW
from edgeopt.calibration.tflite_buffers import float_constants, read_constant, shared_buffers
from edgeopt.errors import ConversionError, DataError, ModelLoadError, first_line
from edgeopt.runtime import in_model_layout
from edgeopt.tflite_reader import read_tflite

WEIGHT_OPS = {"CONV_2D": LayerKind.CONV, "DEPTHWISE_CONV_2D": LayerKind.DEPTHWISE,
              "FULLY_CONNECTED": LayerKind.DENSE}


def to_canonical(op: str, native: np.ndarray) -> np.ndarray:
    """The op's stored weight in the core's `(O, I, ...)` layout."""
    if op == "CONV_2D":                   # (O, kh, kw, I) -> (O, I, kh, kw)
        return native.transpose(0, 3, 1, 2)
    if op == "DEPTHWISE_CONV_2D":         # (1, kh, kw, O) -> (O, 1, kh, kw)
        return native[0].transpose(2, 0, 1)[:, None]
    return native


def to_native(op: str, canonical: np.ndarray) -> np.ndarray:
    if op == "CONV_2D":
        return canonical.transpose(0, 2, 3, 1)
    if op == "DEPTHWISE_CONV_2D":
        return canonical[:, 0].transpose(1, 2, 0)[None]
    return canonical


def _groups(op, graph, weight_shape: tuple[int, ...]) -> int:
    """DEPTHWISE_CONV_2D: one group per input channel; CONV_2D: input / filter channels
    (onnx2tf writes grouped convolutions as CONV_2D)."""
    channels = graph.tensor(op.inputs[0]).shape[-1]
    if op.op == "DEPTHWISE_CONV_2D":
        return channels
    return max(channels // weight_shape[3], 1) if weight_shape[3] else 1


def _geometry(op, graph, weight_shape: tuple[int, ...]) -> ConvGeometry | None:
    if op.op not in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        return None
    o = op.options
    return ConvGeometry((weight_shape[1], weight_shape[2]),
                        (o.get("stride_h", 1), o.get("stride_w", 1)),
                        (o.get("dilation_h_factor", 1), o.get("dilation_w_factor", 1)),
                        same_padding=o.get("padding") == "SAME",
                        groups=_groups(op, graph, weight_shape))


def _layer(op, graph, constants: dict) -> Layer | None:
    kind = WEIGHT_OPS.get(op.op)
    if kind is None or len(op.inputs) < 2 or op.inputs[1] < 0:
        return None
    names = [graph.tensor(i).name if i >= 0 else None for i in op.inputs]
    weight = names[1]
    if weight not in constants or graph.tensor(op.inputs[0]).dtype != "float32":
        return None
    geometry = _geometry(op, graph, constants[weight].shape)
    if kind == LayerKind.DEPTHWISE and op.options.get("depth_multiplier", 1) not in (0, 1):
        kind = LayerKind.GROUPED
    if kind == LayerKind.CONV and geometry.groups > 1:
        kind = LayerKind.GROUPED
    bias = names[2] if len(names) > 2 and names[2] in constants else None
    output = graph.tensor(op.outputs[0]).name
    layout = "NHWC" if kind != LayerKind.DENSE else "NC"
    return Layer(output, op.op, kind, names[0], output, weight, bias, layout, geometry)


def read_graph(model: bytes) -> CalibGraph:
    """The float model's layers, weights and activation tensors (subgraph 0)."""
    graph = read_tflite(model)
    unnamed = [i for i, t in enumerate(graph.tensors) if not t.name]
    if unnamed:  # ai-edge-quantizer keys everything by tensor name
        raise ConversionError(f"the .tflite has {len(unnamed)} unnamed tensor(s) (index "
                              f"{unnamed[0]}); the quantizer needs every tensor named")
    if any(t.is_constant and t.quantization is not None and t.dtype.startswith("int")
           for t in graph.tensors):
        raise ConversionError("the .tflite is already quantized (it has integer weights); "
                              "give the float model")
    constants = float_constants(model)
    ops = [op for op in graph.ops if op.subgraph == 0]
    layers = tuple(layer for op in ops if (layer := _layer(op, graph, constants)))
    weights = {layer.weight: to_canonical(layer.op, read_constant(model, constants[layer.weight]))
               for layer in layers}
    biases = {layer.bias: read_constant(model, constants[layer.bias])
              for layer in layers if layer.bias}
    name = lambda i: graph.tensor(i).name  # noqa: E731
    infos = tuple(OpInfo(name(op.outputs[0]) if op.outputs else op.op, op.op,
                         tuple(name(i) for i in op.inputs if i >= 0),
                         tuple(name(i) for i in op.outputs)) for op in ops)
    activations = _activations(graph, ops)
    shapes = {t.name: t.shape for t in graph.tensors if t.name in set(activations)}
    return CalibGraph("tflite", tuple(name(i) for i in graph.inputs),
                      tuple(name(i) for i in graph.outputs), activations, layers, weights,
                      biases, infos, shapes, frozenset(shared_buffers(model)))


def _activations(graph, ops) -> tuple[str, ...]:
    """Float tensors to measure. An output that nothing reads of an op with several (a
    SPLIT's unused part, a WHILE loop's counters and spent carries) has no buffer after
    the run, and needs no range (ai-edge-quantizer gives a SPLIT's outputs its input's)."""
    used = {i for op in ops for i in op.inputs} | set(graph.outputs)
    seen = [graph.tensor(i).name for i in graph.inputs if graph.tensor(i).dtype == "float32"]
    for op in ops:
        for i in op.outputs:
            tensor = graph.tensor(i)
            if (op.op in CONTROL_FLOW or len(op.outputs) > 1) and i not in used:
                continue
            if tensor.dtype == "float32" and not tensor.is_constant:
                seen.append(tensor.name)
    return tuple(dict.fromkeys(seen))


class TFLiteCapture:
    """Runs a `.tflite` sample by sample and yields chosen tensors in batches."""

    def __init__(self, model: bytes, num_threads: int | None = None, preserve: bool = True):
        """`preserve=False` when only the model outputs are read: LiteRT then reuses
        intermediate buffers (a detector's activations held at once cost gigabytes)."""
        from ai_edge_litert.interpreter import Interpreter

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.interpreter = Interpreter(model_content=bytes(model),
                                               experimental_preserve_all_tensors=preserve,
                                               num_threads=num_threads)
            self.interpreter.allocate_tensors()
        except (ValueError, RuntimeError) as exc:
            raise ModelLoadError(f"LiteRT cannot load the model: {exc}") from exc
        self.details = {d["name"]: d for d in self.interpreter.get_tensor_details()}
        self.inputs = self.interpreter.get_input_details()

    def input_keys(self, calib: dict[str, np.ndarray]) -> list[str]:
        """The calibration array feeding each model input (signature or tensor names)."""
        return match_inputs(self.interpreter, list(calib))

    def stream(self, calib: dict[str, np.ndarray], tensors: set[str],
               batch_size: int = 8) -> Iterator[dict[str, np.ndarray]]:
        keys = self.input_keys(calib)
        count = len(next(iter(calib.values())))
        wanted = [self.details[n] for n in sorted(tensors) if n in self.details]
        pending: dict[str, list[np.ndarray]] = {d["name"]: [] for d in wanted}
        for i in range(count):
            self._invoke({detail["index"]: calib[key][i:i + 1]
                          for key, detail in zip(keys, self.inputs)})
            for detail in wanted:
                pending[detail["name"]].append(self._read(detail))
            if (i + 1) % batch_size == 0 or i + 1 == count:
                yield _batch(pending)  # empties pending
                pending = {d["name"]: [] for d in wanted}

    def _invoke(self, feeds: dict[int, np.ndarray]) -> None:
        try:
            for detail in self.inputs:
                # a recurrent state counts samples on axis 1, a scalar input has none
                value = in_model_layout(feeds[detail["index"]], tuple(
                    int(d) for d in detail.get("shape_signature", detail["shape"])))
                scale, zero_point = detail["quantization"]
                dtype = np.dtype(detail["dtype"])
                if dtype.kind in "iu" and scale:
                    info = np.iinfo(dtype)
                    value = np.clip(np.rint(value / scale) + zero_point, info.min, info.max)
                self.interpreter.set_tensor(detail["index"], value.astype(dtype))
            self.interpreter.invoke()
        except (ValueError, RuntimeError) as exc:  # a shape LiteRT will not take, a failed op
            raise ConversionError(f"LiteRT could not run the model on the calibration data: "
                                  f"{first_line(exc)}") from exc

    def _read(self, detail: dict) -> np.ndarray:
        try:
            value = self.interpreter.get_tensor(detail["index"])
        except ValueError as exc:  # 'Tensor data is null': LiteRT kept no buffer for it
            raise ConversionError(f"LiteRT cannot read tensor '{detail['name']}' after running "
                                  f"the model: {first_line(exc)}") from exc
        if value.dtype.kind in "iu":
            params = detail["quantization_parameters"]
            scales, zero_points = params["scales"], params["zero_points"]
            if len(scales) == 1:
                return (value.astype(np.float32) - zero_points[0]) * scales[0]
        return value.astype(np.float32, copy=True)


def _batch(pending: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    """Each tensor's samples joined into one batch (a scalar activation, rank 0, is one
    value per sample). Each tensor's samples are dropped as soon as they are joined: a
    detector's activations for a batch of 8 are gigabytes, and holding the samples and
    the batch at once doubled the build's peak memory."""
    batch = {}
    for name in list(pending):
        values = pending.pop(name)
        batch[name] = np.concatenate([np.atleast_1d(v) for v in values])
        values.clear()
    return batch


def _plain(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "", name.removeprefix("serving_default_").split(":")[0].lower())


def match_inputs(interpreter, keys: list[str]) -> list[str]:
    """Calibration keys in the interpreter's input order: by signature name, tensor name,
    sanitized name (converters rename 'input.1' to 'input_1'), then by position."""
    details = interpreter.get_input_details()
    signature = {}
    for runner_key in interpreter.get_signature_list():
        runner = interpreter.get_signature_runner(runner_key)
        signature = {name: d["index"] for name, d in runner.get_input_details().items()}
        break
    by_index = {index: name for name, index in signature.items()}
    ordered = []
    for detail in details:
        names = {detail["name"], by_index.get(detail["index"], detail["name"])}
        match = [k for k in keys if k in names] or [
            k for k in keys if _plain(k) in {_plain(n) for n in names}]
        ordered.append(match[0] if match else None)
    if None not in ordered:
        return ordered
    if len(keys) == len(details):
        return list(keys)
    missing = [d["name"] for d, k in zip(details, ordered) if k is None]
    raise DataError(f"no calibration array for model input(s) {missing} "
                    f"(got {', '.join(keys)})")
