"""The ops a `.tflite` model can run: the operator codes of every subgraph (WHILE, IF and
CALL_ONCE bodies included), builtin ops by name, custom ops as `CUSTOM:<custom code>`,
looked up in `ops_tflite.toml`. Every builtin kernel computes on tensors; custom ops run
whatever code is registered under their name (Flex ops run TensorFlow kernels, ReadFile
among them), so only the pure ones LiteRT ships are listed (TFLite_Detection_PostProcess;
Convolution2DTransposeBias, MediaPipe's, which the XNNPACK delegate implements and
edgeopt.tflite_prepare rewrites as builtin TRANSPOSE_CONV).

    >>> tflite_ops(read_tflite("m.tflite"))          # doctest: +SKIP
    {'CONV_2D': 'operator 0 of subgraph 0', 'CUSTOM:FlexReadFile': 'operator 3 ...'}
"""

from __future__ import annotations

from edgeopt.graph import Graph
from edgeopt.op_allowlist import check_ops


def tflite_ops(graph: Graph) -> dict[str, str]:
    """op name -> where it first appears, over all subgraphs."""
    ops: dict[str, str] = {}
    for op in graph.ops:
        name = f"CUSTOM:{op.custom_code}" if op.op == "CUSTOM" else op.op
        ops.setdefault(name, f"operator {op.index} of subgraph {op.subgraph}")
    return ops


def check_tflite_ops(graph: Graph, label: str) -> None:
    """Refuse a TFLite model holding an op outside the allowlist, naming op and operator."""
    check_ops("tflite", tflite_ops(graph), label)
