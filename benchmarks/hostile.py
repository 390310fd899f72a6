"""Hostile-input campaign: run the real `edgeopt` commands on inputs built to hurt, and count
what went wrong per class of input.

Every case runs `edgeopt` in a subprocess, in a fresh temporary folder that also holds canary
files (a user's `thesis.docx`, a source model whose sha256 is recorded, a web app folder with
a `manifest.json`), under a wall-clock limit and an address-space limit. A case is
- handled: exit 0 when the input is fine, or exactly one `edgeopt: error:` line and exit 2
  (130 for Ctrl-C), no traceback;
- mishandled: anything else (exit 1 internal error, a signal, the time or memory limit, a
  traceback, a multi-line error, success on an input that must be refused);
- files lost: a canary file deleted or changed, an input rewritten, a device node or FIFO
  replaced, a file written outside the case folder through a symlink;
- code executed: a marker file that the hostile input would create if its code ran (a
  delegate library's constructor, a `ProxyCommand`, a graph's WriteFile op) exists.

This script is independent of tests/fuzz_mutators.py: its inputs are written here.

    python benchmarks/hostile.py                 # every class (~5 min on 2 busy cores)
    python benchmarks/hostile.py --only fifo,toml
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from _common import REPO, edgeopt_command, print_table, subprocess_env, write_results

SAMPLES = REPO / "samples"
ONNX = SAMPLES / "digits_cnn.onnx"
CALIB = SAMPLES / "digits_calib.npz"
TIME_LIMIT_S = 120
MEMORY_LIMIT = 6 << 30


@dataclass
class Case:
    """One input: `make(folder)` writes it and returns the edgeopt arguments."""

    cls: str
    name: str
    make: Callable[[Path], list[str]]
    expect_ok: bool | None = False   # a sound input edgeopt must accept; None: either
    env: dict = field(default_factory=dict)
    marker: str | None = None        # file whose existence proves the input's code ran
    interrupt_after_first_line: bool = False
    during: Callable[[Path, threading.Event], None] | None = None  # races the command


@dataclass
class Outcome:
    cls: str
    name: str
    verdict: str
    detail: str
    lost: list[str]
    code_ran: bool
    seconds: float


# --- canaries -------------------------------------------------------------------------

def _plant_canaries(folder: Path) -> dict[str, str]:
    specials = {p.name: stat.S_IFMT(p.lstat().st_mode) for p in folder.iterdir()
                if not p.is_symlink() and not stat.S_ISREG(p.lstat().st_mode)
                and not p.is_dir()}
    (folder / "thesis.docx").write_bytes(b"years of work")
    webapp = folder / "webapp"
    (webapp / "notes").mkdir(parents=True)
    (webapp / "manifest.json").write_text('{"name": "my web app"}')
    (webapp / "notes" / "todo.txt").write_text("ship it")
    shutil.copy(ONNX, folder / "source.onnx")
    return {**_hashes(folder), **{f"special:{k}": v for k, v in specials.items()}}


def _hashes(folder: Path) -> dict[str, str]:
    found = {}
    for path in [folder / "thesis.docx", folder / "source.onnx",
                 folder / "webapp" / "manifest.json", folder / "webapp" / "notes" / "todo.txt",
                 *folder.glob("input*")]:
        if path.is_file() and not path.is_symlink():
            found[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _lost(folder: Path, before: dict[str, str], outside: Path) -> list[str]:
    after = _hashes(folder)
    for name in before:
        if name.startswith("special:"):
            path = folder / name.partition(":")[2]
            after[name] = stat.S_IFMT(path.lstat().st_mode) if path.exists() else None
    lost = [name for name, digest in before.items() if after.get(name) != digest]
    if outside.exists() and any(outside.iterdir()):
        lost.append(f"wrote outside the case folder: {sorted(p.name for p in outside.iterdir())}")
    return lost


# --- running --------------------------------------------------------------------------

def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    os.setsid()


def _classify(code: int | None, err: str, expect_ok: bool, timed_out: bool) -> tuple[str, str]:
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("•")]
    if timed_out:
        return "mishandled", f"over {TIME_LIMIT_S} s"
    if code is not None and code < 0:
        return "mishandled", f"killed by {signal.Signals(-code).name}"
    if "Traceback" in err:
        tail = " | ".join(ln.strip() for ln in err.splitlines()[-3:])
        return "mishandled", f"traceback on stderr: {tail[:200]}"
    if expect_ok is None and code in (0, 2) and len(lines) <= 1:
        return "handled", lines[0][:140] if lines else "accepted"
    if expect_ok:
        return ("handled", "accepted") if code == 0 else ("mishandled", f"exit {code}: "
                                                                       f"{lines[-1:]}")
    if code == 0:
        return "mishandled", "exit 0 on an input that must be refused"
    if code in (2, 130) and len(lines) == 1 and lines[0].startswith("edgeopt: error: "):
        return "handled", lines[0][:140]
    return "mishandled", f"exit {code}: {' | '.join(lines)[:140]}"


def run_case(case: Case) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="edgeopt-hostile-") as tmp:
        root = Path(tmp)
        folder, outside = root / "case", root / "outside"
        folder.mkdir()
        outside.mkdir()
        args = case.make(folder)
        if case.marker:  # building the input may run it (tracing a tf.function): not edgeopt
            (root / case.marker).unlink(missing_ok=True)
        before = _plant_canaries(folder)
        env = {**subprocess_env(), "TMPDIR": str(folder), **case.env}
        start = time.monotonic()
        process = subprocess.Popen([*edgeopt_command(), *args], cwd=folder, env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, errors="replace",
                                   preexec_fn=_limits)
        first, done = "", threading.Event()
        if case.during:
            threading.Thread(target=case.during, args=(folder, done), daemon=True).start()
        if case.interrupt_after_first_line:
            first = process.stderr.readline()
            time.sleep(0.8)
            process.send_signal(signal.SIGINT)
        timed_out = False
        try:
            _, err = process.communicate(timeout=TIME_LIMIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            _, err = process.communicate()
            timed_out = True
        done.set()
        seconds = time.monotonic() - start
        verdict, detail = _classify(process.returncode, first + err, case.expect_ok, timed_out)
        code_ran = bool(case.marker) and (root / case.marker).exists()
        lost = _lost(folder, before, outside)
        if code_ran or lost:  # a clean error line does not make up for either
            verdict = "mishandled"
        return Outcome(case.cls, case.name, verdict, detail, lost, code_ran, round(seconds, 1))


# --- inputs ---------------------------------------------------------------------------

def _onnx_bytes(nodes, inputs, outputs, functions=(), opsets=None) -> bytes:
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, functions=list(functions),
                              opset_imports=opsets or [helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _doubling_functions(depth: int) -> bytes:
    from onnx import TensorProto, helper

    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    functions = []
    for i in range(depth):
        nodes = ([helper.make_node("Relu", ["x"], ["y"])] if i == depth - 1 else
                 [helper.make_node(f"f{i + 1}", ["x"], ["t"], domain="local"),
                  helper.make_node(f"f{i + 1}", ["t"], ["y"], domain="local")])
        functions.append(helper.make_function("local", f"f{i}", ["x"], ["y"], nodes, opsets))
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in "xy"]
    return _onnx_bytes([helper.make_node("f0", ["x"], ["y"], domain="local")], vi[:1], vi[1:],
                       functions, opsets)


def _endless_loop() -> bytes:
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["co"]), helper.make_node("Identity", ["v"], ["vo"])],
        "body", [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []),
                 vi("v", TensorProto.FLOAT, [1, 4])],
        [vi("co", TensorProto.BOOL, []), vi("vo", TensorProto.FLOAT, [1, 4])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Constant", [], ["low"], value_float=-1.0),
             helper.make_node("Greater", ["s", "low"], ["c"]),
             helper.make_node("Loop", ["", "c", "x"], ["y"], body=body)]
    return _onnx_bytes(nodes, [vi("x", TensorProto.FLOAT, [1, 4])],
                       [vi("y", TensorProto.FLOAT, [1, 4])])


def _external_data(folder: Path, offset: str | None = None, location: str | None = None) -> Path:
    import onnx

    model = onnx.load(str(ONNX))
    path = folder / "input.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="w.bin", size_threshold=0)
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "offset" and offset is not None:
                entry.value = offset
            if entry.key == "location" and location is not None:
                entry.value = location
    onnx.save_model(model, str(path))
    return path


def _zero_npz(path: Path, samples: int) -> Path:
    import numpy as np

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("image.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<f4", "fortran_order": False, "shape": (samples, 32, 32, 1)})
            block, left = bytes(1 << 20), samples * 4096
            while left > 0:
                f.write(block[:min(left, len(block))])
                left -= len(block)
    return path


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height,
                                                               8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))


def _write(folder: Path, name: str, data: bytes | str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def _fifo(folder: Path, name: str) -> Path:
    path = folder / name
    os.mkfifo(path)
    return path


def _null_device(folder: Path) -> Path:
    path = folder / "null.dev"
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # needs root, else "not run"
    return path


def _sparse(folder: Path, name: str, size: int) -> Path:
    path = folder / name
    with path.open("wb") as f:
        f.truncate(size)
    return path


def _delegate_library(folder: Path) -> Path:
    """A shared library whose constructor writes delegate_ran next to the case folder."""
    source = folder / "d.c"
    source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void run(void)'
                      ' { FILE *f = fopen("../delegate_ran", "w"); if (f) fclose(f); }\n')
    library = folder / "libdelegate.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def _savedmodel_writer(folder: Path) -> Path:
    """A SavedModel whose serving function writes ../graph_ran with tf.io.write_file."""
    code = ("import sys, tensorflow as tf\n"
            "class M(tf.Module):\n"
            "  @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])\n"
            "  def serve(self, x):\n"
            f"    tf.io.write_file({str(folder.parent / 'graph_ran')!r}, 'pwned')\n"
            "    return {'y': x * 2.0}\n"
            "m = M()\n"
            "tf.saved_model.save(m, sys.argv[1], signatures={'serving_default': m.serve})\n")
    out = folder / "input_sm"
    subprocess.run([sys.executable, "-c", code, str(out)], check=True, env=subprocess_env(),
                   capture_output=True)
    return out


_TFLITE: list[Path] = []


def _sample_tflite() -> Path:
    """The sample's float .tflite, converted once per campaign."""
    if not _TFLITE:
        folder = Path(tempfile.mkdtemp(prefix="edgeopt-hostile-seed-"))
        subprocess.run([*edgeopt_command(), "convert", str(ONNX), "-o",
                        str(folder / "digits.tflite")], check=True, capture_output=True,
                       env=subprocess_env())
        _TFLITE.append(folder / "digits.tflite")
    return _TFLITE[0]


