"""Fuzzing the loaders: mutated `.tflite`, `.onnx`, `.keras` and `.npz` files through
`inspect`, `estimate`, `build` and `quantize` end in success or one `edgeopt: error:` line.

Commands run in a supervised worker process (tests/fuzz_harness.py): a native crash, a hang
past the timeout or resident memory past MEMORY_LIMIT_MB is a failure the test reports
with the mutation and the Python frame, and it does not take pytest down with it.
The short run here is deterministic (fixed seeds); `benchmarks/fuzz.py` runs the long one.
"""

from __future__ import annotations

import io
import random
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from fuzz_harness import Supervisor, classify, fuzz, make_seeds
from fuzz_mutators import (
    FORMAT_MUTATORS,
    _edit_onnx_loop,
    _tflite_object,
    _tflite_pack,
    flatbuffer_sites,
)

# A build of a seed model peaks at 0.7-0.8 GiB resident in a fresh process, and near 0.9 GiB
# in the worker after every command has run (TensorFlow, onnx2tf, onnxruntime loaded). A
# model may declare or grow tensors of up to 2 GiB each (edgeopt.graph.MAX_TENSOR_BYTES),
# and a mutated shape can make several of them at once: the ceiling leaves room for that.
MEMORY_LIMIT_MB = 8192

# Inputs per (format, command) in the default run: a few hundred in all, well under a minute.
SHORT_RUN = {
    ("tflite", "inspect"): 60, ("tflite", "estimate"): 40, ("tflite", "build"): 10,
    ("tflite", "quantize"): 10,
    ("onnx", "inspect"): 60, ("onnx", "estimate"): 6, ("onnx", "build"): 6,
    ("onnx", "quantize"): 20,
    ("keras", "inspect"): 10, ("keras", "estimate"): 5, ("keras", "build"): 5,
    ("keras", "quantize"): 5,
    ("npz", "build"): 20, ("npz", "quantize"): 20,
}


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, Path]:
    return make_seeds(tmp_path_factory.mktemp("fuzz-seeds"))


# onnxruntime runs stop after this many seconds (edgeopt.runtime.ort_run): an endless Loop
# must end in an error well before the command's timeout.
RUN_DEADLINE_S = "5"


@pytest.fixture(scope="module")
def supervisor():
    with Supervisor(memory_limit_mb=MEMORY_LIMIT_MB,
                    env={"EDGEOPT_RUN_DEADLINE_S": RUN_DEADLINE_S}) as sup:
        yield sup


def _report(failures) -> str:
    return "\n".join(f"{t.fmt} {t.command} #{t.index} {t.mutation}: {t.outcome.kind} "
                     f"{t.outcome.signature}\n  {' '.join(t.outcome.args)}\n  "
                     f"{t.outcome.error_line or t.outcome.detail[-400:]}" for t in failures)


@pytest.mark.parametrize(("fmt", "command"), list(SHORT_RUN))
def test_fuzzed_inputs_end_in_success_or_one_error_line(fmt, command, seeds, supervisor,
                                                        tmp_path):
    tried = fuzz(supervisor, seeds, fmt, command, SHORT_RUN[(fmt, command)], seed=0,
                 work=tmp_path)
    failures = [t for t in tried if not t.outcome.fine]
    assert not failures, _report(failures)
    # The mutants must reach the loaders' checks, not only bounce off the first one.
    assert any(t.outcome.kind == "user_error" for t in tried)


def test_seeds_themselves_succeed(seeds, supervisor, tmp_path):
    for fmt in ("tflite", "onnx", "keras"):
        outcome = supervisor.run(["inspect", str(seeds[fmt]), "--json"], timeout=120)
        assert outcome.kind == "ok", outcome.detail
    outcome = supervisor.run(["quantize", str(seeds["tflite"]), "--calib", str(seeds["npz"]),
                              "-o", str(tmp_path / "q.tflite")], timeout=240)
    assert outcome.kind == "ok", outcome.detail


def test_every_mutator_applies_to_its_seed(seeds):
    for fmt, mutators in FORMAT_MUTATORS.items():
        original = seeds[fmt].read_bytes()
        for name, mutator in mutators.items():
            mutants = [mutator(original, random.Random(f"{name}/{i}")) for i in range(3)]
            assert all(isinstance(data, bytes) for data in mutants), (fmt, name)
            assert any(data != original for data in mutants), (fmt, name)


