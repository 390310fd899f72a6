"""ONNX nodes with no prunable Keras layer, kept whole: the node itself, run by onnxruntime.

Real models mix the CNN op set that pruning understands with ops it does not (a YOLOv8
C2f's channel Split, a PP-OCR recognizer's Transpose/Reshape into a sequence, an LSTM,
a normalization written as Pow/Sqrt/Reciprocal). Refusing the whole model for one such
node would leave every convolution unpruned, so the node becomes a Keras layer that runs
that one ONNX node (a one-node model) in onnxruntime through ``tf.numpy_function``:

* *frozen*: the channels that reach it are locked (never removed) and its outputs carry
  no prunable channel; the node is written back to the ONNX graph unchanged, which is
  right because none of its input or output shapes change.
* *pass-through* (``passthrough=True``): an op that acts on each channel alone (an
  element-wise op, a Slice/Split/Pad/Resize/Transpose off the channel axis) lets the
  channel layout through, so the producer before it and the consumer after it prune as one
  group. Its one-node model declares the channel axis symbolic, so it runs at any channel
  count, and the ONNX node needs no edit either (its constants never name the channel axis).

A node whose tensors are all float runs as TensorFlow ops instead (converters/
onnx_tf_nodes.py: the same node on the whole batch, where it leaves the batch axis alone),
so distillation and QAT train through it; any other node has no gradient (onnxruntime
runs it).
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from edgeopt.converters.onnx_tf_nodes import node_function

NCHW_TO_NHWC = (0, 2, 3, 1)
NHWC_TO_NCHW = (0, 3, 1, 2)
LAYER_CLASS = "OnnxOp"

_CLASS: list[Any] = []


def one_node_model(node: Any, proto: Any, inputs: list[tuple[str, int, list]],
                   consts: dict[str, np.ndarray], outputs: list[tuple[str, int, list]],
                   channel_axis: int | None) -> bytes:
    """A model of ``node`` alone: ``inputs``/``outputs`` are (name, ONNX dtype, dims);
    ``channel_axis`` (when passing channels through) becomes the symbolic dimension C."""
    import onnx
    from onnx import helper, numpy_helper

    def info(name: str, dtype: int, dims: list | None) -> Any:
        if dims is None:  # a folded constant: any shape
            return helper.make_tensor_value_info(name, dtype, None)
        dims = list(dims)
        if channel_axis is not None:
            dims[channel_axis] = "C"
        return helper.make_tensor_value_info(name, dtype, dims)

    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    used = {name for name in node.input if name in consts}
    graph = helper.make_graph(
        [copy], "edgeopt_frozen", [info(*spec) for spec in inputs],
        [info(*spec) for spec in outputs],
        [numpy_helper.from_array(consts[name], name) for name in sorted(used)])
    model = helper.make_model(graph, opset_imports=list(proto.opset_import))
    model.ir_version = proto.ir_version
    return model.SerializeToString()


def run_once(content: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The node's outputs on ``feeds`` (a node of constants is folded with this)."""
    import onnxruntime as ort

    session = ort.InferenceSession(content, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def layer_class() -> Any:
    """The Keras layer class (made once, registered so a pruned model rebuilds from config)."""
    if _CLASS:
        return _CLASS[0]
    import keras
    import tensorflow as tf

    @keras.saving.register_keras_serializable(package="edgeopt")
    class OnnxOp(keras.layers.Layer):
        """One ONNX node run by onnxruntime; see the module docstring."""

        def __init__(self, model_b64: str, input_names: list, input_dtypes: list,
                     input_convs: list, output_index: int, output_shape: list,
                     output_conv: str, passthrough: bool = False, node: str = "",
                     **kwargs: Any) -> None:
            kwargs["trainable"] = False
            super().__init__(**kwargs)
            self.model_b64, self.node = model_b64, node
            self.input_names, self.input_dtypes = list(input_names), list(input_dtypes)
            self.input_convs, self.output_index = list(input_convs), int(output_index)
            self.output_shape_, self.output_conv = list(output_shape), output_conv
            self.passthrough = bool(passthrough)
            self._session = None

        def get_config(self) -> dict:
            return {**super().get_config(), "model_b64": self.model_b64, "node": self.node,
                    "input_names": self.input_names, "input_dtypes": self.input_dtypes,
                    "input_convs": self.input_convs, "output_index": self.output_index,
                    "output_shape": self.output_shape_, "output_conv": self.output_conv,
                    "passthrough": self.passthrough}

        def compute_output_shape(self, input_shape: Any) -> tuple:
            shape = [None, *self.output_shape_[1:]]
            if self.passthrough:  # the channel count is the input's (pruned or not)
                first = input_shape[0] if isinstance(input_shape, list) else input_shape
                shape[-1] = first[-1]
            return tuple(shape)

        def _run(self, *arrays: np.ndarray) -> np.ndarray:
            import onnxruntime as ort

            if self._session is None:
                self._session = ort.InferenceSession(base64.b64decode(self.model_b64),
                                                     providers=["CPUExecutionProvider"])
            rows = []
            for b in range(len(arrays[0])):  # the node was shaped for batch 1
                feeds = {name: _sample(a, b, conv).astype(dtype)
                         for name, dtype, conv, a in zip(self.input_names, self.input_dtypes,
                                                          self.input_convs, arrays)}
                out = self._session.run(None, feeds)[self.output_index]
                rows.append(np.asarray(out, "float32"))
            # a tensor with no batch axis first is one value per sample, stacked
            y = np.stack(rows) if self.output_conv == "stack" else np.concatenate(rows)
            return np.ascontiguousarray(y.transpose(NCHW_TO_NHWC)) \
                if self.output_conv == "nchw" else y

        def _tf_function(self) -> Any:
            """The node as TensorFlow ops (onnx_tf_nodes), or None: onnxruntime runs it.
            On the whole batch when the node leaves its batch axis alone; else (a tensor
            with no batch axis first, a Transpose moving it) sample by sample, as
            onnxruntime runs it here, mapped over the batch (``_mapped``)."""
            if not hasattr(self, "_tf_node"):
                content = base64.b64decode(self.model_b64)
                stacked = "stack" in (*self.input_convs, self.output_conv)
                self._tf_node = None if stacked else node_function(content)
                self._per_sample = self._tf_node is None
                if self._per_sample:
                    self._tf_node = node_function(content, batched=False)
            return self._tf_node

        def _differentiable(self, tensors: list) -> Any:
            if self._per_sample:
                return self._mapped(tensors)
            feeds = [_tf_to_onnx(t, conv) for t, conv in zip(tensors, self.input_convs)]
            y = self._tf_function()(feeds)[self.output_index]
            return tf.transpose(y, NCHW_TO_NHWC) if self.output_conv == "nchw" else y

        def _mapped(self, tensors: list) -> Any:
            """``_run`` in TensorFlow: each sample fed as the node was shaped (``_sample``),
            the outputs stacked or concatenated; vectorized, with gradients. Compiled once
            per layer: called eagerly (a held-back evaluation), vectorized_map would trace
            its graph again on every call (minutes a batch on PP-OCRv4's recognizer)."""
            if not hasattr(self, "_mapped_fn"):
                self._mapped_fn = tf.function(self._map_samples, reduce_retracing=True)
            return self._mapped_fn(*tensors)

        def _map_samples(self, *tensors: Any) -> Any:
            def one(sample: tuple) -> Any:
                feeds = [s if conv == "stack" else _tf_to_onnx(s[None], conv)
                         for s, conv in zip(sample, self.input_convs)]
                y = self._tf_node(feeds)[self.output_index]
                return y if self.output_conv == "stack" else y[0]

            y = tf.vectorized_map(one, tensors)
            return tf.transpose(y, NCHW_TO_NHWC) if self.output_conv == "nchw" else y

        def call(self, inputs: Any) -> Any:
            tensors = inputs if isinstance(inputs, list | tuple) else [inputs]
            if self._tf_function() is not None:
                y = self._differentiable(list(tensors))
            else:
                y = tf.numpy_function(self._run, list(tensors), tf.float32, stateful=False)
            in_shapes = [tuple(t.shape) for t in tensors]
            y.set_shape(self.compute_output_shape(in_shapes if len(in_shapes) > 1
                                                  else in_shapes[0]))
            return y

    _CLASS.append(OnnxOp)
    return OnnxOp


def onnxruntime_nodes(model: Any) -> list[str]:
    """The kept-whole nodes of an imported model that onnxruntime runs (no gradient):
    "name (Op)" each."""
    import onnx

    found = []
    for layer in getattr(model, "layers", []):
        if type(layer).__name__ == LAYER_CLASS and layer._tf_function() is None:
            op = onnx.load_from_string(base64.b64decode(layer.model_b64)).graph.node[0].op_type
            found.append(f"'{layer.node}' ({op})")
        elif hasattr(layer, "layers"):
            found += onnxruntime_nodes(layer)
    return found


def _sample(array: np.ndarray, b: int, conv: str) -> np.ndarray:
    """Sample ``b`` of a Keras batch as the ONNX node reads it (batch 1, or unbatched)."""
    return np.asarray(array[b]) if conv == "stack" else _to_onnx(array[b:b + 1], conv)


def _tf_to_onnx(batch: Any, conv: str) -> Any:
    """``_to_onnx`` in TensorFlow: a Keras-layout batch in the node's layout."""
    import tensorflow as tf

    if conv == "nchw":
        return tf.transpose(batch, NHWC_TO_NCHW)
    if conv.startswith("flat:"):
        h, w, c = (int(v) for v in conv[5:].split(","))
        nchw = tf.transpose(tf.reshape(batch, (-1, h, w, c)), (0, 3, 1, 2))
        return tf.reshape(nchw, (tf.shape(batch)[0], -1))
    return batch


def _to_onnx(array: np.ndarray, conv: str) -> np.ndarray:
    """A Keras-layout batch in the ONNX node's layout: NHWC->NCHW, or HWC->CHW columns."""
    if conv == "nchw":
        return array.transpose(NHWC_TO_NCHW)
    if conv.startswith("flat:"):
        h, w, c = (int(v) for v in conv[5:].split(","))
        return array.reshape(-1, h, w, c).transpose(0, 3, 1, 2).reshape(len(array), -1)
    return array


def encode(content: bytes) -> str:
    """The one-node model as layer-config text."""
    return base64.b64encode(content).decode("ascii")
