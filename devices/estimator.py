"""Latency and energy of a model on a device profile, before anyone touches the device.

    >>> from edgeopt.devices.estimator import estimate
    >>> from edgeopt.devices.profile import load_profile
    >>> from edgeopt.tflite_reader import read_tflite
    >>> result = estimate(read_tflite("model.tflite"), load_profile("rpi5-cpu"))  # doctest: +SKIP
    >>> round(result.latency_ms, 2), result.to_json()["ops"][0]                  # doctest: +SKIP
    (12.31, {'index': 0, 'op': 'CONV_2D', 'unit': 'cpu', 'latency_ms': 0.41, ...})

Which unit runs each op comes from the delegate placement (assignment.py; the Edge TPU's
compiler mapping from edgetpu.py); what that assignment costs, per op and in total, from
costing.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from edgeopt.delegates.onnx_cost_view import cost_view
from edgeopt.delegates.onnx_placement import place_onnx_for_device
from edgeopt.delegates.onnx_shapes import dynamic_inputs, with_fixed_inputs
from edgeopt.devices.assignment import PlacementInput, UnitAssignment, assign_units
from edgeopt.devices.costing import estimate_assigned
from edgeopt.devices.edgetpu import edgetpu_assignment, simulate
from edgeopt.devices.fitted import PRIOR_BASIS
from edgeopt.devices.profile import DeviceProfile
from edgeopt.devices.result import Estimate
from edgeopt.errors import DeviceError
from edgeopt.graph import Graph
from edgeopt.onnx_reader import read_onnx


def estimate(graph: Graph, profile: DeviceProfile, placement: PlacementInput = None,
             model: Any = None) -> Estimate:
    """Estimate one inference of ``graph`` on ``profile``.

    ``placement``: an `edgeopt.delegates` Placement, ``{op index: unit}``, a list of unit
    names, or None (see assignment.py). ``model``: the .tflite bytes or path, which lets
    the delegate rules read constant values. The Edge TPU profiles go through
    `edgeopt.devices.edgetpu.simulate`, which checks the model is fully int8 first.
    """
    if profile.hardware is None:
        raise DeviceError(f"device profile {profile.name} has no hardware tables to estimate from")
    if graph.format == "onnx":
        return estimate_onnx(graph, profile, placement)
    if profile.delegate == "edgetpu":
        return simulate(graph, profile, placement, model)
    assignment = assign_units(graph, profile, placement, model)
    return estimate_assigned(graph, profile, assignment, _compiler_figures(assignment))


def estimate_onnx(graph: Graph, profile: DeviceProfile, placement: PlacementInput = None
                  ) -> Estimate:
    """One inference of an ONNX ``graph`` on ``profile``: its nodes placed on onnxruntime's
    execution provider for the profile (`place_onnx_for_device` when ``placement`` is None),
    costed as the kernels onnxruntime runs (`cost_view`) by the same device model as .tflite.
    """
    if placement is None:
        placement = place_onnx_for_device(graph, profile)
    kernels = cost_view(graph)
    assignment = assign_units(kernels, profile, placement)
    notes: tuple[str, ...] = ()
    if profile.kind == "cpu" and assignment.units.count(profile.tables().main_unit) < len(
            assignment.units):
        # The CPU EP's MLAS kernels are optimized CPU kernels like XNNPACK's, not LiteRT's
        # builtin reference kernels (the profile's "cpu" unit).
        main = profile.tables().main_unit
        assignment = replace(assignment, units=tuple(main for _ in assignment.units))
        notes = (f"nodes on onnxruntime's CPU EP are costed as the profile's optimized CPU "
                 f"kernels ({main} unit), like its XNNPACK EP nodes",)
    result = estimate_assigned(kernels, profile, assignment)
    names = {op.index: op.op for op in graph.ops}  # rows name the ONNX nodes, not builtins
    result = replace(result, ops=tuple(replace(row, op=names[row.index]) for row in result.ops),
                     notes=result.notes + notes)
    return _cpu_only_basis(result, profile)


def estimate_onnx_model(content: bytes, profile: DeviceProfile, placement: PlacementInput,
                        shapes: Mapping[str, Sequence[int]] | None = None) -> Estimate:
    """`estimate_onnx` of an .onnx file whose dynamic input dimensions are costed at
    ``shapes`` (the build's --input-shape / calibration shapes; 1 where none is given)."""
    dynamic = dynamic_inputs(content)
    if not dynamic:
        return estimate_onnx(read_onnx(content), profile, placement)
    result = estimate_onnx(read_onnx(with_fixed_inputs(content, shapes or {})), profile,
                           placement)
    shown = ", ".join(f"{name} {list(shapes[name])}" if shapes and name in shapes
                      else f"{name} (dynamic dimensions at 1)" for name in dynamic)
    note = f"the estimate costs the model's dynamic inputs at the build's shapes: {shown}"
    return replace(result, notes=result.notes + (note,))


def _cpu_only_basis(result: Estimate, profile: DeviceProfile) -> Estimate:
    """A fit of an accelerator's rows says nothing about a model left on the CPU EP."""
    cpu = profile.tables().cpu_unit().name
    if profile.kind == "cpu" or profile.fit is None or any(r.unit != cpu for r in result.ops):
        return result
    why = (f"every node runs on onnxruntime's CPU EP; the profile's fit ({profile.basis}) is "
           f"of {profile.kind} rows, so the CPU figures are its prior")
    return replace(result, basis=PRIOR_BASIS, interval_s=None, notes=result.notes + (why,))


def _compiler_figures(assignment: UnitAssignment) -> dict | None:
    """A vendor compiler's own figures (Vela's SRAM/flash use, cycles, time) if it ran."""
    figures = getattr(assignment.placement, "compiler", None)
    return dict(figures) if figures else None


def resolve_assignment(graph: Graph, profile: DeviceProfile, placement: PlacementInput = None,
                       model: Any = None) -> UnitAssignment:
    """The per-op units `estimate` would use (the Edge TPU compiler's mapping for Coral)."""
    if profile.delegate == "edgetpu":
        return edgetpu_assignment(graph, profile, placement, model)
    return assign_units(graph, profile, placement, model)


__all__ = ["estimate", "estimate_assigned", "estimate_onnx", "estimate_onnx_model",
           "resolve_assignment"]