def _swap_symlink(folder: Path, done: threading.Event) -> None:
    """TOCTOU: between edgeopt's check of -o and its rename, make -o a symlink out."""
    target = folder / "race.tflite"
    while not done.is_set():
        try:
            target.unlink(missing_ok=True)
            target.symlink_to(folder.parent / "outside" / "raced.tflite")
            time.sleep(0.002)
            target.unlink(missing_ok=True)
            target.write_bytes(b"placeholder")
        except OSError:
            pass
        time.sleep(0.002)


def _symlinked_output(folder: Path) -> list[str]:
    (folder / "out.tflite").symlink_to(folder.parent / "outside" / "stolen.tflite")
    return ["convert", str(ONNX), "-o", "out.tflite"]


def _cases() -> list[Case]:
    o = str(ONNX)
    c = str(CALIB)
    build = ["build", o, "--calib", c]
    return [
        # -- data loss and outputs (h3, h5 fix these) --
        Case("outputs", "-o folder with a foreign manifest.json", lambda f: [*build, "-o",
                                                                             "webapp"]),
        # a private null device in the case folder: the machine's own /dev/null stays out
        Case("outputs", "-o a character device", lambda f: ["convert", o, "-o",
                                                            str(_null_device(f))]),
        Case("outputs", "-o a FIFO", lambda f: ["convert", o, "-o", str(_fifo(f, "out.pipe"))]),
        # refusing it, or replacing the link itself, are both sound; writing through is not
        Case("outputs", "-o a symlink out of the folder", _symlinked_output, expect_ok=None),
        Case("outputs", "-o swapped for a symlink during the run (TOCTOU)", lambda f: [
            "convert", o, "-o", "race.tflite"], during=_swap_symlink, expect_ok=None),
        Case("outputs", "-o 300-character name", lambda f: ["convert", o, "-o", "x" * 300]),
        Case("source", "estimate of an opset-1-style source keeps its sha256",
             lambda f: ["estimate", "source.onnx", "--device", "host-cpu"], expect_ok=True),
        # -- code execution (h2, h5) --
        Case("code", "./edgeopt.toml names a delegate library", lambda f: (
            _write(f, "edgeopt.toml", f'[bench]\ndelegate = "{_delegate_library(f)}"\n'),
            ["bench", str(_sample_tflite()), "--runs", "2"])[-1], marker="delegate_ran"),
        Case("code", "./edgeopt.toml ssh ProxyCommand", lambda f: (
            _write(f, "edgeopt.toml", '[bench]\nssh = ["user@board"]\nssh-option = '
                   f'["ProxyCommand=touch {f.parent / "proxy_ran"}"]\n'),
            ["bench", str(_sample_tflite()), "--runs", "2"])[-1], marker="proxy_ran"),
        Case("code", "SavedModel that calls tf.io.write_file", lambda f: [
            "convert", str(_savedmodel_writer(f)), "-o", "x.tflite"], marker="graph_ran"),
        # -- 7: shapes --
        Case("shapes", "--input-shape 11 nines", lambda f: [*build, "-o", "b", "--input-shape",
                                                            "image:99999999999,1,32,32"]),
        Case("shapes", "--input-shape 40 nines", lambda f: [*build, "-o", "b", "--input-shape",
                                                            f"image:{'9' * 40},1,32,32"]),
        Case("shapes", "--input-shape 2^31 batch", lambda f: [*build, "-o", "b", "--input-shape",
                                                              "image:2147483648,1,32,32"]),
        # -- 8: special files --
        Case("special", "inspect /dev/zero", lambda f: ["inspect", "/dev/zero"]),
        Case("special", "inspect /dev/urandom", lambda f: ["inspect", "/dev/urandom"]),
        Case("special", "--config /dev/zero", lambda f: ["--config", "/dev/zero", "devices"]),
        Case("special", "FIFO as the model", lambda f: ["inspect", str(_fifo(f, "m.onnx"))]),
        Case("special", "FIFO as --labels", lambda f: ["convert", o, "--labels",
                                                       str(_fifo(f, "l.txt")), "-o", "x.tflite"]),
        Case("special", "FIFO as --calib", lambda f: ["quantize", o, "--calib",
                                                      str(_fifo(f, "c.npz")), "-o", "q.onnx"]),
        Case("special", "sparse 1.5 GiB .onnx", lambda f: ["inspect",
                                                           str(_sparse(f, "s.onnx", 1536 << 20))]),
        Case("special", "folder as --labels", lambda f: ["convert", o, "--labels", ".", "-o",
                                                         "x.tflite"]),
        # -- 9: hangs --
        Case("hangs", "40 doubling ONNX functions: inspect", lambda f: [
            "inspect", str(_write(f, "input.onnx", _doubling_functions(40)))]),
        Case("hangs", "40 doubling ONNX functions: estimate", lambda f: [
            "estimate", str(_write(f, "input.onnx", _doubling_functions(40)))]),
        Case("hangs", "endless Loop under bench", lambda f: [
            "bench", str(_write(f, "input.onnx", _endless_loop())), "--runs", "2"],
            env={"EDGEOPT_RUN_DEADLINE_S": "3"}),
        Case("hangs", "deflated .npz of 600 MB zeros", lambda f: [
            "build", o, "--calib", str(_zero_npz(f / "bomb.npz", 150_000)), "-o", "b"]),
        Case("hangs", ".npz inside a .npz", lambda f: (
            _zero_npz(f / "inner.npz", 20_000),
            zipfile.ZipFile(f / "outer.npz", "w").write(f / "inner.npz", "image.npy"),
            ["quantize", o, "--calib", "outer.npz", "-o", "q.onnx"])[-1]),
        # -- 10: internal errors --
        Case("internal", "external data location with NUL", lambda f: [
            "inspect", str(_external_data(f, location="w\0.bin"))]),
        Case("internal", "external data offset past the file (quantize)", lambda f: [
            "quantize", str(_external_data(f, offset="100000000")), "--calib", c, "-o",
            "q.onnx"]),
        Case("internal", "external data offset past the file (compress)", lambda f: [
            "compress", str(_external_data(f, offset="100000000")), "--prune", "0.5",
            "--data", c, "-o", "c.onnx"]),
        Case("internal", "PNG declaring 100000x100000", lambda f: (
            _write(f, "imgs/big.png", _png(100_000, 100_000)),
            [*build[:3], "imgs", "-o", "b"])[-1]),
        Case("internal", "TOML nested 50,000 deep", lambda f: [
            "--config", str(_write(f, "deep.toml", "a = " + "[" * 50_000 + "]" * 50_000)),
            "devices"]),
        Case("internal", "records not UTF-8", lambda f: [
            "devices", "calibrate", "host-cpu", "--records",
            str(_write(f, "r.jsonl", b'{"k": "\xff"}\n')), "-o", "p.toml"]),
        Case("internal", "SIGINT during a build", lambda f: [
            "build", str(SAMPLES / "digits_cnn.keras"), "--calib", c, "-o", "b"],
            interrupt_after_first_line=True),
        # -- 11: wrong answers --
        Case("answers", "EDGEOPT_RUN_DEADLINE_S=-1", lambda f: ["inspect", o],
             env={"EDGEOPT_RUN_DEADLINE_S": "-1"}),
        Case("answers", "EDGEOPT_RUN_DEADLINE_S=0", lambda f: ["inspect", o],
             env={"EDGEOPT_RUN_DEADLINE_S": "0"}),
        Case("answers", "EDGEOPT_RUN_DEADLINE_S=abc", lambda f: ["inspect", o],
             env={"EDGEOPT_RUN_DEADLINE_S": "abc"}),
        Case("answers", "newline + escape in a missing model name", lambda f: [
            "inspect", "m\n• wrote \x1b[2Jx.onnx"]),
        # -- names: Unicode confusables and controls --
        Case("names", "model name with bidi override", lambda f: (
            shutil.copy(ONNX, f / "input\u202excod.onnx"),
            ["inspect", "input\u202excod.onnx"])[-1], expect_ok=True),
        Case("names", "Cyrillic look-alike -o", lambda f: [
            "convert", o, "-o", "m\u043edel.tflite"], expect_ok=True),
        # -- sound inputs must still work --
        Case("sound", "inspect the sample", lambda f: ["inspect", o], expect_ok=True),
        Case("sound", "convert the sample", lambda f: ["convert", o, "-o", "x.tflite"],
             expect_ok=True),
    ]


