"""Run `edgeopt` commands on fuzz inputs in a supervised worker process.

Starting a fresh interpreter per input would spend seconds per input importing TensorFlow,
so one worker process runs many commands in a row through `edgeopt.cli.cli.main`, each with
file descriptors 1 and 2 sent to capture files, exactly what a user's terminal would get.
The supervisor (this module, in the test or benchmark process) gives every input:

* a timeout: a worker still busy after it is a hang; its Python stack is dumped
  (faulthandler on SIGUSR1) for the failure signature, then it is killed and restarted;
* a memory ceiling on resident memory, polled from /proc every 50 ms: over it, the same
  dump and kill. RLIMIT_AS is not used: TensorFlow reserves about four times the memory it
  touches (a build of the Keras seed: 3.3 GiB of address space, 0.8 GiB resident), so an
  address-space limit is four times looser than it reads, and hitting it turns into a
  MemoryError or a std::bad_alloc abort inside the worker, which then looks like a bug of
  its own instead of a memory finding;
* a crash check: a worker that dies (SIGSEGV, SIGABRT, ...) has its faulthandler dump read
  for the Python frame that called into native code.

    >>> with Supervisor(memory_limit_mb=8192) as sup:                # doctest: +SKIP
    ...     outcome = sup.run(["inspect", "bad.tflite", "--json"], timeout=60)
    >>> outcome.kind                                                 # doctest: +SKIP
    'user_error'

Outcome kinds: ``ok`` (exit 0), ``user_error`` (exit 2, one ``edgeopt: error:`` line, no
traceback) are fine; ``internal_error`` (exit 1), ``bad_stderr`` (exit 2 with more than
that line or a traceback), ``other_exit``, ``crash``, ``hang``, ``memory`` are failures.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

FINE = ("ok", "user_error")
REPO = Path(__file__).resolve().parent.parent
_FRAME = re.compile(r'File "([^"]+)", line (\d+),? in (\S+)')


@dataclass
class Outcome:
    """What one command did with one input."""

    kind: str
    exit_code: int | None
    seconds: float
    peak_rss_mb: float
    error_line: str = ""
    signature: str = ""
    detail: str = ""
    args: list[str] = field(default_factory=list)

    @property
    def fine(self) -> bool:
        return self.kind in FINE

    def to_json(self) -> dict:
        return asdict(self)


def classify(code: int, stderr: str) -> tuple[str, str]:
    """(kind, the error line) of a finished command, by the CLI's error contract."""
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("•")]
    error = next((ln for ln in lines if ln.startswith("edgeopt: error: ")), "")
    if "Traceback (most recent call last)" in stderr:
        return "bad_stderr", error or (lines[-1] if lines else "")
    if code == 0:
        return "ok", ""
    if code == 1 and "internal error" in error:
        return "internal_error", error
    if code == 2:
        if len(lines) == 1 and error:
            return "user_error", error
        return "bad_stderr", " | ".join(lines[:3])[:300]
    return "other_exit", error or " | ".join(lines[-2:])[:300]


def frame_signature(text: str) -> str:
    """`Type at file:function` from a Python traceback or a faulthandler dump.

    Names the innermost frame inside this repository (the edgeopt code that let the
    failure through) and, when the failure happened deeper, the innermost frame of all.
    """
    frames = _FRAME.findall(text)
    if "Traceback (most recent call last)" not in text:
        frames = frames[::-1]  # faulthandler lists the innermost frame first
    frames = [f for f in frames if "fuzz_harness" not in f[0]]
    if not frames:
        return "?"
    repo = [f for f in frames if str(REPO) in f[0]]
    where = _frame_name(repo[-1]) if repo else ""
    if not repo or frames[-1] != repo[-1]:
        where += f" ({_frame_name(frames[-1])})" if where else _frame_name(frames[-1])
    exc_type = _exception_type(text)
    return f"{exc_type} at {where}" if exc_type else where


def _exception_type(text: str) -> str:
    """The type on the line that ends the last traceback in `text` ('' if none)."""
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent")]
    if not starts:
        return ""
    for line in lines[starts[-1] + 1:]:
        if line and not line.startswith(" "):
            return line.split(":", 1)[0].strip()
    return ""


def _frame_name(frame: tuple[str, str, str]) -> str:
    path, _, func = frame
    short = os.path.relpath(path, REPO) if str(REPO) in path else Path(path).name
    return f"{short}:{func}"


