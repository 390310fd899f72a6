"""Read what TFLite's `benchmark_model` prints: timings, memory, and what the delegate took.

    >>> result = parse_benchmark_output(text)
    >>> result.latency().mean, result.init_ms
    (79.732, 38.467)

The tool's output changed over the years and reaches us with or without log prefixes
(`INFO: `, logcat's `I tflite  : `). What this reads:

- stat lines `count=50 first=... curr=... min=... max=... avg=... std=...` (newer builds add
  `p5= median= p95=`), in microseconds: the last one is the steady runs, the one before the
  warmup. `Timings (microseconds): count=...` lines of op profiling are not run timings.
- the summary `Inference timings in us: Init: ..., First inference: ..., Warmup (avg): ...,
  Inference (avg): ...`, or the older `Average inference timings in us: Warmup: ...,
  Init: ..., Inference: ...`;
- memory: `Memory footprint delta from the start of the tool (MB): init=.. overall=..`,
  `Peak memory footprint (MB): init=.. overall=..`, and `Overall peak memory footprint (MB)
  via periodic monitoring: ..`;
- delegation: `Explicitly applied X delegate, and the model graph will be completely / partially
  executed ...`, `Though X delegate is explicitly applied, the model graph will not be
  executed by the delegate`, `Replacing N out of M node(s) with delegate`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from edgeopt.devices.runners.stats import Latency
from edgeopt.errors import EdgeoptError

_STAT = re.compile(r"count=\d+(?:\s+\w+=[-+\d.eE]+)*\s*$")
_SUMMARY = re.compile(r"Inference timings in us: Init: ([-+\d.eE]+), First inference: "
                      r"([-+\d.eE]+), Warmup \(avg\): ([-+\d.eE]+), Inference \(avg\): "
                      r"([-+\d.eE]+)")
_OLD_SUMMARY = re.compile(r"Average inference timings in us: Warmup: ([-+\d.eE]+), "
                          r"Init: ([-+\d.eE]+), Inference: ([-+\d.eE]+)")
_MEMORY = re.compile(r"(?:Memory footprint delta from the start of the tool|Peak memory "
                     r"footprint) \(MB\): init=([\d.eE+-]+) overall=([\d.eE+-]+)")
_PEAK = re.compile(r"Overall peak memory footprint \(MB\) via periodic monitoring: "
                   r"([\d.eE+-]+)")
_DELEGATION = re.compile(r"(Explicitly applied .*|Though .* delegate is explicitly applied.*|"
                         r"Replacing \d+ out of \d+ node\(s\) with delegate.*)$")
_TIMING_LINE = re.compile(r"count=|Inference timings in us|Average inference timings")
_ERROR = re.compile(r"(?:^|\s)(?:ERROR: |E tflite\s*: )(.*)$|(Benchmarking failed\.?)")


class BenchmarkOutputError(EdgeoptError):
    """benchmark_model printed no timings: it failed, or this is not its output."""


@dataclass(frozen=True)
class BenchmarkModelOutput:
    """What one benchmark_model run reported; times in milliseconds, memory in MB."""

    steady_us: dict[str, float] = field(default_factory=dict)
    warmup_us: dict[str, float] = field(default_factory=dict)
    init_ms: float | None = None
    first_ms: float | None = None
    warmup_avg_ms: float | None = None
    inference_avg_ms: float | None = None
    memory_mb: dict[str, float] = field(default_factory=dict)
    delegation: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def runs(self) -> int | None:
        count = self.steady_us.get("count")
        return None if count is None else int(count)

    def latency(self) -> Latency:
        """The steady runs' distribution; None where the tool printed no figure
        (benchmark_model has no p90/p99; edgeopt's remote_bench.py prints them)."""
        s = {k: v / 1000.0 for k, v in self.steady_us.items()}
        mean = s.get("avg", self.inference_avg_ms)
        if mean is None:
            raise BenchmarkOutputError("benchmark_model reported no inference timings")
        return Latency(mean=mean, median=s.get("median"), p90=s.get("p90"), p99=s.get("p99"),
                       min=s.get("min"), max=s.get("max"), std=s.get("std"))


def _number(text: str) -> float | None:
    """A finite, non-negative figure, or None for what no working tool prints (`e`, `-`,
    `nan`, `1e999`, negative times): garbage from a broken device is not a measurement."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _stat_fields(text: str) -> dict[str, float]:
    fields = {k: _number(v) for k, v in (item.split("=", 1) for item in text.split())}
    return {k: v for k, v in fields.items() if v is not None}


def _stat_line(line: str) -> dict[str, float] | None:
    match = _STAT.search(line)
    if not match or re.search(r"Timings|Memory \(bytes\)", line[:match.start()]):
        return None
    return _stat_fields(match.group(0))


def _us_to_ms(value: str) -> float | None:
    number = _number(value)
    return None if number is None else number / 1000.0


def _summary(text: str) -> dict[str, float]:
    if match := _SUMMARY.search(text):
        init, first, warmup, inference = map(_us_to_ms, match.groups())
        found = {"init_ms": init, "first_ms": first, "warmup_avg_ms": warmup,
                 "inference_avg_ms": inference}
    elif match := _OLD_SUMMARY.search(text):
        warmup, init, inference = map(_us_to_ms, match.groups())
        found = {"init_ms": init, "warmup_avg_ms": warmup, "inference_avg_ms": inference}
    else:
        return {}
    return {k: v for k, v in found.items() if v is not None}


def _memory(text: str) -> dict[str, float]:
    found = {}
    if match := _MEMORY.search(text):
        found["init"], found["overall"] = _number(match.group(1)), _number(match.group(2))
    if match := _PEAK.search(text):
        found["peak"] = _number(match.group(1))
    return {k: v for k, v in found.items() if v is not None}


def _phases(lines: list[str]) -> tuple[dict[str, float], dict[str, float]]:
    """(warmup, steady) stat lines: by the `Running benchmark for` headers when printed
    (so a run cut short never passes its warmup off as steady runs), else by position."""
    phase, by_phase, stats = 0, {}, []
    for line in lines:
        if "Running benchmark for" in line:
            phase += 1
        elif (stat := _stat_line(line)) is not None:
            by_phase[phase] = stat
            stats.append(stat)
    if phase:
        return by_phase.get(1, {}), by_phase.get(2, {})
    return (stats[-2] if len(stats) > 1 else {}), (stats[-1] if stats else {})


def parse_benchmark_output(text: str, require_timings: bool = True) -> BenchmarkModelOutput:
    """Parse benchmark_model's stdout+stderr; raise when it holds no timings at all."""
    lines = text.replace("\r", "").splitlines()
    warmup, steady = _phases(lines)
    delegation = tuple(m.group(1).strip() for m in map(_DELEGATION.search, lines) if m)
    errors = tuple((m.group(1) or m.group(2)).strip() for m in map(_ERROR.search, lines) if m)
    result = BenchmarkModelOutput(
        steady_us=steady, warmup_us=warmup,
        memory_mb=_memory(text), delegation=delegation, errors=errors, **_summary(text))
    if require_timings and "avg" not in steady and result.inference_avg_ms is None:
        why = f": {errors[0]}" if errors else garbled_note(text)
        raise BenchmarkOutputError(f"benchmark_model printed no inference timings{why}")
    return result


def garbled_note(text: str) -> str:
    """` (why)` when output without timings was not text or held impossible figures."""
    lines = text.splitlines()
    if any("\ufffd" in line or "\0" in line for line in lines):
        return " (its output is not text: garbage from the device or the tool)"
    if any(_TIMING_LINE.search(line) for line in lines):
        return " (the timing lines it printed hold no usable figures)"
    return ""
