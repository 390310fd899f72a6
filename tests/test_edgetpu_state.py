"""A streaming model (resource variables initialised by CALL_ONCE) on the Edge TPU.

microWakeWord's okay_nabu.tflite is fully int8, yet coral-usb refused it with "#0 CALL_ONCE
computes in float (no integer kernel)": CALL_ONCE has no tensor at all. The true reason is
that the model keeps state in resource variables and the Edge TPU compiler maps no
control-flow or variable op; CALL_ONCE is op #0, so nothing would reach the TPU."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.devices.edgetpu import edgetpu_assignment, require_int8
from edgeopt.devices.profile import load_profile
from edgeopt.errors import DeviceError
from edgeopt.tflite_reader import read_tflite


def _stateful_int8_tflite() -> bytes:
    """y = relu([state / 127, x] @ w); state <- s: an int8 variable, so every op is int8
    and the converter writes CALL_ONCE, VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE."""
    import tensorflow as tf

    class Streaming(tf.Module):
        def __init__(self):
            self.state = tf.Variable(tf.zeros([1, 4], tf.int8), trainable=False)
            self.w = tf.constant(np.random.default_rng(0).normal(0, 0.5, (8, 4)), tf.float32)

        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x"),
                                      tf.TensorSpec([1, 4], tf.int8, name="s")],
                     autograph=False)
        def __call__(self, x, s):
            old = tf.cast(self.state.read_value(), tf.float32) / 127.0
            y = tf.nn.relu(tf.matmul(tf.concat([old, x], 1), self.w))
            self.state.assign(s)
            return {"y": y}

    module = Streaming()
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [module.__call__.get_concrete_function()], module)
    converter.experimental_enable_resource_variables = True
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.default_rng(1)
    converter.representative_dataset = lambda: (
        {"s": rng.integers(-100, 100, (1, 4)).astype(np.int8),
         "x": rng.random((1, 4), dtype=np.float32)} for _ in range(16))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    return converter.convert()


@pytest.fixture(scope="module")
def streaming(tmp_path_factory):
    path = tmp_path_factory.mktemp("state") / "streaming.tflite"
    path.write_bytes(_stateful_int8_tflite())
    return path


def test_call_once_is_not_called_a_float_op(streaming):
    graph = read_tflite(streaming.read_bytes())
    assert graph.ops_in_subgraph(0)[0].op == "CALL_ONCE"
    require_int8(graph, load_profile("coral-usb"))  # was: "#0 CALL_ONCE computes in float"


def test_the_edge_tpu_says_the_model_keeps_state_and_what_to_do(streaming):
    with pytest.raises(DeviceError) as raised:
        edgetpu_assignment(read_tflite(streaming.read_bytes()), load_profile("coral-usb"))
    message = str(raised.value)
    assert "no integer kernel" not in message and "float" not in message
    assert "resource variables" in message and "#0 CALL_ONCE" in message
    assert "CALL_ONCE runs subgraph 1 once" in message and "1 READ_VARIABLE" in message
    assert "stateless" in message and "extra model input and output" in message
    assert "pixel-npu" in message


def test_estimate_for_coral_is_one_line_error(run_cli, streaming):
    from conftest import assert_user_error

    result = run_cli("estimate", streaming, "--device", "coral-usb")
    assert_user_error(result, "keeps state between invokes in resource variables")


def test_the_same_model_still_estimates_on_a_device_with_a_cpu(run_cli, streaming):
    result = run_cli("estimate", streaming, "--device", "pixel-npu")
    assert result.exit_code == 0, result.stderr


def _while_int8_tflite() -> bytes:
    """y = relu(relu(relu(x @ w) @ w) @ w) written as a tf.while_loop: the converter keeps
    the WHILE (its body quantized inside), the main graph's first op past the QUANTIZE."""
    import tensorflow as tf

    w = tf.constant(np.random.default_rng(0).normal(0, 0.5, (4, 4)), tf.float32)

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")],
                 autograph=False)
    def loop(x):
        _, y = tf.while_loop(lambda i, v: i < 3,
                             lambda i, v: (i + 1, tf.nn.relu(tf.matmul(v, w))),
                             (tf.constant(0), x))
        return {"y": y}

    converter = tf.lite.TFLiteConverter.from_concrete_functions([loop.get_concrete_function()])
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.default_rng(1)
    converter.representative_dataset = lambda: (
        [rng.random((1, 4), dtype=np.float32)] for _ in range(16))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    return converter.convert()


@pytest.mark.slow
def test_a_model_that_is_one_while_loop_says_unroll_it():
    graph = read_tflite(_while_int8_tflite())
    assert "WHILE" in [op.op for op in graph.ops_in_subgraph(0)]
    with pytest.raises(DeviceError) as raised:
        edgetpu_assignment(graph, load_profile("coral-usb"))
    message = str(raised.value)
    assert "no integer kernel" not in message and "compute in float" not in message
    assert "control flow" in message and "WHILE" in message and "unroll the loop" in message
    assert "resource variables" not in message
