"""Editing one subgraph of a float `.tflite` (schema object API): new tensors, scalar
constants and ops, and the replacement of one op by a short chain of others, in place so
the operator list stays in execution order."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.tflite_edit import constant, opcode_index, opcode_name, schema, set_constant, text

FLOAT32 = 0  # TensorType.FLOAT32


class Edit:
    """One subgraph of `model` being rewritten; new tensor names are unique model-wide."""

    def __init__(self, model: Any, subgraph: Any):
        self.model, self.subgraph = model, subgraph
        self._names = {text(t.name) for g in model.subgraphs or [] for t in g.tensors or []}

    # ------------------------------------------------------------------ reading

    def op_name(self, op: Any) -> str:
        return opcode_name(self.model, op)[0]

    def tensor(self, index: int) -> Any:
        return self.subgraph.tensors[index]

    def is_float(self, index: int) -> bool:
        return self.tensor(index).type == FLOAT32

    def static_shape(self, index: int) -> list[int] | None:
        """The tensor's shape when every dimension is fixed, else None."""
        tensor = self.tensor(index)
        shape = [int(d) for d in tensor.shape] if tensor.shape is not None else []
        signature = tensor.shapeSignature
        if signature is not None and any(int(d) < 0 for d in signature):
            return None
        return shape

    def reshape_target(self, x: int, y: int) -> list[int] | None:
        """The RESHAPE target that turns tensor `x` into `y`'s shape: y's fixed shape, or,
        with one dynamic dimension in each (a −1 batch), y's signature with its −1, which
        RESHAPE infers from the element count (the same for any batch); None otherwise."""
        fixed = self.static_shape(y)
        if fixed is not None and self.static_shape(x) is not None:
            return fixed
        dims = [[int(d) for d in (t.shapeSignature if t.shapeSignature is not None
                                  else t.shape)] for t in map(self.tensor, (x, y))]
        if any(d.count(-1) != 1 or any(v < -1 or v == 0 for v in d) for d in dims):
            return None
        known = [int(np.prod([v for v in d if v > 0])) for d in dims]
        return dims[1] if known[0] == known[1] else None

    def constant(self, index: int) -> np.ndarray | None:
        return constant(self.model, self.tensor(index))

    def consumers(self, index: int) -> list[int]:
        """Positions of the operators that read tensor `index`."""
        return [p for p, op in enumerate(self.subgraph.operators or [])
                if index in [int(i) for i in op.inputs]]

    def only_consumer(self, index: int) -> int | None:
        """The one operator reading tensor `index` when it is not also a graph output."""
        readers = self.consumers(index)
        outputs = [int(i) for i in self.subgraph.outputs]
        return readers[0] if len(readers) == 1 and index not in outputs else None

    def is_output(self, index: int) -> bool:
        return index in [int(i) for i in self.subgraph.outputs]

    # ------------------------------------------------------------------ writing

    def _unique(self, name: str) -> str:
        candidate, n = name, 1
        while candidate in self._names:
            n += 1
            candidate = f"{name}_{n}"
        self._names.add(candidate)
        return candidate

    def float_like(self, index: int, suffix: str) -> int:
        """A new float32 activation with the shape of tensor `index`."""
        source = self.tensor(index)
        signature = list(source.shapeSignature) if source.shapeSignature is not None else None
        return self.float_tensor(list(source.shape), f"{text(source.name)}/{suffix}", signature)

    def float_tensor(self, shape: list[int], name: str,
                     signature: list[int] | None = None) -> int:
        """A new float32 activation of `shape`, with an empty buffer of its own (as the
        converter writes them)."""
        tensor = schema().TensorT()
        tensor.name = self._unique(name).encode()
        tensor.shape, tensor.type = [int(d) for d in shape], FLOAT32
        if signature is not None:
            tensor.shapeSignature = signature
        self.model.buffers.append(schema().BufferT())
        tensor.buffer = len(self.model.buffers) - 1
        self.subgraph.tensors.append(tensor)
        return len(self.subgraph.tensors) - 1

    def constant_tensor(self, values: np.ndarray, name: str) -> int:
        """A new constant holding `values` (float32 scalars have shape [])."""
        values = np.ascontiguousarray(values)
        tensor = schema().TensorT()
        tensor.name = self._unique(name).encode()
        tensor.shape = [int(d) for d in values.shape]
        tensor.type = {np.dtype(np.float32): FLOAT32,
                       np.dtype(np.int32): schema().TensorType.INT32}[values.dtype]
        set_constant(self.model, tensor, values)
        self.subgraph.tensors.append(tensor)
        return len(self.subgraph.tensors) - 1

    def scalar(self, value: float, name: str) -> int:
        return self.constant_tensor(np.asarray(value, np.float32), name)

    def new_op(self, name: str, inputs: list[int], outputs: list[int],
               options: tuple[str, Any] | None = None, version: int = 1) -> Any:
        op = schema().OperatorT()
        op.opcodeIndex = opcode_index(self.model, name, version)
        op.inputs, op.outputs = list(inputs), list(outputs)
        if options is not None:
            kind, value = options
            op.builtinOptionsType = getattr(schema().BuiltinOptions, kind)
            op.builtinOptions = value
        return op

    def options(self, kind: str, **fields: Any) -> tuple[str, Any]:
        value = getattr(schema(), f"{kind}T")()
        for key, item in fields.items():
            setattr(value, key, item)
        return kind, value

    def reshape(self, x: int, y: int) -> Any:
        """A RESHAPE of `x` to the (fixed) shape of tensor `y`, written into `y`."""
        shape = [int(d) for d in self.tensor(y).shape]
        target = self.constant_tensor(np.asarray(shape, np.int32), "reshape/shape")
        return self.new_op("RESHAPE", [x, target], [y],
                           self.options("ReshapeOptions", newShape=shape))

    def remove(self, position: int) -> None:
        del self.subgraph.operators[position]

    def rewire(self, old: int, new: int) -> None:
        """Every operator that read tensor `old` reads `new` instead."""
        for op in self.subgraph.operators or []:
            op.inputs = [new if int(i) == old else int(i) for i in op.inputs]

    def replace(self, position: int, ops: list[Any]) -> None:
        """Put `ops` (in execution order) where the operator at `position` was."""
        operators = self.subgraph.operators
        self.subgraph.operators = [*operators[:position], *ops, *operators[position + 1:]]
