"""Control flow in a `.tflite` (IF, WHILE): the branch and loop bodies stay float, listed.

The calibration core measures ranges on the tensors of the main graph: LiteRT keeps no
readable buffer for a tensor of an IF branch or a WHILE body after the invoke (a WHILE
body's tensors hold only the last iteration, an IF branch's read as garbage), so those
tensors have no range, and ai-edge-quantizer refuses the model ("arg0 not found in
tensor_name_to_qsv"). Every op of such a body, the body's own inputs and outputs, and the
IF/WHILE op itself run in float; each is listed in `quantization.float_ops` with this
reason, so the artifact is honest about it and `--require-full-integer` refuses it.
"""

from __future__ import annotations

import re

from edgeopt.tflite_reader import read_tflite

CONTROL_FLOW = ("IF", "WHILE", "CALL_ONCE")
REASON = ("{op} {where}: LiteRT keeps no readable tensor there after a run, so the "
          "calibration core has no range for it; kept float")


def _scope(names: list[str]) -> str:
    """ai-edge-quantizer's op scope: output names joined and ended with ';'."""
    return ";".join(names) + ";" if names else ""


def _bodies(graph) -> list[dict]:
    """The subgraph records of the bodies (every subgraph but the main one)."""
    return list((graph.metadata or {}).get("subgraphs") or [])[1:]


def branch_ops(model: bytes) -> dict[str, str]:
    """Ops kept float because they sit in (or are) control flow, by output tensor name."""
    graph = read_tflite(model)
    if graph.subgraph_count < 2:
        return {}
    names = {}
    for op in graph.ops:
        if not op.outputs:
            continue
        name = graph.tensor(op.outputs[0]).name
        if op.subgraph > 0:
            names[name] = REASON.format(op=op.op, where=f"inside control-flow body "
                                        f"{op.subgraph}")
        elif op.op in CONTROL_FLOW:
            names[name] = REASON.format(op=op.op, where="with its bodies")
    return names


def branch_rules(model: bytes, no_quantize: str) -> list[dict]:
    """ai-edge-quantizer recipe rules leaving every body op and body IO in float."""
    graph = read_tflite(model)
    if graph.subgraph_count < 2:
        return []
    scopes = set()
    for op in graph.ops:
        if op.subgraph > 0 or op.op in CONTROL_FLOW:
            scopes.add(_scope([graph.tensor(i).name for i in op.outputs if i >= 0]))
    for body in _bodies(graph):
        for role in ("inputs", "outputs"):
            scopes.add(_scope([graph.tensor(i).name for i in body.get(role, ())]))
    scopes.discard("")
    return [{"regex": "^" + re.escape(scope) + "$", "operation": "*",
             "algorithm_key": no_quantize, "op_config": {}} for scope in sorted(scopes)]
