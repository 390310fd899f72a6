"""`.onnx` format object for the engine: prepare, read, capture, write, run, check."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeopt.calibration import onnx_writer
from edgeopt.calibration.config import Mode, Precision
from edgeopt.calibration.onnx_backend import OnnxCapture, prepare, read_graph, session
from edgeopt.calibration.plan import QuantPlan
from edgeopt.calibration.runtime_errors import RuntimeRejected
from edgeopt.errors import ConversionError, first_line
from edgeopt.model import load_onnx_proto
from edgeopt.runtime import ort_run_batches

# onnxruntime's QDQ naming: tensor T becomes T_QuantizeLinear_Output -> T_DequantizeLinear_Output
_DEQUANTIZED = "_DequantizeLinear_Output"
# Activations onnxruntime's QDQ pass folds into the op before them (their range is used).
_FOLDED = {"Relu", "Clip"}


def _read(model: bytes | str | Path) -> bytes:
    """The model's bytes; a file's external data only from inside its own folder."""
    if not isinstance(model, (str, Path)):
        return bytes(model)

    return load_onnx_proto(Path(model), with_data=True).SerializeToString()


class OnnxFormat:
    name = "onnx"
    runtime = "onnxruntime (CPU)"
    int4_modes = (Mode.STATIC, Mode.WEIGHT_ONLY)   # quantize_dynamic has no int4
    # one activation type for the whole model; and onnxruntime's CPU EP has no 16-bit QDQ
    # kernels (it runs a 16-bit DQ -> op -> Q group in float): int16 would buy nothing a
    # float op does not, so the collapse rescue goes straight to a float tail
    int16_activations = False
    keeps_ops_float = True   # excluded nodes (plan.keep_float): onnx_writer.excluded_nodes

    def __init__(self, model: bytes | str | Path, num_threads: int | None = None):
        import onnx

        source = _read(model)
        self.original = source
        self.float_model = prepare(source)
        self.num_threads = num_threads
        self.graph = read_graph(self.float_model)
        self._node_names = onnx_writer.node_names(onnx.load_from_string(self.float_model))

    def node_name(self, tensor: str) -> str:
        """The node writing `tensor`, as the QDQ model and the float-op list name it."""
        return self._node_names.get(tensor, tensor)

    def float_reasons(self, plan: QuantPlan) -> dict[str, str]:
        """Ops kept float on purpose, by node name: concatenations of mixed scales, a
        rescue's float tail (onnxruntime runs QDQ Div in float anyway)."""
        kept = onnx_writer.float_reasons(self.graph, plan)
        found = {**onnx_writer.float_followers(self.graph, kept, self._node_names), **kept}
        return {self.node_name(t): why for t, why in found.items()}

    def limitations(self, plan: QuantPlan) -> list[str]:
        """What this format cannot express of `plan` (said in the result's warnings)."""
        notes = []
        if plan.io_dtype != "float32":
            notes.append(f"onnx: QDQ models keep float inputs and outputs ({plan.io_dtype} IO "
                         "is a .tflite option)")
        if plan.mode == Mode.DYNAMIC:
            notes.append("onnx dynamic: onnxruntime's ConvInteger takes per-tensor weights, so "
                         "conv weights are re-rounded per tensor by onnxruntime")
        if any(p.precision == Precision.FP16 for p in plan.layers.values()) and \
                plan.mode == Mode.STATIC:
            notes.append("onnx static: fp16 layers run in float32 (QDQ cannot mix fp16)")
        return notes

    def report_tensor(self, layer) -> str:
        """Where a layer's output is compared: after a Relu/Clip that QDQ folds into it."""
        consumers = [op for op in self.graph.ops if layer.output in op.inputs]
        if len(consumers) == 1 and consumers[0].op in _FOLDED:
            return consumers[0].outputs[0]
        return layer.output

    def capture(self, model: bytes | None = None) -> OnnxCapture:
        return OnnxCapture(model or self.float_model, self.num_threads)

    def capture_quantized(self, model: bytes) -> OnnxCapture:
        """Activations of a QDQ model, read after their DequantizeLinear when there is one."""
        import onnx

        names = {o for node in onnx.load_from_string(model).graph.node for o in node.output}
        rename = {t: t + _DEQUANTIZED for t in self.graph.activations if t + _DEQUANTIZED in names}
        return OnnxCapture(model, self.num_threads, rename)

    def write(self, plan: QuantPlan) -> bytes:
        return onnx_writer.write(self.float_model, self.graph, plan)

    def run(self, model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            run = session(model, self.num_threads)
        except ConversionError as exc:
            raise RuntimeRejected(f"onnxruntime rejected the model: {exc}") from exc
        try:
            return ort_run_batches(run, feeds)
        except ConversionError:  # stopped at the deadline: no precision fallback helps
            raise
        except Exception as exc:  # onnxruntime's own exception types
            raise RuntimeRejected(f"onnxruntime failed to run the model: "
                                  f"{first_line(exc)}") from exc

    def check(self, model: bytes, sample: dict[str, np.ndarray]) -> None:
        """Load and run `sample` (every check sample: a failure can depend on the input)."""
        self.run(model, sample)
