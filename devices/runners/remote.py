"""Benchmark a .tflite on a remote device (adb or ssh) and clean up: the flow both share.

    >>> m = run_remote(RemoteBenchmark(Path("model.tflite"), target="R5CT30XXXX"),
    ...                AdbClient("R5CT30XXXX"), transport="adb")
    >>> m.latency.mean, m.power.power_mw, m.power.energy_mj

One probe makes a private work folder and finds the runner (benchmark_model, or python3
for edgeopt's own remote_bench.py), the battery gauge and the ABI; the model (and a local
binary or delegate library) is pushed; a power sampler records the idle baseline, then
runs beside the benchmark; the output is parsed; the work folder and every device process
we started are removed, also when the run failed, hung or the device vanished.
"""

from __future__ import annotations

import posixpath
import secrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgeopt.devices.runners import device_scripts as scripts
from edgeopt.devices.runners.android_numerics import device_numerics
from edgeopt.devices.runners.benchmark_output import (
    BenchmarkOutputError,
    garbled_note,
    parse_benchmark_output,
)
from edgeopt.devices.runners.delegates import benchmark_model_flags
from edgeopt.devices.runners.measurement import DeviceInfo, Measurement, ModelInfo, Power
from edgeopt.devices.runners.power import NO_SENSOR_NOTE, PowerSampler, summarize_power
from edgeopt.devices.runners.staging import Staged, probe, stage
from edgeopt.devices.runners.workspace import (
    BenchmarkRunError,
    DeviceClient,
    ScriptRun,
    Workspace,
    cleanup,
    run_script,
)
from edgeopt.errors import ModelLoadError
from edgeopt.model import ModelHandle, load_model


@dataclass(frozen=True)
class RemoteBenchmark:
    model: Path
    target: str                              # adb serial, or ssh [user@]host
    runs: int = 50
    min_secs: float = 1.0                    # benchmark_model --min_secs
    warmup: int = 1
    threads: int | None = None
    delegate: str | None = None              # a name (delegates.py) or a library path
    delegate_options: tuple[tuple[str, str], ...] = ()
    device: str | None = None                # profile name, for the record
    device_kind: str | None = None
    runner: str = "auto"                     # auto | benchmark_model | python
    benchmark_binary: str | None = None      # a local file to push, or a device path
    timeout_s: float = 600.0
    idle_s: float = 1.0
    measure_power: bool = True
    power_secs: float = 2.0                  # with power: steady runs last at least this
    numerics_samples: int = 0                # 0: no --check-numerics
    numerics_inputs: str | None = None
    extra_args: tuple[str, ...] = ()
    remote_root: str = "/data/local/tmp"


def _benchmark_flags(config: RemoteBenchmark, remote_model: str, delegate: str | None,
                     sampling: bool) -> list[str]:
    # The gauge needs time: while it is sampled, the steady runs last at least power_secs.
    min_secs = max(config.min_secs, config.power_secs if sampling else 0)
    # The tool stops its runs by itself (and still reports) well before we call it hung.
    flags = [f"--graph={remote_model}", f"--num_runs={config.runs}",
             f"--warmup_runs={config.warmup}", f"--min_secs={min_secs:g}",
             "--warmup_min_secs=0", f"--max_secs={0.8 * config.timeout_s:g}"]
    if config.threads:
        flags.append(f"--num_threads={config.threads}")
    return flags + list(benchmark_model_flags(delegate, config.delegate_options)) \
        + list(config.extra_args)


def _failed_run(space: Workspace, output: str, tool: str) -> BenchmarkRunError:
    partial = parse_benchmark_output(output, require_timings=False)
    state = space.client.state()
    if state != "device":
        return BenchmarkRunError(f"{space.client.who()}: lost the connection while {tool} "
                                 f"ran (device state: {state})", partial)
    why = partial.errors[0] if partial.errors else f"it printed no timings{garbled_note(output)}"
    return BenchmarkRunError(f"{space.client.who()}: {tool} failed: {why}", partial)