def tally(outcomes: list[Outcome]) -> list[dict]:
    rows: dict[str, dict] = {}
    for out in outcomes:
        row = rows.setdefault(out.cls, {"class": out.cls, "tried": 0, "mishandled": 0,
                                        "files_lost": 0, "code_executed": 0})
        row["tried"] += 1
        row["mishandled"] += out.verdict != "handled"
        row["files_lost"] += bool(out.lost)
        row["code_executed"] += out.code_ran
    return list(rows.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma list of classes to run")
    args = parser.parse_args()
    wanted = {c for c in args.only.split(",") if c}
    outcomes = []
    for case in _cases():
        if wanted and case.cls not in wanted:
            continue
        try:
            outcome = run_case(case)
        except Exception as exc:  # an input this script could not build (no cc, no TF)
            outcome = Outcome(case.cls, case.name, "not run", f"{type(exc).__name__}: {exc}",
                              [], False, 0.0)
        outcomes.append(outcome)
        mark = "ok " if outcome.verdict == "handled" else "BAD"
        print(f"{mark} [{case.cls}] {case.name}: {outcome.detail} ({outcome.seconds} s)"
              + (f" LOST {outcome.lost}" if outcome.lost else "")
              + (" CODE RAN" if outcome.code_ran else ""), flush=True)
    rows = tally(outcomes)
    print()
    print_table(["class", "tried", "mishandled", "files lost", "code executed"],
                [[r["class"], r["tried"], r["mishandled"], r["files_lost"], r["code_executed"]]
                 for r in rows])
    write_results("hostile", {"classes": rows, "cases": [o.__dict__ for o in outcomes],
                              "time_limit_s": TIME_LIMIT_S, "memory_limit_bytes": MEMORY_LIMIT})


if __name__ == "__main__":
    main()