# --------------------------------------------------------------------------
# Supervisor (runs in the test or benchmark process)
# --------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    """Resident memory of `pid` and its children, in MiB (0 when it is gone)."""
    total = 0
    for one in [pid, *_children(pid)]:
        try:
            for line in Path(f"/proc/{one}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total / 1024


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    kids = [int(p) for p in text.split()]
    return kids + [g for k in kids for g in _children(k)]


class Supervisor:
    """One worker process at a time; restarted after a crash, hang or memory kill."""

    def __init__(self, memory_limit_mb: float = 8192, env: dict | None = None) -> None:
        self.memory_limit_mb = memory_limit_mb
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.tmp = Path(tempfile.mkdtemp(prefix="edgeopt-fuzz-"))
        self.dump = self.tmp / "faulthandler.txt"
        self.max_rss_mb = 0.0
        self.restarts = 0

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        self.dump.write_text("")
        self.proc = subprocess.Popen(
            [sys.executable, "-u", __file__, "--worker", str(self.dump)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=self.tmp, env=self.env, start_new_session=True)

    def close(self) -> None:
        import shutil

        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill()
        self.proc = None
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def run(self, args: list[str], timeout: float) -> Outcome:
        """Run `edgeopt ARGS` in the worker and classify what happened."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        start = time.monotonic()
        self.proc.stdin.write((json.dumps({"args": args}) + "\n").encode())
        self.proc.stdin.flush()
        line, reason, peak = self._wait(timeout)
        seconds = time.monotonic() - start
        self.max_rss_mb = max(self.max_rss_mb, peak)
        if line is not None:
            report = json.loads(line)
            self.max_rss_mb = max(self.max_rss_mb, report["peak_rss_mb"])
            kind, error = classify(report["code"], report["stderr"])
            signature = ""
            if kind not in FINE:
                signature = frame_signature(report.get("traceback") or report["stderr"])
            detail = (report.get("traceback") or report["stderr"])[-3000:]
            return Outcome(kind, report["code"], seconds, max(peak, report["peak_rss_mb"]),
                           error, signature, detail, args)
        return self._failed(reason, seconds, peak, args)

    def _wait(self, timeout: float) -> tuple[str | None, str, float]:
        """(report line or None, why not, peak RSS seen) while watching time and memory."""
        selector = selectors.DefaultSelector()
        selector.register(self.proc.stdout, selectors.EVENT_READ)
        deadline, peak = time.monotonic() + timeout, 0.0
        try:
            while True:
                if selector.select(timeout=0.05):
                    line = self.proc.stdout.readline()
                    return (line.decode(), "", peak) if line else (None, "crash", peak)
                peak = max(peak, rss_mb(self.proc.pid))
                if peak > self.memory_limit_mb:
                    return None, "memory", peak
                if time.monotonic() > deadline:
                    return None, "hang", peak
        finally:
            selector.close()

    def _failed(self, reason: str, seconds: float, peak: float, args: list[str]) -> Outcome:
        if reason in ("hang", "memory"):
            os.kill(self.proc.pid, signal.SIGUSR1)  # faulthandler dumps the stacks
            time.sleep(0.5)
            self._kill()
            label, detail = reason, f"{reason}: after {seconds:.0f} s, {peak:.0f} MiB resident"
        else:
            self.proc.wait()
            code = self.proc.returncode
            label = signal.Signals(-code).name if code < 0 else f"exit {code}"
            reason, detail = "crash", f"worker died: {label}"
        dump = self.dump.read_text(errors="replace")
        self.proc, self.restarts = None, self.restarts + 1
        signature = f"{label} at {frame_signature(dump)}"
        return Outcome(reason, None, seconds, peak, "", signature,
                       f"{detail}\n{dump[-3000:]}", args)


# --------------------------------------------------------------------------
# Campaign: seeds, the command line for each (format, command), the loop
# --------------------------------------------------------------------------

COMMANDS = {"tflite": ("inspect", "estimate", "build", "quantize"),
            "onnx": ("inspect", "estimate", "build", "quantize"),
            "keras": ("inspect", "estimate", "build", "quantize"),
            "npz": ("build", "quantize")}
DEVICES = ("host-cpu", "pixel-npu", "coral-usb", "ethos-u55-256")
TIMEOUTS = {"inspect": 60.0, "estimate": 120.0, "build": 240.0, "quantize": 240.0}


def make_seeds(folder: Path) -> dict[str, Path]:
    """Valid inputs to mutate: the tiny Keras CNN, its float .tflite, a static-batch ONNX
    classifier and 16 seeded calibration samples (imports TensorFlow)."""
    import numpy as np

    from conftest import tiny_cnn, tiny_onnx
    from edgeopt.converters.float_tflite import to_float_tflite
    from edgeopt.model import load_model

    folder.mkdir(parents=True, exist_ok=True)
    seeds = {fmt: folder / f"seed.{fmt}" for fmt in COMMANDS}
    tiny_cnn().save(seeds["keras"])
    tiny_onnx(seeds["onnx"], dynamic_batch=False)
    with tempfile.TemporaryDirectory() as tmp:
        seeds["tflite"].write_bytes(to_float_tflite(load_model(seeds["keras"]), Path(tmp)).tflite)
    rng = np.random.default_rng(1)
    np.savez(seeds["npz"], image=rng.random((16, 16, 16, 3), dtype=np.float32),
             labels=rng.integers(0, 4, 16))
    return seeds


def command_args(fmt: str, command: str, path: Path, seeds: dict[str, Path], out: Path,
                 index: int) -> list[str]:
    """The `edgeopt` arguments that feed the fuzzed file at `path` to `command`."""
    device = DEVICES[index % len(DEVICES)]
    if fmt == "npz":
        model = seeds["onnx"] if index % 3 == 2 else seeds["tflite"]
        extra = ["--format", "onnx"] if model.suffix == ".onnx" and command == "build" else []
        target = out / ("q.onnx" if model.suffix == ".onnx" else "q.tflite")
        return ([command, str(model), "--calib", str(path), "-o",
                 str(target if command == "quantize" else out / "bundle"), "--json", *extra])
    if command == "inspect":
        return ["inspect", str(path), "--json"]
    if command == "estimate":
        return ["estimate", str(path), "--device", device, "--json"]
    if command == "build":
        calib = "random" if fmt != "keras" else str(seeds["npz"])
        extra = ["--format", "onnx"] if fmt == "onnx" else ["--device", device]
        return ["build", str(path), "--calib", calib, "-o", str(out / "bundle"), "--json",
                *extra]
    suffix = ".onnx" if fmt == "onnx" else ".tflite"
    return ["quantize", str(path), "--calib", str(seeds["npz"]), "-o", str(out / f"q{suffix}"),
            "--json"]


@dataclass
class Tried:
    """One fuzz input through one command."""

    fmt: str
    command: str
    index: int
    mutation: str
    outcome: Outcome


def fuzz(sup: Supervisor, seeds: dict[str, Path], fmt: str, command: str, count: int,
         seed: int, work: Path, keep: Path | None = None) -> list[Tried]:
    """`count` mutants of the `fmt` seed through `command`, deterministic for `seed`.

    A failing input is copied to `keep` (when given) under its format, command and index,
    so that it can be replayed.
    """
    import random
    import shutil

    from fuzz_mutators import SUFFIX, mutate

    original = seeds[fmt].read_bytes()
    tried = []
    for index in range(count):
        mutant = mutate(fmt, original, random.Random(f"{seed}/{fmt}/{command}/{index}"))
        out = work / f"{fmt}-{command}-{index}"
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"fuzzed{SUFFIX[fmt]}"
        path.write_bytes(mutant.data)
        args = command_args(fmt, command, path, seeds, out, index)
        outcome = sup.run(args, TIMEOUTS[command])
        tried.append(Tried(fmt, command, index, mutant.mutation, outcome))
        if keep is not None and not outcome.fine:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, keep / f"{fmt}-{command}-{seed}-{index}{SUFFIX[fmt]}")
        shutil.rmtree(out, ignore_errors=True)
    return tried


# --------------------------------------------------------------------------
# Worker (runs the commands)
# --------------------------------------------------------------------------


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    except OSError:
        pass


def _run_captured(cli, args: list[str], out_fd: int, err_fd: int) -> tuple[int, str]:
    for fd in (out_fd, err_fd):
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    try:
        code = cli.main(args, standalone_mode=False)
    except SystemExit as exc:  # the CLI promises to return, not exit, in this mode
        code = exc.code if isinstance(exc.code, int) else 1
        print(f"escaped SystemExit({exc.code!r})", file=sys.stderr)
    except BaseException as exc:  # noqa: BLE001 - anything escaping the CLI is a finding
        import traceback

        traceback.print_exc()
        code = 1
        del exc
    sys.stdout.flush()
    sys.stderr.flush()
    os.lseek(err_fd, 0, os.SEEK_SET)
    return code, os.read(err_fd, 1 << 20).decode(errors="replace")


def worker(dump_path: str) -> None:
    """Read one JSON job a line from stdin, answer one JSON line on the saved stdout."""
    import faulthandler

    dump = open(dump_path, "w")  # noqa: SIM115 - must stay open for faulthandler
    faulthandler.enable(dump, all_threads=False)
    faulthandler.register(signal.SIGUSR1, dump, all_threads=False)
    reply = os.fdopen(os.dup(1), "w")
    sys.stdin = os.fdopen(os.dup(0), "r")
    out_fd = os.open("stdout.txt", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    err_fd = os.open("stderr.txt", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    from edgeopt.cli import cli

    for line in sys.stdin:
        args = json.loads(line)["args"]
        _reset_peak()
        code, stderr = _run_captured(cli, args, out_fd, err_fd)
        report = {"code": code, "stderr": stderr, "peak_rss_mb": _peak_rss_mb()}
        if code == 1 and "Traceback" not in stderr:  # internal error: where did it come from?
            _, report["traceback"] = _run_captured(cli, ["--debug", *args], out_fd, err_fd)
        reply.write(json.dumps(report) + "\n")
        reply.flush()


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    worker(sys.argv[2])
elif __name__ == "__main__" and sys.argv[1:2] == ["--seeds"]:
    print(json.dumps({k: str(v) for k, v in make_seeds(Path(sys.argv[2])).items()}))
