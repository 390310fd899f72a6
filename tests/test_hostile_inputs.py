"""Hostile inputs from issue 14, items 7-11: each ends in one `edgeopt: error:` line and exit
status 2 (130 for Ctrl-C) in bounded time and memory. Inputs that used to hang run in a
subprocess with a timeout, so the old behaviour fails the test instead of stalling it."""

from __future__ import annotations

import io
import os
import signal
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLES, assert_user_error, run_edgeopt

HANG_TIMEOUT_S = 240  # far above what the refusals take, far below "forever"


def _onnx_model(nodes, inputs, outputs, functions=(), initializers=(), opsets=None):
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, functions=list(functions),
                              opset_imports=opsets or [helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _save(model, path: Path) -> Path:
    import onnx

    onnx.save(model, str(path))
    return path


# --- 7: shapes bounded before use ------------------------------------------------------

@pytest.mark.parametrize("batch", ["99999999999", "9" * 40])
def test_huge_input_shape_is_refused_before_conversion(run_cli, tiny_onnx_path, tmp_path, batch):
    result = run_cli("build", tiny_onnx_path, "--calib", "random", "-o", tmp_path / "b",
                     "--input-shape", f"input:{batch},3,16,16")
    assert_user_error(result, "over the 2 GiB a tensor may take")
    assert not (tmp_path / "b").exists()


def test_huge_input_shape_refused_by_compress(run_cli, tiny_onnx_path, tmp_path):
    result = run_cli("compress", tiny_onnx_path, "--prune", "0.5", "--data", "random",
                     "--input-shape", "input:99999999999,3,16,16", "-o", tmp_path / "c.onnx")
    assert_user_error(result, "over the 2 GiB")


def test_huge_declared_keras_shape_is_refused(run_cli, tmp_path):
    from edgeopt.tf_env import quiet_tensorflow

    quiet_tensorflow()
    import keras

    inputs = keras.Input((100000, 100000, 3), name="image")
    x = keras.layers.GlobalAveragePooling2D()(inputs)
    path = tmp_path / "huge.keras"
    keras.Model(inputs, keras.layers.Dense(2)(x)).save(path)
    assert_user_error(run_cli("bench", path), "over the 2 GiB")
    assert_user_error(run_cli("compress", path, "--prune", "0.5", "--data", "random", "-o",
                              tmp_path / "c.keras"), "over the 2 GiB")


# --- 8: special files ------------------------------------------------------------------

@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_device_node_as_model(device):
    result = run_edgeopt("inspect", device, timeout=HANG_TIMEOUT_S)
    assert_user_error(result, "is not a regular file (a character device)")


def test_device_node_as_config():
    result = run_edgeopt("--config", "/dev/zero", "devices", timeout=HANG_TIMEOUT_S)
    assert_user_error(result, "config file /dev/zero is not a regular file")


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe.onnx"
    os.mkfifo(path)
    return path


def test_fifo_as_model(fifo):
    assert_user_error(run_edgeopt("inspect", fifo, timeout=HANG_TIMEOUT_S), "(a FIFO)")


def test_fifo_as_labels(fifo, tiny_onnx_path, tmp_path):
    result = run_edgeopt("convert", tiny_onnx_path, "--labels", fifo, "-o", tmp_path / "x.tflite",
                         timeout=HANG_TIMEOUT_S)
    assert_user_error(result, "label file")
    assert not (tmp_path / "x.tflite").exists()


def test_sparse_onnx_is_not_read(run_cli, tmp_path):
    path = tmp_path / "sparse.onnx"
    with path.open("wb") as f:
        f.truncate(1536 << 20)
    assert_user_error(run_cli("inspect", path), "sparse file")


def test_file_of_zeros_is_no_onnx(run_cli, tmp_path):
    path = tmp_path / "zeros.onnx"
    path.write_bytes(bytes(4096))
    assert_user_error(run_cli("inspect", path), "does not start as an ONNX protobuf does")


def test_size_caps_come_before_reading(tmp_path):
    from edgeopt.errors import ConfigError
    from edgeopt.inputs import read_text

    path = tmp_path / "big.toml"
    path.write_bytes(b"#" * 2048)
    with pytest.raises(ConfigError, match="over the"):
        read_text(path, "config file", ConfigError, cap=1024)


# --- 9: hangs --------------------------------------------------------------------------

def _doubling_functions(depth: int):
    """`depth` local functions, each calling the next twice: 2^depth nodes inlined."""
    from onnx import TensorProto, helper

    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    functions = []
    for i in range(depth):
        if i == depth - 1:
            nodes = [helper.make_node("Relu", ["x"], ["y"])]
        else:
            nodes = [helper.make_node(f"f{i + 1}", ["x"], ["t"], domain="local"),
                     helper.make_node(f"f{i + 1}", ["t"], ["y"], domain="local")]
        functions.append(helper.make_function("local", f"f{i}", ["x"], ["y"], nodes, opsets))
    io_ = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in "xy"]
    return _onnx_model([helper.make_node("f0", ["x"], ["y"], domain="local")], io_[:1],
                       io_[1:], functions, opsets=opsets)


