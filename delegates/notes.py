"""Model-level advice for a device: IO types it expects, a dynamic batch, a float model.

    >>> device_notes(graph, load_profile("coral-usb"), placement)   # doctest: +SKIP
    ("uint8 IO expected by coral-usb: input 'image' is int8 ...",)
"""

from __future__ import annotations

from edgeopt.delegates.placement import Placement
from edgeopt.delegates.registry import RULE_MODULES, load_delegate_rules
from edgeopt.delegates.view import QUANT_DTYPES
from edgeopt.graph import Graph

ACCELERATOR_KINDS = ("npu", "tpu")


def device_notes(graph: Graph, profile, placement: Placement) -> tuple[str, ...]:
    """Advice that concerns the whole model rather than one op."""
    notes = []
    if profile.kind in ACCELERATOR_KINDS:
        notes += _io_notes(graph, profile)
        notes += _precision_notes(graph, profile)
    if _needs_static_shapes(profile.delegate) and _dynamic_inputs(graph):
        names = ", ".join(f"'{t.name}'" for t in _dynamic_inputs(graph))
        notes.append(f"dynamic batch: fix the input shape to 1 (input {names}); "
                     "edgeopt build does this for a dynamic batch dimension")
    return tuple(notes)


def _io_notes(graph: Graph, profile) -> list[str]:
    expected = profile.io_dtype
    if expected not in ("int8", "uint8"):
        return []
    wrong = [(role, t) for role, tensors in (("input", graph.input_tensors()),
                                             ("output", graph.output_tensors()))
             for t in tensors if t.dtype != expected]
    if not wrong:
        return []
    role, tensor = wrong[0]
    return [f"{expected} IO expected by {profile.name}: {role} '{tensor.name}' is "
            f"{tensor.dtype}; convert with inference_input_type/inference_output_type = "
            f"tf.{expected}"]


def _precision_notes(graph: Graph, profile) -> list[str]:
    if profile.precision != "int8":
        return []
    activations = [graph.tensors[t] for op in graph.ops_in_subgraph(0) for t in op.outputs
                   if t >= 0]
    if any(t.dtype in QUANT_DTYPES for t in activations):
        return []
    return [f"float model: {profile.name} runs full-integer int8 models; quantize it "
            "(edgeopt build quantizes for this device)"]


def _needs_static_shapes(delegate: str) -> bool:
    if delegate not in RULE_MODULES:
        return False
    return any(rule.name == "static_shapes" for rule in load_delegate_rules(delegate).generic)


def _dynamic_inputs(graph: Graph):
    return [t for t in graph.input_tensors() if t.is_dynamic]