def _steady_window(run: ScriptRun) -> tuple[float, float]:
    """From the header of the steady runs to their stat line when the tool printed them
    (so power excludes init and warmup), else the process's whole lifetime."""
    headers = [i for i, (_, line) in enumerate(run.lines) if "Running benchmark for" in line]
    if len(headers) >= 2:
        after = run.lines[headers[1] + 1:]
        stat = next((t for t, line in after if "count=" in line), None)
        if stat is not None:
            return run.lines[headers[1]][0], stat
    return run.start, run.end


def _power(config: RemoteBenchmark, space: Workspace, sampler, samples, idle_end: float,
           run: ScriptRun, parsed) -> Power:
    if sampler is None:
        return Power(note=NO_SENSOR_NOTE if config.measure_power
                     else "power measurement was turned off (--no-power)")
    return summarize_power(samples, idle_end, _steady_window(run), parsed.latency().mean,
                           space.supply, space.charging)


def _run_benchmark(space: Workspace, config: RemoteBenchmark, staged: Staged,
                   flags: list[str]):
    """benchmark_model with the power sampler beside it: (output, power, seconds)."""
    sampler = None
    if config.measure_power and space.supply:
        limit = config.idle_s + config.timeout_s + 10  # the device loop ends by itself
        sampler = PowerSampler(space.client, space.supply, limit).start()
    try:
        idle_end = sampler.wait_idle(config.idle_s) if sampler else 0.0
        script = scripts.benchmark_script(staged.command, flags, config.timeout_s + 2)
        run = run_script(space, script, config.timeout_s, staged.tool)
    finally:
        samples = sampler.stop() if sampler else []
        if sampler and sampler.pid:
            space.live_pids.append(sampler.pid)
    try:
        parsed = parse_benchmark_output(run.text)
    except BenchmarkOutputError:
        raise _failed_run(space, run.text, staged.tool) from None
    power = _power(config, space, sampler, samples, idle_end, run, parsed)
    return parsed, power, run.end - run.start


def _tflite(path: Path) -> ModelHandle:
    handle = load_model(path)
    if handle.format != "tflite":
        raise ModelLoadError(f"benchmark_model runs .tflite models; {path} is {handle.format}")
    return handle


def run_remote(config: RemoteBenchmark, client: DeviceClient, transport: str,
               product: dict | None = None,
               progress: Callable[[str], None] = lambda _m: None) -> Measurement:
    """Measure `config.model` on one device reached through `client` (adb or ssh)."""
    handle = _tflite(config.model)
    space = Workspace(client, posixpath.join(config.remote_root,
                                             f"edgeopt-{secrets.token_hex(4)}"))
    began = time.monotonic()
    try:
        facts = probe(space, config)
        space.supply, space.charging = facts.supply, facts.charging
        progress(f"{config.target}: pushing {handle.path.name}")
        staged = stage(space, config, facts, handle)
        sampling = bool(config.measure_power and facts.supply)
        flags = _benchmark_flags(config, staged.model, staged.delegate, sampling)
        progress(f"{config.target}: running {staged.tool} ({config.runs} runs)")
        parsed, power, bench_s = _run_benchmark(space, config, staged, flags)
        checked = None
        if config.numerics_samples:
            progress(f"{config.target}: checking numerics on {config.numerics_samples} inputs")
            checked = device_numerics(space, config, handle, staged)
    finally:
        note = cleanup(space)
    wall = time.monotonic() - began
    extra = {"device_command": shlex.join([*staged.command, *flags]),
             "delegation": list(parsed.delegation),
             "timing_s": {"total": round(wall, 3), "benchmark": round(bench_s, 3),
                          "harness_overhead": round(wall - bench_s, 3)}}
    device = DeviceInfo(config.device or config.target, config.device_kind,
                        config.delegate or "the runner's default (XNNPACK)", transport,
                        serial=config.target, product={**(product or {}), "abi": facts.abi})
    return Measurement(
        model=ModelInfo.of(handle.path, handle.format), device=device, tool=staged.tool,
        runs=parsed.runs or config.runs, warmup=config.warmup, threads=config.threads,
        latency=parsed.latency(), init_ms=parsed.init_ms, first_ms=parsed.first_ms,
        memory_mb=parsed.memory_mb, power=power, numerics=checked,
        notes=(note,) if note else (), extra=extra)