def test_exponential_function_inlining_is_refused(tmp_path):
    path = _save(_doubling_functions(40), tmp_path / "funcs.onnx")
    for command in (["inspect", path], ["estimate", path]):
        result = run_edgeopt(*command, timeout=HANG_TIMEOUT_S)
        assert_user_error(result, "nodes once its calls are inlined")


def test_small_function_models_still_load(tmp_path):
    from edgeopt.model import load_model

    handle = load_model(_save(_doubling_functions(4), tmp_path / "funcs.onnx"))
    assert handle.inputs[0].shape == (1, 4)


def _endless_loop():
    """A Loop with no trip count whose condition the input computes (always true)."""
    from onnx import TensorProto, helper

    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["v"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1, 4])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Constant", [], ["low"], value_float=-1.0),
             helper.make_node("Greater", ["s", "low"], ["c"]),
             helper.make_node("Loop", ["", "c", "x"], ["y"], body=body)]
    return _onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])


def test_bench_keeps_the_run_deadline(tmp_path):
    path = _save(_endless_loop(), tmp_path / "loop.onnx")
    env = {**os.environ, "EDGEOPT_RUN_DEADLINE_S": "2"}
    result = run_edgeopt("bench", path, "--runs", "3", timeout=HANG_TIMEOUT_S, env=env)
    assert_user_error(result, "does not finish")


def _zero_bomb(path: Path, samples: int) -> Path:
    """A deflated .npz of `samples` 1x32x32 float32 zeros, written in chunks."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("image.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<f4", "fortran_order": False, "shape": (samples, 1, 32, 32)})
            block = bytes(1 << 20)
            left = samples * 4096
            while left > 0:
                f.write(block[:min(left, len(block))])
                left -= len(block)
    return path


def test_npz_of_inflating_zeros_is_refused(run_cli, tmp_path):
    bomb = _zero_bomb(tmp_path / "bomb.npz", 150_000)  # 614 MB inflated from ~600 KB
    assert bomb.stat().st_size < 2 << 20
    result = run_cli("build", SAMPLES / "digits_cnn.onnx", "--calib", bomb, "-o", tmp_path / "b")
    assert_user_error(result, "refusing a zip bomb")


def test_sample_count_is_capped_from_the_header(tmp_path):
    from edgeopt.data import load_dataset
    from edgeopt.data_limits import MAX_SAMPLES
    from edgeopt.errors import DataError
    from edgeopt.model import TensorSpec

    path = tmp_path / "many.npy"
    np.save(path, np.zeros((MAX_SAMPLES + 1, 2), np.float32))
    with pytest.raises(DataError, match=f"holds {MAX_SAMPLES + 1:,} samples"):
        load_dataset(str(path), (TensorSpec("x", (-1, 2), "float32"),))


# --- 10: internal errors become one line -----------------------------------------------

def _external_data_model(folder: Path, edit) -> Path:
    """tiny_onnx's layout with its weights in `w.bin`, the entries then edited."""
    import onnx

    from conftest import tiny_onnx

    source = tiny_onnx(folder / "src.onnx")
    model = onnx.load(str(source))
    onnx.save_model(model, str(folder / "m.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    model = onnx.load(str(folder / "m.onnx"), load_external_data=False)
    for tensor in model.graph.initializer:
        entries = {e.key: e for e in tensor.external_data}
        edit(entries)
    onnx.save_model(model, str(folder / "m.onnx"))
    return folder / "m.onnx"


def _set_entry(entries, key: str, value: str) -> None:
    entries[key].value = value


@pytest.mark.parametrize("command", ["quantize", "compress", "inspect"])
def test_external_data_past_the_file(run_cli, tiny_nhwc_data, tmp_path, command):
    path = _external_data_model(tmp_path, lambda e: _set_entry(e, "offset", "1000000"))
    args = {"quantize": ["--calib", tiny_nhwc_data, "-o", tmp_path / "q.onnx"],
            "compress": ["--prune", "0.5", "--data", "random", "-o", tmp_path / "c.onnx"],
            "inspect": []}[command]
    assert_user_error(run_cli(command, path, *args), "which holds")


def test_external_data_location_with_nul(run_cli, tmp_path):
    path = _external_data_model(tmp_path, lambda e: _set_entry(e, "location", "w\0.bin"))
    assert_user_error(run_cli("inspect", path), "NUL byte")


def _png_header_only(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I",
                                                                     zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b""))
            + chunk(b"IEND", b""))


def test_png_declaring_huge_size(run_cli, tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "big.png").write_bytes(_png_header_only(100_000, 100_000))
    result = run_cli("build", SAMPLES / "digits_cnn.onnx", "--calib", folder, "-o",
                     tmp_path / "b")
    assert_user_error(result, "pixels")


@pytest.mark.parametrize("text", ["a = " + "[" * 50_000 + "]" * 50_000,
                                  "a = " + "[" * 40 + "]" * 40])