def test_flatbuffer_walker_finds_structure(seeds):
    kinds = {site.kind for site in flatbuffer_sites(seeds["tflite"].read_bytes())}
    assert {"uoffset", "soffset", "vtable_entry", "vector_length", "element"} <= kinds


def test_classify_follows_the_error_contract():
    assert classify(2, "• loading\nedgeopt: error: bad file\n") == ("user_error",
                                                                  "edgeopt: error: bad file")
    assert classify(2, "edgeopt: error: bad\nnoise from a library\n")[0] == "bad_stderr"
    assert classify(2, "Traceback (most recent call last):\nedgeopt: error: x\n")[0] == \
        "bad_stderr"
    assert classify(1, "edgeopt: error: internal error: KeyError: 3 (rerun...)")[0] == \
        "internal_error"
    assert classify(0, "")[0] == "ok"


# --------------------------------------------------------------------------
# Regressions: one input per failure the fuzzer found, each fixed in the loaders
# --------------------------------------------------------------------------


def _tflite(seed: bytes, edit) -> bytes:
    model = _tflite_object(seed)
    edit(model)
    return _tflite_pack(model)


def _op(model, name: str):
    from ai_edge_litert import schema_py_generated as schema

    code = getattr(schema.BuiltinOperator, name)
    for op in model.subgraphs[0].operators:
        if model.operatorCodes[op.opcodeIndex].builtinCode == code:
            return op
    raise AssertionError(name)


def _swap_last_op(model, name: str, inputs: list[int], options=None) -> None:
    """Turn the model's last op into `name` (a new operator code) with `inputs`."""
    from ai_edge_litert import schema_py_generated as schema

    code = schema.OperatorCodeT()
    code.builtinCode = getattr(schema.BuiltinOperator, name)
    code.deprecatedBuiltinCode = min(code.builtinCode, 127)
    code.version = 1
    model.operatorCodes.append(code)
    op = model.subgraphs[0].operators[-1]
    op.opcodeIndex, op.inputs = len(model.operatorCodes) - 1, inputs
    op.builtinOptionsType, op.builtinOptions = options or (0, None)


def _split_options(num_splits: int):
    from ai_edge_litert import schema_py_generated as schema

    options = schema.SplitOptionsT()
    options.numSplits = num_splits
    return schema.BuiltinOptions.SplitOptions, options


def _set(obj, **values):
    for key, value in values.items():
        setattr(obj, key, value)


def _tensor(model, index: int):
    return model.subgraphs[0].tensors[index]


TFLITE_REGRESSIONS = {
    # LiteRT crashed (SIGSEGV) in allocate_tensors on each of these
    "negative tensor index": (lambda m: _set(_op(m, "FULLY_CONNECTED"),
                                             inputs=[-2, *_op(m, "FULLY_CONNECTED").inputs[1:]]),
                              "out of range"),
    "omitted required input": (lambda m: _set(_op(m, "FULLY_CONNECTED"), inputs=[
        _op(m, "FULLY_CONNECTED").inputs[0], -1, -1]), "omits its required input 1"),
    "BATCH_MATMUL with one input": (lambda m: _swap_last_op(
        m, "BATCH_MATMUL", [m.subgraphs[0].operators[-1].inputs[0]]), "needs 2"),
    "SPLIT count unlike outputs": (lambda m: _swap_last_op(
        m, "SPLIT", [3, m.subgraphs[0].operators[-1].inputs[0]], _split_options(2)),
        "declares 2 splits"),
    # internal errors (UnicodeDecodeError, ValueError from numpy)
    "tensor name not UTF-8": (lambda m: _set(_tensor(m, 5), name=b"w\xff\xfe"), "UTF-8"),
    # bfloat16 IO: numpy knows the type only once TensorFlow (ml_dtypes) is imported
    "IO dtype numpy may lack": (lambda m: _set(_tensor(m, m.subgraphs[0].outputs[0]),
                                               type=18), None),
    # resident memory past the limit: a shape that declares, or grows into, gigabytes
    "declared huge tensor": (lambda m: _set(_tensor(m, 6), shape=[1 << 20, 16, 16, 8]),
                             "GiB"),
    "propagated huge tensor": (lambda m: _set(_tensor(m, 0), shape=[1, 4500000, 16, 3]),
                               "would take 2.1 GiB"),
    # IndexError in ai-edge-quantizer's writer
    "metadata buffer missing": (lambda m: _set(m.metadata[0], buffer=len(m.buffers) + 6),
                                "points to missing buffer"),
}


