"""`edgeopt bench --find-divergence` on the host: a delegate that miscomputes one op kind
(tests/fixtures/planted_delegate.c, compiled here and loaded through LiteRT's external
delegate interface) must be named, with its path to the outputs; XNNPACK against the
reference kernels; the exposed-outputs copy of a model; the error figures themselves.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_user_error
from edgeopt.divergence_compare import TensorStats, path_to_outputs
from edgeopt.graph import Quantization
from edgeopt.tflite_expose import expose_op_outputs
from edgeopt.tflite_reader import read_tflite

FIXTURE = Path(__file__).parent / "fixtures" / "planted_delegate.c"
COMPILER = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


@pytest.fixture(scope="session")
def planted_delegate(tmp_path_factory) -> Path:
    """The planted delegate as a shared library (needs a C compiler; .ci/run installs gcc)."""
    if COMPILER is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the planted delegate")
    library = tmp_path_factory.mktemp("delegate") / "libplanted_delegate.so"
    subprocess.run([COMPILER, "-shared", "-fPIC", "-O1", "-o", str(library), str(FIXTURE)],
                   check=True, capture_output=True, timeout=120)
    return library


def _two_branch_model():
    """Conv and a 1x1 conv of the image added, then conv, pool, dense: one float ADD."""
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import keras

    keras.utils.set_random_seed(0)
    image = keras.Input((8, 8, 3), name="image")
    left = keras.layers.Conv2D(4, 3, padding="same")(image)
    right = keras.layers.Conv2D(4, 1)(image)
    x = keras.layers.Add()([left, right])
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(image, keras.layers.Dense(3)(x))


@pytest.fixture(scope="session")
def add_tflite(tmp_path_factory) -> Path:
    import tensorflow as tf

    content = tf.lite.TFLiteConverter.from_keras_model(_two_branch_model()).convert()
    path = tmp_path_factory.mktemp("divergence") / "two_branch.tflite"
    path.write_bytes(content)
    return path


def _op_index(path: Path, kind: str) -> int:
    return next(op.index for op in read_tflite(path).ops if op.op == kind)


def _divergence(bench, model, *args) -> dict:
    result = bench(model, "--find-divergence", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


# --- the planted divergence ---------------------------------------------------------------

@pytest.mark.parametrize("observe", ["outputs", "preserve"])
def test_the_planted_add_is_found(bench, add_tflite, planted_delegate, observe):
    record = _divergence(bench, add_tflite, "--delegate", planted_delegate,
                         "--delegate-option", "op=ADD", "--observe", observe)
    first = record["first_divergence"]
    assert first["op"] == "ADD" and first["index"] == _op_index(add_tflite, "ADD")
    assert first["unit"].startswith("partition")       # the planted delegate ran it
    assert first["input_rel_error"] < 1e-5             # its inputs were still right
    assert first["error"]["max_abs"] == pytest.approx(0.5, abs=1e-3)  # the planted bias
    assert record["largest_increase"]["index"] == first["index"]
    graph = read_tflite(add_tflite)
    path = [step["index"] for step in record["path"]]
    assert path[0] == first["index"]
    assert set(graph.ops[path[-1]].outputs) & set(graph.outputs)
    assert record["outputs"] and record["outputs"][0]["error"]["rel_error"] > 0.01
    assert "external delegate" in record["candidate"] and "BUILTIN_REF" in record["reference"]


def test_the_builtin_kernels_as_reference_find_it_too(bench, add_tflite, planted_delegate):
    record = _divergence(bench, add_tflite, "--delegate", planted_delegate,
                         "--reference", "builtin")
    assert "BUILTIN_WITHOUT_DEFAULT_DELEGATES" in record["reference"]
    assert record["first_divergence"]["index"] == _op_index(add_tflite, "ADD")


def test_a_planted_op_the_model_lacks_leaves_no_divergence(bench, add_tflite,
                                                           planted_delegate):
    record = _divergence(bench, add_tflite, "--delegate", planted_delegate,
                         "--delegate-option", "op=MUL")
    assert record["first_divergence"] is None
    assert record["partitions_as_shipped"] >= 1           # XNNPACK took the float ops


def test_the_terminal_names_the_op_and_its_path(bench, add_tflite, planted_delegate):
    result = bench(add_tflite, "--find-divergence", "--delegate", planted_delegate)
    assert result.exit_code == 0, result.stderr
    lines = dict(line.split(None, 1) for line in result.stdout.splitlines()
                 if line and not line.startswith(" "))
    assert lines["first"].startswith(f"op {_op_index(add_tflite, 'ADD')} ADD")
    assert lines["path"].endswith("(output)") and "ADD" in lines["path"]


# --- XNNPACK against the reference kernels ------------------------------------------------

def test_xnnpack_float_agrees_with_the_reference(bench, add_tflite):
    record = _divergence(bench, add_tflite)
    assert record["first_divergence"] is None
    assert record["ops_observed"] == record["ops"] == len(read_tflite(add_tflite).ops)
    assert "XNNPACK" in record["candidate"]
    assert record["partitions"] == record["partitions_as_shipped"]  # exposing kept them


def test_int8_tensors_report_quantized_steps(bench, tiny_int8_tflite):
    record = _divergence(bench, tiny_int8_tflite, "--threshold", "1e-9")
    quantized = [op for op in record["per_op"] if op["tensor"]["quantization"]]
    assert quantized
    for op in quantized:
        assert op["error"]["max_steps"] is not None
        assert set(op["tensor"]["quantization"]) >= {"scale", "zero_point"}
    departed = record["first_divergence"]
    assert departed is None or departed["error"]["max_steps"] > 1


@pytest.fixture(scope="session")
def tiny_int8_tflite(tmp_path_factory, tiny_keras_path) -> Path:
    import tensorflow as tf

    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import keras

    model = keras.models.load_model(tiny_keras_path)
    rng = np.random.default_rng(0)
    shape = (1, *model.inputs[0].shape[1:])

    def samples():
        for _ in range(8):
            yield [rng.random(shape, dtype=np.float32)]

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = samples
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    path = tmp_path_factory.mktemp("int8") / "tiny_int8.tflite"
    path.write_bytes(converter.convert())
    return path


# --- bad input ----------------------------------------------------------------------------

def test_onnx_is_refused(bench, tiny_onnx_path):
    assert_user_error(bench(tiny_onnx_path, "--find-divergence"), "compares LiteRT runs")


def test_two_models_are_refused(bench, add_tflite):
    assert_user_error(bench(add_tflite, add_tflite, "--find-divergence"), "one model")


def test_the_reference_choice_is_host_only(bench, add_tflite):
    assert_user_error(bench(add_tflite, "--find-divergence", "--reference", "builtin",
                            "--adb", "SERIAL"), "host only")


def test_preserve_is_host_only(bench, add_tflite):
    assert_user_error(bench(add_tflite, "--find-divergence", "--observe", "preserve",
                            "--adb", "SERIAL"), "host only")


# --- the parts ----------------------------------------------------------------------------

def test_exposed_copy_keeps_tensors_and_the_original_outputs(add_tflite):
    from ai_edge_litert.interpreter import Interpreter

    content = add_tflite.read_bytes()
    exposed = expose_op_outputs(content)
    graph = read_tflite(content)
    every = {t for op in graph.ops for t in op.outputs}
    assert exposed.tensors[:len(graph.outputs)] == graph.outputs
    assert set(exposed.tensors) == every
    x = np.random.default_rng(1).random((1, 8, 8, 3), dtype=np.float32)
    runs = []
    for model in (content, exposed.content):
        it = Interpreter(model_content=model)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        runs.append({d["index"]: it.get_tensor(d["index"]) for d in it.get_output_details()})
    assert list(runs[1]) == list(exposed.tensors)
    out = graph.outputs[0]
    np.testing.assert_array_equal(runs[0][out], runs[1][out])


def test_one_quantized_step_is_rounding_not_divergence():
    stats = TensorStats(Quantization(scale=(0.1,), zero_point=(0,)))
    reference = np.array([1, 2, 3, 4], np.int8)
    stats.add(reference, reference + np.array([1, 0, 1, 0], np.int8))
    assert stats.rel_error > 0.1 and stats.max_steps == 1
    assert not stats.departs(0.01)
    stats.add(reference, reference + np.array([3, 0, 0, 0], np.int8))
    assert stats.max_steps == 3 and stats.departs(0.01)


def test_float_error_is_relative_to_the_reference_norm():
    stats = TensorStats(None)
    stats.add(np.array([3.0, 4.0]), np.array([3.0, 4.5]))
    assert stats.rel_error == pytest.approx(0.1)
    assert stats.to_json()["max_steps"] is None
    stats.add(np.array([1.0]), np.array([np.nan]))
    assert stats.departs(1e6)                               # NaN where the reference is not


def test_path_runs_through_consumers_to_an_output(add_tflite):
    graph = read_tflite(add_tflite)
    first_conv = graph.ops[0].index
    path = path_to_outputs(graph, first_conv)
    assert path[0] == first_conv
    assert set(graph.ops[path[-1]].outputs) & set(graph.outputs)
    for a, b in zip(path, path[1:]):
        assert set(graph.ops[a].outputs) & set(graph.ops[b].inputs)


# --- models that broke it -----------------------------------------------------------------

def test_float_inputs_feed_an_int8_input_model(bench, tiny_int8_tflite, tmp_path):
    """Calibration-style float data for an int8-input artifact is quantized with the input's
    scale (load_data refused it: 'takes int8 but the data is float32')."""
    data = tmp_path / "float_inputs.npz"
    np.savez(data, np.random.default_rng(2).random((3, 16, 16, 3), dtype=np.float32))
    record = _divergence(bench, tiny_int8_tflite, "--inputs", data)
    assert record["samples"] == 3 and record["ops_observed"] == record["ops"]


@pytest.fixture(scope="session")
def stateful_tflite(tmp_path_factory) -> Path:
    """A streaming model: a resource variable read, updated and assigned on every run."""
    import tensorflow as tf

    class Stream(tf.Module):
        def __init__(self):
            self.state = tf.Variable(tf.zeros((1, 4)))

        @tf.function(input_signature=[tf.TensorSpec((1, 4), tf.float32)])
        def __call__(self, x):
            new = self.state * 0.5 + x
            self.state.assign(new)
            return tf.nn.relu(new) * 2.0

    module = Stream()
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [module.__call__.get_concrete_function()], module)
    converter.experimental_enable_resource_variables = True
    path = tmp_path_factory.mktemp("stateful") / "stream.tflite"
    path.write_bytes(converter.convert())
    return path


def test_resource_tensors_are_skipped_not_read(bench, stateful_tflite):
    """Reading a VAR_HANDLE's resource tensor crashed LiteRT (a segfault, no message)."""
    graph = read_tflite(stateful_tflite)
    assert any(t.dtype == "resource" for t in graph.tensors)
    for observe in ("outputs", "preserve"):
        record = _divergence(bench, stateful_tflite, "--observe", observe)
        assert record["first_divergence"] is None
        assert record["unobservable"] == []
        assert graph.subgraph_count == 2 and "1 other subgraph" in record["notes"][0]
    exposed = expose_op_outputs(stateful_tflite.read_bytes())
    assert all(graph.tensor(t).dtype != "resource" for t in exposed.tensors)