def test_deeply_nested_toml(run_cli, tmp_path, text):
    path = tmp_path / "deep.toml"
    path.write_text(text)
    assert_user_error(run_cli("--config", path, "devices"), "nests arrays or tables")


def test_records_not_utf8(run_cli, tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_bytes(b'{"kind": "\xff\xfe"}\n')
    assert_user_error(run_cli("devices", "calibrate", "host-cpu", "--records", path,
                              "-o", tmp_path / "p.toml"), "not UTF-8")


def test_records_nested_deeply(run_cli, tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    assert_user_error(run_cli("devices", "calibrate", "host-cpu", "--records", path,
                              "-o", tmp_path / "p.toml"), "nested too deeply")


def test_interrupt_wrapped_by_a_library_is_reported(run_cli, tiny_onnx_path, monkeypatch):
    """pybind11 turns a KeyboardInterrupt during a module's import into `ImportError:
    initialization failed` raised from it; the CLI must still say "interrupted"."""
    import edgeopt.inspect as inspect_module

    def interrupted_import(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError("initialization failed") from exc

    monkeypatch.setattr(inspect_module, "load_model", interrupted_import)
    result = run_cli("inspect", tiny_onnx_path)
    assert result.exit_code == 130
    assert result.stderr.strip().splitlines()[-1] == "edgeopt: error: interrupted"


# Real-time signals on a shared 2-core machine: slow-marked, as one of three runs under
# heavy load once ended otherwise (being looked into); the in-process test above is not.
@pytest.mark.parametrize("delay", [pytest.param(0.0, marks=pytest.mark.slow),
                                   pytest.param(0.8, marks=pytest.mark.slow),
                                   pytest.param(1.6, marks=pytest.mark.slow)])
def test_sigint_during_build(tmp_path, delay):
    """A real SIGINT after the first progress line, wherever the build then is (importing
    TensorFlow, in Keras' export, in a __del__): "interrupted", exit 130, no bundle."""
    out = tmp_path / "bundle"
    process = subprocess.Popen(
        [sys.executable, "-m", "edgeopt.cli", "build", str(SAMPLES / "digits_cnn.keras"),
         "--calib", str(SAMPLES / "digits_calib.npz"), "-o", str(out)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        first = process.stderr.readline()
        assert first.startswith("• "), first
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        rest = process.stderr.read()
        code = process.wait(timeout=HANG_TIMEOUT_S)
    finally:
        process.kill()
    assert code == 130, rest
    assert rest.strip().splitlines()[-1] == "edgeopt: error: interrupted", rest
    assert "Traceback" not in rest
    assert not (out / "manifest.json").exists()


# --- 11: wrong answers ---------------------------------------------------------------

def _tflite_edited(source: Path, edit) -> bytes:
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(source.read_bytes(), 0)
    edit(model)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _huge_input(model) -> None:
    tensor = model.subgraphs[0].tensors[model.subgraphs[0].inputs[0]]
    tensor.shape = np.array([1, 100000, 100000, 3], np.int32)


def _buffer_past_the_end(model) -> None:
    for buffer in model.buffers:
        if buffer.data is not None and len(buffer.data):
            buffer.data, buffer.offset, buffer.size = None, 1 << 30, 4096
            return
    raise AssertionError("no constant buffer")


@pytest.mark.parametrize("edit", [_huge_input, _buffer_past_the_end])
def test_estimate_refuses_what_inspect_refuses(run_cli, tiny_float_tflite, tmp_path, edit):
    path = tmp_path / "bad.tflite"
    path.write_bytes(_tflite_edited(tiny_float_tflite, edit))
    inspected = run_cli("inspect", path)
    assert_user_error(inspected)
    estimated = run_cli("estimate", path, "--device", "host-cpu")
    assert_user_error(estimated)


@pytest.mark.parametrize("value", ["-1", "0", "abc", "nan", "inf"])
def test_bad_run_deadline_is_one_error(run_cli, monkeypatch, tiny_onnx_path, value):
    monkeypatch.setenv("EDGEOPT_RUN_DEADLINE_S", value)
    assert_user_error(run_cli("inspect", tiny_onnx_path), "EDGEOPT_RUN_DEADLINE_S")


def test_good_run_deadline_is_kept(monkeypatch):
    from edgeopt.deadline import run_deadline

    monkeypatch.setenv("EDGEOPT_RUN_DEADLINE_S", "2.5")
    assert run_deadline() == 2.5


def test_progress_lines_escape_newlines_in_names():
    from edgeopt.terminal import StepProgress

    stream = io.StringIO()
    with StepProgress(stream) as progress:
        progress("writing dist\n• wrote /etc/passwd\rok")
    lines = stream.getvalue().splitlines()
    assert lines == ["• writing dist\\n• wrote /etc/passwd\\rok"]


def test_error_lines_escape_control_characters(run_cli, tmp_path):
    name = tmp_path / "m\x1b[2J\r.onnx"
    result = run_cli("inspect", name)
    assert_user_error(result, "not found")
    assert "\x1b" not in result.stderr and "\r" not in result.stderr
    assert "\\x1b[2J\\r" in result.stderr