@pytest.mark.parametrize("case", list(TFLITE_REGRESSIONS))
def test_tflite_regressions(case, seeds, supervisor, tmp_path):
    edit, fragment = TFLITE_REGRESSIONS[case]
    path = tmp_path / "case.tflite"
    path.write_bytes(_tflite(seeds["tflite"].read_bytes(), edit))
    for args in (["inspect", str(path)], ["build", str(path), "--calib", "random", "-o",
                                          str(tmp_path / "out")]):
        outcome = supervisor.run(args, timeout=120)
        if fragment is None:
            assert outcome.fine, outcome.detail
            continue
        assert outcome.kind == "user_error", outcome.detail
        assert fragment in outcome.error_line


TFLITE_QUANTIZE_REGRESSIONS = {
    # ValueError from LiteRT's set_tensor: the calibration core feeds one sample at a time
    "fixed batch unlike the data": (lambda m: _set(_tensor(m, 0), shape=[46341, 16, 16, 3]),
                                    "Dimension mismatch"),
    # ValueError from LiteRT's get_tensor: the last op reads the input, so the dense
    # layer's output is never computed and has no buffer
    "tensor left without data": (lambda m: _set(m.subgraphs[0].operators[-1], inputs=[0]),
                                 "Tensor data is null"),
    # RuntimeError from LiteRT's invoke: the conv weights' buffer lost its data
    "weights without data": (lambda m: _set(m.buffers[_tensor(m, 5).buffer], data=None),
                             "lacks data"),
    # (An unnamed tensor, once an AttributeError inside ai-edge-quantizer, is now given a
    # name by edgeopt.tflite_prepare: tests/test_tflite_prepare.py quantizes one.)
}


@pytest.mark.parametrize("case", list(TFLITE_QUANTIZE_REGRESSIONS))
def test_tflite_quantize_regressions(case, seeds, supervisor, tmp_path):
    edit, fragment = TFLITE_QUANTIZE_REGRESSIONS[case]
    path = tmp_path / "case.tflite"
    path.write_bytes(_tflite(seeds["tflite"].read_bytes(), edit))
    outcome = supervisor.run(["quantize", str(path), "--calib", str(seeds["npz"]), "-o",
                              str(tmp_path / "q.tflite")], timeout=120)
    assert outcome.kind == "user_error", outcome.detail
    assert fragment in outcome.error_line


def _npz_members(seed: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(seed) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def _npy_with_header(header: str, body: bytes) -> bytes:
    padded = header + " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(padded)) + padded.encode() + body


def _bad_crc(seed: Path) -> bytes:
    data = bytearray(_zip(_npz_members(seed)))
    data[200] ^= 0xFF  # inside image.npy's stored data
    return bytes(data)


def _huge_declared(seed: Path) -> bytes:
    members = _npz_members(seed)
    members["image.npy"] = _npy_with_header(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4000000000,), }", b"\0" * 64)
    return _zip(members)


def _unbalanced_header(seed: Path) -> bytes:
    members = _npz_members(seed)
    members["image.npy"] = _npy_with_header("{'descr': '<f4', 'shape': (16, ", b"\0" * 64)
    return _zip(members)


def _object_array(seed: Path) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, image=np.array([np.zeros((16, 16, 3), np.float32)] * 2 + [None],
                                    dtype=object))
    return buffer.getvalue()


NPZ_REGRESSIONS = {
    "bad CRC": (_bad_crc, "Bad CRC-32"),  # was an internal error (BadZipFile)
    "header declares 16 GB": (_huge_declared, "header declares shape (4000000000,)"),
    "unbalanced header": (_unbalanced_header, "not a readable NumPy file"),  # TokenError
    "object array": (_object_array, "pickle"),
}


