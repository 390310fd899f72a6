"""ONNX CNNs built node by node for the ONNX -> Keras -> ONNX pruning tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np


class OnnxNet:
    """A tiny graph builder: each method adds one node and returns its output name."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def _name(self, op: str) -> str:
        self.count += 1
        return f"{op.lower()}_{self.count}"

    def weight(self, shape, scale: float = 0.3, positive: bool = False):
        from onnx import numpy_helper

        array = self.rng.standard_normal(shape).astype("float32") * scale
        if positive:
            array = np.abs(array) + 0.5
        name = f"w{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def scalar(self, value: float) -> str:
        from onnx import numpy_helper

        name = f"s{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.array(value, "float32"), name))
        return name

    def int64s(self, values: list[int]) -> str:
        from onnx import numpy_helper

        name = f"i{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.array(values, "int64"), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        from onnx import helper

        name = self._name(op)
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def conv(self, x: str, cin: int, cout: int, k: int = 3, stride: int = 1,
             group: int = 1) -> str:
        pad = k // 2
        return self.node("Conv", [x, self.weight((cout, cin // group, k, k)),
                                  self.weight((cout,), 0.1)],
                         kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                         group=group)

    def bn(self, x: str, c: int) -> str:
        return self.node("BatchNormalization",
                         [x, self.weight((c,), positive=True), self.weight((c,), 0.1),
                          self.weight((c,), 0.1), self.weight((c,), positive=True)],
                         epsilon=1e-5)

    def save(self, path: Path, x_shape, output: str, classes: int) -> Path:
        import onnx
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            self.nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, [x_shape[0], classes])],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        onnx.save(model, str(path))
        return path


def residual_onnx(path: Path, size: int = 16, classes: int = 5, seed: int = 0) -> Path:
    """Conv-BN-ReLU, depthwise stride 2 with ReLU6, a residual Add, a Concat, GAP, Gemm."""
    net = OnnxNet(seed)
    x = net.node("Relu", [net.bn(net.conv("x", 3, 16), 16)])
    d = net.node("Clip", [net.bn(net.conv(x, 16, 16, 3, 2, group=16), 16), net.scalar(0.0),
                          net.scalar(6.0)])
    a = net.bn(net.conv(d, 16, 24, 1), 24)
    b = net.bn(net.conv(net.node("Relu", [net.conv(d, 16, 12, 1)]), 12, 24, 3), 24)
    r = net.node("Relu", [net.node("Add", [a, b])])
    c = net.node("Concat", [r, net.node("Relu", [net.conv(d, 16, 8, 1)])], axis=1)
    g = net.node("Flatten", [net.node("GlobalAveragePool", [c])], axis=1)
    out = net.node("Softmax", [net.node("Gemm", [g, net.weight((classes, 32)),
                                                  net.weight((classes,), 0.1)], transB=1)],
                   axis=-1)
    return net.save(path, ["N", 3, size, size], out, classes)


def flatten_onnx(path: Path, size: int = 8, classes: int = 4, seed: int = 1) -> Path:
    """Conv then a Reshape flattening a 4x4 map (CHW order, channel count in the shape
    constant) into MatMul + Add: the row-order case."""
    net = OnnxNet(seed)
    x = net.node("Relu", [net.conv("x", 1, 6, 3, 2)])
    x = net.node("MaxPool", [net.node("Relu", [net.conv(x, 6, 10)])], kernel_shape=[1, 1])
    hidden = (size // 2) ** 2 * 10
    flat = net.node("Reshape", [x, net.int64s([-1, hidden])])  # the channel count, baked in
    y = net.node("Add", [net.node("MatMul", [flat, net.weight((hidden, 16), 0.1)]),
                         net.weight((16,), 0.1)])
    out = net.node("Gemm", [net.node("Relu", [y]), net.weight((16, classes)),
                            net.weight((classes,), 0.1)])
    return net.save(path, [1, 1, size, size], out, classes)