@pytest.fixture(scope="session")
def gather_tflite(tmp_path_factory) -> Path:
    """GATHER of 4 rows by an int32 input: seeded random indices (0..99) fall outside."""
    import tensorflow as tf

    table = tf.constant(np.arange(8, dtype=np.float32).reshape(4, 2))

    @tf.function(input_signature=[tf.TensorSpec((1, 3), tf.int32)])
    def lookup(indices):
        return tf.gather(table, indices) * 2.0

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [lookup.get_concrete_function()])
    path = tmp_path_factory.mktemp("gather") / "gather.tflite"
    path.write_bytes(converter.convert())
    return path


def test_a_kernel_that_refuses_its_inputs_is_a_user_error(bench, gather_tflite):
    """A kernel's RuntimeError (basic-pitch's int8 DIV by a zero code) was an internal
    error with a traceback hint."""
    assert_user_error(bench(gather_tflite, "--find-divergence"), "failed to run the model")


@pytest.fixture(scope="session")
def offset_tflite(tmp_path_factory) -> Path:
    """The two-branch model with its weights after the flatbuffer (Buffer.offset/size)."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_keras_model(_two_branch_model())
    converter._experimental_use_buffer_offset = True
    path = tmp_path_factory.mktemp("offset") / "offset_buffers.tflite"
    path.write_bytes(converter.convert())
    return path


def test_weights_after_the_flatbuffer_are_inlined_in_the_copy(bench, offset_tflite):
    """magika's and the full-range face detectors' weights live after the flatbuffer: the
    exposed copy refused them (and a plain repack would have dropped them)."""
    from ai_edge_litert import schema_py_generated as schema

    content = offset_tflite.read_bytes()
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(content, 0))
    assert any(b.offset > 1 for b in model.buffers)
    record = _divergence(bench, offset_tflite)
    assert record["first_divergence"] is None and record["ops_observed"] == record["ops"]
