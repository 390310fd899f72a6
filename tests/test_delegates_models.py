"""Placement on tiny real models: the XNNPACK rules against what the LiteRT interpreter
really delegates, the report's JSON contract, summaries, rewrites and device notes.

`models()` builds every tiny .tflite once per test session (the other delegate test
modules import it): float and int8 CNNs, an int8 model with a float island and HARD_SWISH,
a WHILE loop, a Flex op on string tensors, a two-signature model and a vendor custom op.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from conftest import tiny_cnn
from edgeopt.delegates import delegate_names, place, place_for_device
from edgeopt.delegates.probe import xnnpack_delegated_ops
from edgeopt.devices.profile import profile_names
from edgeopt.errors import ConfigError, DeviceError


def _keras():
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import keras

    keras.utils.set_random_seed(0)
    return keras


def _convert(model, int8: bool = False, flex: bool = False, functions=None) -> bytes:
    import tensorflow as tf

    from edgeopt.quiet import captured_prints, library_output_to_log

    if functions:
        converter = tf.lite.TFLiteConverter.from_concrete_functions(functions, model)
    else:
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if int8:
        rng = np.random.default_rng(0)
        shape = (1, *model.input_shape[1:])
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ([rng.random(shape, np.float32)]
                                                    for _ in range(4))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
                                               tf.lite.OpsSet.TFLITE_BUILTINS]
        converter.inference_input_type = converter.inference_output_type = tf.int8
    if flex:
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS,
                                               tf.lite.OpsSet.SELECT_TF_OPS]
    with library_output_to_log(), captured_prints():
        return converter.convert()


def _batch_one_cnn():
    keras = _keras()
    model = tiny_cnn()
    inputs = keras.Input(batch_shape=(1, 16, 16, 3))
    return keras.Model(inputs, model(inputs))


def _island():
    """conv -> HARD_SWISH -> CUMSUM (no int8 kernel: a float island) -> conv -> softmax."""
    keras = _keras()
    import tensorflow as tf

    inputs = keras.Input((16, 16, 3), batch_size=1)
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Activation("hard_swish")(x)
    x = keras.layers.Lambda(lambda t: tf.math.cumsum(t, axis=1))(x)
    x = keras.layers.Conv2D(4, 1)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(4, activation="softmax")(x))


def _while_loop() -> bytes:
    import tensorflow as tf

    class Loop(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 8], tf.float32)])
        def __call__(self, x):
            n = tf.cast(tf.reduce_sum(tf.abs(x)) % 3.0, tf.int32) + 1
            return tf.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tf.nn.relu(v + 1.0)),
                                 [tf.constant(0), x])[1]

    loop = Loop()
    return _convert(loop, functions=[loop.__call__.get_concrete_function()])


def _flex_strings() -> bytes:
    import tensorflow as tf

    class Parse(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([2], tf.string)])
        def __call__(self, s):
            return tf.nn.relu(tf.strings.to_number(tf.reshape(s, [1, 2])) * 2.0)

    parse = Parse()
    return _convert(parse, flex=True, functions=[parse.__call__.get_concrete_function()])


def _two_signatures() -> bytes:
    import tensorflow as tf

    class Two(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])
        def double(self, x):
            return tf.nn.relu(x * 2.0)

        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])
        def shift(self, x):
            return tf.tanh(x + 1.0)

    two = Two()
    return _convert(two, functions=[two.double.get_concrete_function(),
                                    two.shift.get_concrete_function()])


def with_custom_op(tflite: bytes, op_name: str, custom_code: str) -> bytes:
    """The same model with every ``op_name`` turned into a custom op (a vendor kernel)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(tflite, 0))
    for code in model.operatorCodes:
        if max(code.builtinCode, code.deprecatedBuiltinCode) == getattr(
                schema.BuiltinOperator, op_name):
            code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
            code.customCode = custom_code.encode()
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


@functools.cache
def models() -> dict[str, bytes]:
    """Every tiny model, built once per session."""
    cnn = tiny_cnn()
    built = {
        "cnn_float": _convert(cnn),
        "cnn_int8": _convert(_batch_one_cnn(), int8=True),
        "island_int8": _convert(_island(), int8=True),
        "while_float": _while_loop(),
        "flex_strings": _flex_strings(),
        "two_signatures": _two_signatures(),
    }
    built["custom_op"] = with_custom_op(built["cnn_float"], "MEAN", "MyVendorOp")
    return built


RUNNABLE = ("cnn_float", "cnn_int8", "island_int8", "while_float", "two_signatures")


@pytest.mark.parametrize("name", RUNNABLE)
def test_xnnpack_rules_match_the_interpreter(name):
    """Every main-graph op: the rules' verdict equals what LiteRT handed to XNNPACK."""
    data = models()[name]
    truth = xnnpack_delegated_ops(data)
    placement = place(data, "xnnpack")
    predicted = {op.index for op in placement.ops if op.unit == "xnnpack" and op.subgraph == 0}
    assert predicted == truth


