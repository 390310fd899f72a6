"""No code from a model (issue 14 item 2): graphs with file-system, process, network or
Python-callback ops are refused before anything runs, by an allowlist of op kinds.

A SavedModel whose serving function read /etc/hostname and wrote a file did both during
`edgeopt convert` (the parity run executes the graph).
"""

from __future__ import annotations

import functools
import io
import json
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLES, assert_user_error
from edgeopt.errors import ModelLoadError
from edgeopt.model import load_model
from edgeopt.op_allowlist import HERE, allowlist, excluded_family
from edgeopt.saved_model_ops import check_saved_model_ops, read_saved_model, serving_ops


def _tf():
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import tensorflow as tf

    return tf


def _save(folder: Path, body, signature=None) -> Path:
    """A SavedModel whose serving function is `body(x)` for a [None, 4] float input."""
    tf = _tf()
    module = tf.Module()
    spec = signature or [tf.TensorSpec([None, 4], tf.float32, name="x")]
    module.serve = tf.function(body, input_signature=spec)
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
    return folder


def _read_write(out: Path):
    tf = _tf()

    def body(x):
        tf.io.write_file(str(out), tf.io.read_file("/etc/hostname"))
        return {"y": x * 2.0}
    return body


def test_convert_and_build_refuse_a_saved_model_that_reads_and_writes_files(tmp_path, run_cli):
    stolen = tmp_path / "stolen.txt"
    model = _save(tmp_path / "evil", _read_write(stolen))
    np.savez(tmp_path / "calib.npz", x=np.ones((40, 4), np.float32))
    convert = run_cli("convert", model, "-o", tmp_path / "m.tflite")
    assert_user_error(convert, "refusing op ReadFile")
    assert "read or write files" in convert.stderr
    build = run_cli("build", model, "--calib", tmp_path / "calib.npz", "-o", tmp_path / "dist")
    assert_user_error(build, "ReadFile")
    assert not stolen.exists() and not (tmp_path / "m.tflite").exists()


def _refused_bodies(tmp_path: Path) -> dict:
    tf = _tf()

    def branch_reads(x):  # the op sits in a cond branch: a function reached via If
        data = tf.cond(tf.reduce_sum(x) > 0, lambda: tf.io.read_file("/etc/hostname"),
                       lambda: tf.constant(""))
        return {"y": x + tf.cast(tf.strings.length(data), tf.float32)}

    def loop_lists(x):  # MatchingFiles (tf.io.gfile.glob's op) inside a While body
        def body(i, n):
            return i + 1, n + tf.size(tf.io.matching_files("/etc/*"))
        _, n = tf.while_loop(lambda i, n: i < 2, body, [0, 0])
        return {"y": x + tf.cast(n, tf.float32)}

    return {
        "WriteFile": lambda x: (tf.io.write_file(str(tmp_path / "w"), "x"), {"y": x})[1],
        "If": branch_reads, "While": loop_lists,
        "SaveV2": lambda x: (tf.raw_ops.SaveV2(prefix=str(tmp_path / "ckpt"),
                                               tensor_names=["x"], shape_and_slices=[""],
                                               tensors=[x]), {"y": x})[1],
        "RestoreV2": lambda x: {"y": x + tf.raw_ops.RestoreV2(
            prefix=str(tmp_path / "ckpt"), tensor_names=["x"], shape_and_slices=[""],
            dtypes=[tf.float32])[0]},
        "PrintV2": lambda x: (tf.print(x, output_stream=f"file://{tmp_path / 'p'}"),
                              {"y": x})[1],
        "PyFunc": lambda x: {"y": tf.numpy_function(lambda a: a * 2, [x], tf.float32)},
        "EagerPyFunc": lambda x: {"y": tf.py_function(lambda a: a * 2, [x], tf.float32)},
        "TextLineDataset": lambda x: {"y": x + tf.cast(
            tf.data.TextLineDataset("/etc/hostname").cardinality(), tf.float32)},
    }


_EXPECTED = {"WriteFile": "WriteFile", "If": "ReadFile", "While": "MatchingFiles",
             "SaveV2": "SaveV2", "RestoreV2": "RestoreV2", "PrintV2": "PrintV2",
             "PyFunc": "PyFunc", "EagerPyFunc": "EagerPyFunc",
             "TextLineDataset": "TextLineDataset"}


def test_file_process_and_callback_ops_are_refused_wherever_they_sit(tmp_path):
    for case, body in _refused_bodies(tmp_path).items():
        model = _save(tmp_path / case, body)
        with pytest.raises(ModelLoadError, match="refusing op") as caught:
            load_model(model)
        assert re.search(rf"\b{_EXPECTED[case]}", str(caught.value)), (case, caught.value)
    assert not [p for p in tmp_path.iterdir() if p.name in ("w", "ckpt.index", "p")]


