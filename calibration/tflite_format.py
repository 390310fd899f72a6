"""`.tflite` format object for the engine: read, capture, write, run, check."""

from __future__ import annotations

import re

import numpy as np

from edgeopt.calibration import tflite_writer
from edgeopt.calibration.config import Mode
from edgeopt.calibration.plan import QuantPlan
from edgeopt.calibration.runtime_errors import RuntimeRejected
from edgeopt.calibration.tflite_backend import TFLiteCapture, read_graph
from edgeopt.calibration.tflite_branches import branch_ops
from edgeopt.errors import ConversionError, ModelLoadError, first_line
from edgeopt.tflite_reader import read_tflite

# XNNPACK names the op it could not take ('failed to delegate SPLIT node #58') before
# LiteRT names the delegate's own node ('Node number 778 (TfLiteXNNPackDelegate)')
_NODE = re.compile(r"failed to delegate \w+ node #(\d+)|Node number (\d+)")


class TFLiteFormat:
    name = "tflite"
    runtime = "LiteRT interpreter"
    int4_modes = (Mode.STATIC, Mode.WEIGHT_ONLY, Mode.DYNAMIC)
    int16_activations = True   # ai-edge-quantizer's 16x8 rules, requantized at the seams
    keeps_ops_float = True     # NO_QUANTIZE rules per op (plan.keep_float)

    def __init__(self, float_model: bytes, num_threads: int | None = None):
        self.float_model = bytes(float_model)
        self.num_threads = num_threads
        self.graph = read_graph(self.float_model)
        self.branches = branch_ops(self.float_model)

    def capture(self, model: bytes | None = None) -> TFLiteCapture:
        return TFLiteCapture(model or self.float_model, self.num_threads)

    def limitations(self, plan: QuantPlan) -> list[str]:
        """What LiteRT's kernels cannot express of `plan` (said in the warnings)."""
        blocks = [p for p in plan.layers.values()
                  if p.weight is not None and p.weight.block_size is not None]
        if blocks:
            return ["tflite blockwise int4: LiteRT runs it with dynamic-range kernels "
                    "(activations quantized on the fly), fully connected layers only"]
        return []

    def float_reasons(self, plan: QuantPlan) -> dict[str, str]:
        """Ops kept float on purpose (by output tensor), with the reason."""
        reasons = tflite_writer.float_reasons(self.graph, plan)
        if plan.mode == Mode.STATIC and plan.quantize_rest:
            return {**self.branches, **reasons}
        return reasons

    def report_tensor(self, layer) -> str:
        return layer.output

    def node_name(self, tensor: str) -> str:
        """An op is named by its output tensor in `quantization.float_ops`."""
        return tensor

    def capture_quantized(self, model: bytes) -> TFLiteCapture:
        """Dequantized activations of a quantized model, under the float tensor names."""
        return TFLiteCapture(model, self.num_threads)

    def write(self, plan: QuantPlan) -> bytes:
        return tflite_writer.write(self.float_model, self.graph, plan)

    def run(self, model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """All samples through LiteRT, float outputs in the model's output order."""
        try:
            capture = TFLiteCapture(model, self.num_threads, preserve=False)
            outputs = [d["name"] for d in capture.interpreter.get_output_details()]
            chunks = [[batch[name] for name in outputs]
                      for batch in capture.stream(feeds, set(outputs), batch_size=64)]
        except (RuntimeError, ValueError, ModelLoadError, ConversionError) as exc:
            # ConversionError: an op failed at invoke (LiteRT's int8 DIV on a zero divisor)
            raise self._rejected(model, exc) from exc
        return [np.concatenate(parts) for parts in zip(*chunks)]

    def check(self, model: bytes, sample: dict[str, np.ndarray]) -> None:
        """Load and invoke on `sample`; a refusal names the op that LiteRT blamed, if any."""
        self.run(model, sample)

    def _rejected(self, model: bytes, exc: Exception) -> RuntimeRejected:
        text = str(exc)
        match = _NODE.search(text)
        tensor, ops, index = None, [], 0
        if match:
            graph = read_tflite(model)
            ops = [op for op in graph.ops if op.subgraph == 0]
            index = int(match.group(1) or match.group(2))
            if index < len(ops) and ops[index].outputs:
                tensor = graph.tensor(ops[index].outputs[0]).name
        where = f" (op {ops[index].op}, output '{tensor}')" if tensor else ""
        return RuntimeRejected(f"LiteRT rejected the quantized model{where}: "
                               f"{first_line(exc)}", tensor)