def test_island_fallbacks_have_reasons_and_rewrites():
    placement = place(models()["island_int8"], "xnnpack")
    cpu = {op.op: op for op in placement.fallbacks()}
    assert set(cpu) == {"HARD_SWISH", "CUMSUM", "SOFTMAX"}
    assert "int8" in cpu["HARD_SWISH"].reason and cpu["HARD_SWISH"].rewrite
    assert "CUMSUM is not supported by XNNPACK" in cpu["CUMSUM"].reason
    assert len(placement.partitions) == 3 and placement.crossings


def test_json_contract():
    placement = place(models()["island_int8"], "edgetpu")
    manifest = placement.manifest_json()
    assert set(manifest) == {"delegate", "delegated_ops", "cpu_ops", "partitions"}
    assert manifest["delegated_ops"] + manifest["cpu_ops"] == len(placement.ops)
    record = json.loads(json.dumps(placement.to_json(), allow_nan=False))
    assert {"index", "op", "unit", "reason"} <= set(record["ops"][0])
    assert all(c["bytes"] > 0 for c in record["crossings"])


def test_edgetpu_prefix_and_hard_swish_rewrite():
    placement = place(models()["island_int8"], "edgetpu")
    units = [op.unit for op in placement.ops]
    first_cpu = units.index("cpu")
    assert set(units[:first_cpu]) == {"tpu"} and set(units[first_cpu:]) == {"cpu"}
    hard_swish = placement.ops[first_cpu]
    assert hard_swish.op == "HARD_SWISH"
    assert "not supported by the Edge TPU" in hard_swish.rewrite and "RELU6" in hard_swish.rewrite
    later = [op for op in placement.ops[first_cpu + 1:] if op.rule == "after_first_unsupported"]
    assert later and "HARD_SWISH" in later[0].reason
    assert placement.summary_line().startswith("edgetpu:")
    assert "HARD_SWISH is not supported" in placement.summary_line()


def test_require_full_delegation():
    place(models()["cnn_int8"], "edgetpu").require_full_delegation()
    with pytest.raises(DeviceError, match="would fall back to the CPU on edgetpu"):
        place(models()["island_int8"], "edgetpu").require_full_delegation()


@pytest.mark.parametrize("profile", profile_names())
def test_every_device_profile_places_the_int8_cnn(profile):
    placement = place_for_device(models()["cnn_int8"], profile)
    assert placement.device == profile and len(placement.ops) == 5
    assert placement.summary_line().startswith(f"{profile}: ")


def test_device_notes_for_io_types_and_dynamic_batch():
    notes = place_for_device(models()["cnn_int8"], "coral-usb").notes
    assert any(n.startswith("uint8 IO expected by coral-usb") for n in notes)
    dynamic = place_for_device(models()["cnn_float"], "coral-usb")
    assert any(n.startswith("dynamic batch: fix the input shape to 1") for n in dynamic.notes)
    assert any(n.startswith("float model") for n in dynamic.notes)
    assert dynamic.applicable_fixes() == ("quantize_float_ops",)
    int8_dynamic = place(models()["cnn_int8"], "edgetpu")
    assert int8_dynamic.applicable_fixes() == ()


def test_partition_limits_can_be_overridden():
    """CUMSUM splits the island model in two for NNAPI; a limit of 1 keeps the larger half."""
    data = models()["island_int8"]
    assert len(place(data, "nnapi").partitions) == 2
    narrow = place(data, "nnapi", max_partitions=1)
    assert len(narrow.partitions) == 1
    dropped = [op for op in narrow.ops if op.rule == "partition_dropped"]
    assert dropped and all(op.unit == "cpu" for op in dropped)
    assert place(data, "nnapi", min_partition_ops=4).partitions == narrow.partitions


def test_graph_bytes_and_path_give_the_same_placement(tmp_path):
    from edgeopt.tflite_reader import read_tflite

    data = models()["cnn_int8"]
    path = tmp_path / "m.tflite"
    path.write_bytes(data)
    by_bytes, by_path = place(data, "nnapi"), place(path, "nnapi")
    by_graph = place(read_tflite(data), "nnapi")
    assert by_bytes.ops == by_path.ops == by_graph.ops


def test_every_delegate_name_is_accepted():
    for name in delegate_names():
        assert place(models()["cnn_int8"], name).delegate == name
    with pytest.raises(ConfigError, match="unknown delegate"):
        place(models()["cnn_int8"], "npu-of-the-future")


def test_onnx_graph_is_refused_with_a_clear_error(tiny_onnx_path):
    from edgeopt.onnx_reader import read_onnx

    with pytest.raises(ConfigError, match="TFLite graphs"):
        place(read_onnx(tiny_onnx_path), "xnnpack")
