"""What the calibration core needs to know about a model, in no particular format.

A backend (`tflite_backend`, `onnx_backend`) reads its model into a `CalibGraph`: the
float activation tensors to observe, the layers with weights (convolutions, depthwise
convolutions, dense layers) with their weights in the canonical layout of
`edgeopt.calibration.weights`, and the op that produces each tensor. Layer names are
the names of their output tensors; recipes and reports use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np


class LayerKind(StrEnum):
    CONV = "conv"            # weight (O, I, kh, kw), groups == 1
    DEPTHWISE = "depthwise"  # weight (O, 1, kh, kw), one input channel per output channel
    GROUPED = "grouped"      # other grouped convolutions: weight (O, I/groups, kh, kw)
    DENSE = "dense"          # weight (O, I): fully connected, Gemm, MatMul with constant B


@dataclass(frozen=True)
class ConvGeometry:
    kernel: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    dilations: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    same_padding: bool = False                        # TFLite SAME: pads depend on input size
    groups: int = 1


@dataclass(frozen=True)
class Layer:
    name: str
    op: str                       # the format's own op name ('CONV_2D', 'Conv', ...)
    kind: LayerKind
    input: str
    output: str
    weight: str
    bias: str | None
    input_layout: str             # 'NHWC', 'NCHW' or 'NC' (dense: features last)
    geometry: ConvGeometry | None = None

    @property
    def int4_capable(self) -> bool:
        """Layers whose weights the writers can store as int4 with integer compute."""
        return self.kind in (LayerKind.CONV, LayerKind.DENSE)


@dataclass(frozen=True)
class OpInfo:
    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class CalibGraph:
    format: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    activations: tuple[str, ...]            # float tensors worth a range (inputs included)
    layers: tuple[Layer, ...]
    weights: dict[str, np.ndarray] = field(repr=False)   # canonical, by weight tensor name
    biases: dict[str, np.ndarray] = field(repr=False)    # (O,), by bias tensor name
    ops: tuple[OpInfo, ...] = ()
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)
    shared_storage: frozenset[str] = frozenset()   # constants whose bytes another tensor reuses

    def shared_constants(self) -> set[str]:
        """Weights and biases that must not get layer-specific values: read by several
        layers, or stored in a buffer that another tensor shares."""
        uses: dict[str, int] = {}
        for layer in self.layers:
            for name in (layer.weight, layer.bias):
                if name:
                    uses[name] = uses.get(name, 0) + 1
        return {n for n, count in uses.items() if count > 1} | set(self.shared_storage)

    def layer(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    def producer(self, tensor: str) -> OpInfo | None:
        for op in self.ops:
            if tensor in op.outputs:
                return op
        return None