@pytest.mark.parametrize("case", list(NPZ_REGRESSIONS))
def test_npz_regressions(case, seeds, supervisor, tmp_path):
    make, fragment = NPZ_REGRESSIONS[case]
    path = tmp_path / "case.npz"
    path.write_bytes(make(seeds["npz"]))
    outcome = supervisor.run(["quantize", str(seeds["tflite"]), "--calib", str(path), "-o",
                              str(tmp_path / "q.tflite")], timeout=120)
    assert outcome.kind == "user_error", outcome.detail
    assert fragment in outcome.error_line


def _onnx(seed: Path, edit) -> bytes:
    import onnx

    model = onnx.load(str(seed))
    edit(model)
    return model.SerializeToString()


def _initializer(model, name: str):
    return next(t for t in model.graph.initializer if t.name == name)


def _conv(model):
    return next(n for n in model.graph.node if n.op_type == "Conv")


def _negative_pads(model) -> None:
    pads = next(a for a in _conv(model).attribute if a.name == "pads")
    pads.ints[:] = [-1, -1, -1, -1]


def _constant_of_shape(model, declared: list[int]) -> None:
    """A 60000 x 60000 float tensor (13.4 GiB) made at run time, declared otherwise."""
    from onnx import TensorProto, helper, numpy_helper

    model.graph.initializer.append(numpy_helper.from_array(np.array([60000, 60000]), "big_s"))
    model.graph.node.append(helper.make_node("ConstantOfShape", ["big_s"], ["big"]))
    model.graph.output.append(helper.make_tensor_value_info("big", TensorProto.FLOAT,
                                                            declared))


def _input_dim(model, axis: int, size: int) -> None:
    model.graph.input[0].type.tensor_type.shape.dim[axis].dim_value = size


ONNX_REGRESSIONS = {
    # KeyError from onnx.numpy_helper in the calibration core
    "undefined element type": (lambda m: _set(_initializer(m, "w"), data_type=99),
                               "which ONNX does not define"),
    # ValueError (cannot reshape) in the calibration core
    "data unlike its dtype": (lambda m: _set(_initializer(m, "fc"), data_type=3),
                              "stores 128 bytes"),
    # TypeError from numpy: an input no array can feed, from a file and made up at random
    "string input": (lambda m: _set(m.graph.input[0].type.tensor_type, elem_type=8),
                     "cannot feed"),
    "string input, random data": (lambda m: _set(m.graph.input[0].type.tensor_type,
                                                 elem_type=8), "cannot feed"),
    # onnxruntime's pre-quantization printed its own traceback before our error line
    "negative pads": (_negative_pads, "onnxruntime"),
    # onnxruntime's InvalidArgument in the calibration stream
    "batch of size 0": (lambda m: _input_dim(m, 0, 0), "dimension of size 0"),
    # hangs: a Loop that never ends, its condition computed from the input (onnxruntime
    # runs it: stopped at the deadline) or constant (onnxslim's folding ran it at conversion)
    "endless loop": (lambda m: _edit_onnx_loop(m, random.Random(1)), "does not finish"),
    "endless loop on constants": (lambda m: _edit_onnx_loop(m, random.Random(0)),
                                  "iterations on constant inputs"),
    # resident memory past the limit in onnxruntime: a huge ConstantOfShape whose declared
    # shape has a negative dimension, or a small one that inference contradicts
    "huge tensor, negative declared dim": (lambda m: _constant_of_shape(m, [60000, -(1 << 62)]),
                                           "a dimension is negative"),
    "huge tensor, declared small": (lambda m: _constant_of_shape(m, [60000, 5]), "13.4 GiB"),
    # 32 random samples of a 128 MiB input: resident memory past the limit
    "random data too large": (lambda m: _input_dim(m, 1, 131072), "--calib random would make"),
}


@pytest.mark.parametrize("case", list(ONNX_REGRESSIONS))
def test_onnx_regressions(case, seeds, supervisor, tmp_path):
    edit, fragment = ONNX_REGRESSIONS[case]
    path = tmp_path / "case.onnx"
    path.write_bytes(_onnx(seeds["onnx"], edit))
    args = ["quantize", str(path), "--calib", str(seeds["npz"]), "-o", str(tmp_path / "q.onnx")]
    if "random" in case:
        args = ["build", str(path), "--format", "onnx", "--calib", "random", "-o",
                str(tmp_path / "bundle")]
    outcome = supervisor.run(args, timeout=120)
    assert outcome.kind == "user_error", outcome.detail
    assert fragment in outcome.error_line