def test_saver_functions_are_not_the_serving_signature(tmp_path):
    """Every SavedModel holds SaveV2/RestoreV2 in its saver functions; no serving output
    reaches them, so they do not refuse a model edgeopt never asks to save."""
    tf = _tf()
    module = tf.Module()
    module.w = tf.Variable(tf.ones([4]))
    module.serve = tf.function(lambda x: {"y": x * module.w},
                               input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "m"), signatures={"serving_default": module.serve})
    library = read_saved_model(tmp_path / "m").meta_graphs[0].graph_def.library.function
    assert "SaveV2" in {n.op for f in library for n in f.node_def}
    ops = serving_ops(tmp_path / "m")
    assert "SaveV2" not in ops and {"Mul", "ReadVariableOp"} <= set(ops)
    assert load_model(tmp_path / "m").inputs[0].shape == (-1, 4)


def test_keras_applications_saved_model_passes(tmp_path):
    _tf()
    import keras

    model = keras.applications.MobileNetV2(weights=None, input_shape=(96, 96, 3))
    model.export(str(tmp_path / "mobilenet"), verbose=False)
    check_saved_model_ops(tmp_path / "mobilenet")
    assert {"Conv2D", "DepthwiseConv2dNative", "Relu6"} <= set(serving_ops(tmp_path / "mobilenet"))


def test_sample_models_pass():
    for name in ("digits_cnn.onnx", "digits_cnn.keras"):
        assert load_model(SAMPLES / name).outputs


# --- the data files ---------------------------------------------------------------------

def _table(kind: str) -> dict:
    return tomllib.loads((HERE / f"ops_{kind}.toml").read_text())


@pytest.mark.parametrize("kind", ["tensorflow", "onnx", "tflite"])
def test_no_allowed_op_belongs_to_an_excluded_family(kind):
    allowed, excluded = allowlist(kind)
    extra = set(_table(kind).get("extra_allowed", []))
    assert excluded and all(entry["reason"] for entry in excluded.values())
    assert [op for op in allowed - extra if excluded_family(op, excluded)] == []


@functools.cache
def _registry(kind: str) -> dict:
    """The registry as a fresh interpreter that imports only the library sees it: in this
    process other tests' imports (tf.lite, tf_keras, ...) have registered more ops."""
    code = ("import json, sys; from edgeopt.op_allowlist_make import REGISTRIES; "
            f"json.dump(REGISTRIES[{kind!r}](), sys.stdout)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["tensorflow", "onnx", "tflite"])
def test_allowlists_match_the_installed_registries(kind):
    """The files are what op_allowlist_make.py derives from the libraries installed: every
    allowed name is a registered op, and regenerating changes nothing."""
    from edgeopt.op_allowlist_make import allowed_ops

    table = _table(kind)
    assert allowed_ops(_registry(kind), table) == table["allowed"]
    assert set(table["allowed"]) - set(table.get("extra_allowed", [])) <= set(_registry(kind))


def test_tensorflow_file_ops_are_registered_and_excluded():
    registry = _registry("tensorflow")
    allowed, _ = allowlist("tensorflow")
    for op in ("ReadFile", "WriteFile", "MatchingFiles", "Save", "SaveV2", "RestoreV2",
               "MergeV2Checkpoints", "PrintV2", "PyFunc", "EagerPyFunc", "DumpTensor",
               "TFRecordDataset", "ImmutableConst", "DebugIdentityV2"):
        assert op in registry and op not in allowed, op
    assert {"Conv2D", "While", "StatefulPartitionedCall", "VarHandleOp"} <= allowed


# --- ONNX -------------------------------------------------------------------------------

def _onnx(path: Path, nodes, functions=(), opsets=(("", 17),)) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, functions=list(functions),
                              opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _chain(depth: int, leaf_domain: str, leaf_op: str):
    """Local functions f0..f{depth-1}, each calling the next twice; the last calls leaf."""
    from onnx import helper

    functions = []
    for i in range(depth):
        callee = (f"f{i + 1}", "local") if i + 1 < depth else (leaf_op, leaf_domain)
        body = [helper.make_node(callee[0], ["a"], ["b"], domain=callee[1]),
                helper.make_node(callee[0], ["b"], ["c"], domain=callee[1])]
        functions.append(helper.make_function(
            "local", f"f{i}", ["a"], ["c"], body,
            [helper.make_opsetid(d, v) for d, v in {"": 17, "local": 1, leaf_domain:
                                                     17 if leaf_domain == "" else 1}.items()]))
    return functions


def test_onnx_custom_domains_and_vendor_binaries_are_refused(tmp_path):
    from onnx import helper

    cases = {
        "custom": ([helper.make_node("Steal", ["x"], ["y"], domain="evil.ops")],
                   [("", 17), ("evil.ops", 1)], "evil.ops:Steal"),
        "epcontext": ([helper.make_node("EPContext", ["x"], ["y"], domain="com.microsoft",
                                        ep_cache_context="/tmp/blob.bin", embed_mode=0)],
                      [("", 17), ("com.microsoft", 1)], "com.microsoft:EPContext"),
    }
    for name, (nodes, opsets, op) in cases.items():
        with pytest.raises(ModelLoadError, match=re.escape(f"refusing op {op}")):
            load_model(_onnx(tmp_path / f"{name}.onnx", nodes, opsets=opsets))


def test_onnx_ops_inside_local_functions_and_subgraphs_are_checked(tmp_path):
    from onnx import TensorProto, helper

    deep = _chain(40, "evil.ops", "Steal")  # 2**40 calls if expanded naively
    call = [helper.make_node("f0", ["x"], ["y"], domain="local")]
    with pytest.raises(ModelLoadError, match="evil.ops:Steal.*function local:f39"):
        load_model(_onnx(tmp_path / "deep.onnx", call, deep,
                         [("", 17), ("local", 1), ("evil.ops", 1)]))
    clean = _chain(3, "", "Relu")  # deeper chains hang shape inference (issue 14 item 9)
    assert load_model(_onnx(tmp_path / "clean.onnx", call, clean, [("", 17), ("local", 1)]))
    branch = helper.make_graph([helper.make_node("Steal", ["x"], ["z"], domain="evil.ops")],
                               "then", [], [helper.make_tensor_value_info(
                                   "z", TensorProto.FLOAT, [1, 4])])
    nodes = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
                 "c", TensorProto.BOOL, [], [True])),
             helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)]
    with pytest.raises(ModelLoadError, match="evil.ops:Steal.*subgraph then"):
        load_model(_onnx(tmp_path / "if.onnx", nodes, opsets=[("", 17), ("evil.ops", 1)]))


