"""Measure a model on this machine with its real runtime: init, first run, steady runs, memory.

    >>> m = run_host(HostBenchmark(Path("dist/digits_cnn.tflite"), runs=100, threads=2))
    >>> m.latency.median, m.init_ms, m.memory_mb["peak"]

The loop is benchmark_model's: build the interpreter (init), set seeded random inputs once,
time the first invoke, run the warmup, then time every steady invoke on its own (at least
`runs` of them for at least `min_secs`) with the garbage collector paused, so the
distribution (median, p90, p99) is the runtime's. The clock is the wall clock; `cpu` times
the calling thread's CPU time instead, which with one thread (XNNPACK and onnxruntime then
run on the caller) leaves out the time other work on a busy machine preempts the run.
"""

from __future__ import annotations

import gc
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgeopt.devices.runners.delegates import host_delegate
from edgeopt.devices.runners.measurement import DeviceInfo, Measurement, ModelInfo, Power
from edgeopt.devices.runners.memory import RssSampler
from edgeopt.devices.runners.sessions import open_session, random_inputs
from edgeopt.devices.runners.stats import summarize_ms
from edgeopt.model import load_model

HOST_POWER_NOTE = ("no power sensor on the host that edgeopt can read; measure power on the "
                   "device with --adb (battery current and voltage from sysfs)")


@dataclass(frozen=True)
class HostBenchmark:
    model: Path
    runs: int = 50
    min_secs: float = 1.0       # like benchmark_model: at least `runs` and at least this long
    warmup: int = 5
    threads: int | None = None
    delegate: str | None = None
    delegate_options: tuple[tuple[str, str], ...] = ()
    device: str = "host-cpu"
    device_kind: str | None = "cpu"
    seed: int = 0
    clock: str = "wall"         # wall | cpu (the calling thread's CPU time; threads=1 only)


CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}


def _elapsed_ms(action: Callable[[], None], clock=time.perf_counter_ns) -> float:
    start = clock()
    action()
    return (clock() - start) / 1e6


def _steady_runs(invoke: Callable[[], None], runs: int, min_secs: float,
                 on_run: Callable[[int], None] | None, clock=time.perf_counter_ns) -> list[float]:
    """At least `runs` timed invokes and at least `min_secs` of them: a few hundred
    microseconds of runs would let one burst of other work move the median."""
    times: list[float] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    deadline = time.perf_counter() + min_secs
    try:
        while len(times) < runs or time.perf_counter() < deadline:
            times.append(_elapsed_ms(invoke, clock))
            if on_run and len(times) <= runs:
                on_run(len(times))
    finally:
        if gc_was_enabled:
            gc.enable()
    return times


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_host(config: HostBenchmark,
             on_run: Callable[[int], None] | None = None) -> Measurement:
    """Load, time and summarize; `on_run(i)` is called after each steady run (progress)."""
    handle = load_model(config.model)
    delegate = host_delegate(config.delegate, config.delegate_options)
    feed = random_inputs(handle.inputs, config.seed)
    with RssSampler() as rss:
        start = time.perf_counter_ns()
        session = open_session(handle, config.threads, delegate)
        init_ms = (time.perf_counter_ns() - start) / 1e6
        rss.mark("init")
        session.set_inputs(feed)
        first_ms = _elapsed_ms(session.invoke)
        for _ in range(config.warmup):
            session.invoke()
        times = _steady_runs(session.invoke, config.runs, config.min_secs, on_run,
                             CLOCKS[config.clock])
    default = "xnnpack" if handle.format == "tflite" else "cpu"
    device = DeviceInfo(config.device, config.device_kind, config.delegate or default, "host",
                        product={"cpu": _cpu_name(), "platform": platform.platform()})
    return Measurement(
        model=ModelInfo.of(handle.path, handle.format), device=device, tool=session.label,
        runs=len(times), warmup=config.warmup, threads=config.threads,
        latency=summarize_ms(times), init_ms=init_ms, first_ms=first_ms,
        memory_mb=rss.footprint_mb(), power=Power(note=HOST_POWER_NOTE),
        extra={"clock": config.clock})