# --- TFLite -----------------------------------------------------------------------------

def test_tflite_custom_ops_are_refused_unless_known_pure(tmp_path):
    from test_delegates_models import models, with_custom_op

    from edgeopt.tflite_ops import check_tflite_ops
    from edgeopt.tflite_reader import read_tflite

    flex = tmp_path / "flex.tflite"
    flex.write_bytes(with_custom_op(models()["cnn_float"], "MEAN", "FlexReadFile"))
    with pytest.raises(ModelLoadError, match="refusing op CUSTOM:FlexReadFile.*Flex ops run"):
        load_model(flex)
    pure = with_custom_op(models()["cnn_float"], "MEAN", "TFLite_Detection_PostProcess")
    check_tflite_ops(read_tflite(pure), "detector")  # the one custom kernel LiteRT ships
    assert load_model_ok(models()["while_float"], tmp_path / "while.tflite")


def load_model_ok(content: bytes, path: Path) -> bool:
    path.write_bytes(content)
    return bool(load_model(path).inputs)


# --- Keras ------------------------------------------------------------------------------

def _keras_with(tmp_path: Path, name: str, edit) -> Path:
    """The sample .keras archive with its config.json changed by `edit(config)`."""
    with zipfile.ZipFile(SAMPLES / "digits_cnn.keras") as source:
        members = {info.filename: source.read(info) for info in source.infolist()}
    config = json.loads(members["config.json"])
    edit(config["config"]["layers"][-1])
    members["config.json"] = json.dumps(config).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as target:
        for member, content in members.items():
            target.writestr(member, content)
    (tmp_path / name).write_bytes(buffer.getvalue())
    return tmp_path / name


@pytest.mark.parametrize("edit, message", [
    (lambda layer: layer.update(module="my_package.layers"), "custom object"),
    (lambda layer: layer.update(registered_name="my_package>Softmax"), "registered as"),
    (lambda layer: layer.update(class_name="TFSMLayer"), "TFSMLayer layer, which runs code"),
    (lambda layer: layer.update(class_name="TFOpLambda"), "holds Python code"),
])
def test_keras_layers_must_be_builtins_that_run_no_outside_code(tmp_path, edit, message):
    model = _keras_with(tmp_path, "m.keras", edit)
    with pytest.raises(ModelLoadError, match=message):
        load_model(model)
