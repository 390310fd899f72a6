"""Power from the battery's fuel gauge: current and voltage in sysfs, sampled during a run.

    >>> sampler = PowerSampler(client, "/sys/class/power_supply/battery").start()
    >>> sampler.wait_idle(1.0)          # the idle baseline, before the model runs
    >>> window = (time.monotonic(), ...)  # run the benchmark
    >>> power = summarize_power(sampler.stop(), idle_end, window, latency_ms=2.1)

`current_now` is in microamperes and `voltage_now` in microvolts (Linux power-supply class
ABI); the sign of the current differs between phones, so its magnitude is used. Power is
the run window's average minus the idle average; energy per inference is that excess power
times the mean inference time. Samples are timestamped on arrival at the host.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass

from edgeopt.devices.runners.device_scripts import sampler_script
from edgeopt.devices.runners.measurement import Power
from edgeopt.devices.runners.processes import kill_group
from edgeopt.devices.runners.workspace import DeviceClient

INTERVAL_S = 0.05
NO_SENSOR_NOTE = ("the device exposes no battery current/voltage in sysfs "
                  "(/sys/class/power_supply/*/current_now, voltage_now)")


@dataclass(frozen=True)
class Sample:
    time: float        # host monotonic seconds
    power_mw: float


def _parse_sample(line: str, now: float) -> Sample | None:
    parts = line.split()
    if len(parts) != 3 or parts[0] != "@s":
        return None
    try:
        current_ua, voltage_uv = abs(float(parts[1])), abs(float(parts[2]))
    except ValueError:
        return None
    return Sample(now, current_ua * voltage_uv / 1e9)


class PowerSampler:
    """A device shell that prints samples; a host thread timestamps them as they arrive."""

    def __init__(self, client: DeviceClient, supply: str, max_seconds: float = 3600.0):
        self.client, self.supply = client, supply
        self.max_samples = int(max_seconds / INTERVAL_S) + 1
        self.samples: list[Sample] = []
        self.pid: int | None = None
        self.proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> PowerSampler:
        script = sampler_script(self.supply, INTERVAL_S, self.max_samples)
        self.proc = self.client.spawn("shell", script)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        if self.proc is None or self.proc.stdout is None:  # start() sets both
            return
        for line in self.proc.stdout:
            words = line.split()
            if len(words) == 2 and words[0] == "@pid" and words[1].isdigit():
                self.pid = int(words[1])
            elif sample := _parse_sample(line, time.monotonic()):
                self.samples.append(sample)

    def wait_idle(self, seconds: float, min_samples: int = 3) -> float:
        """Wait until `seconds` of idle samples (at least `min_samples`) have arrived;
        returns the end of the idle window."""
        deadline = time.monotonic() + max(seconds, 0) + 5.0
        first = None
        while time.monotonic() < deadline and self.proc is not None \
                and self.proc.poll() is None:
            if self.samples and first is None:
                first = self.samples[0].time
            if first is not None and len(self.samples) >= min_samples \
                    and time.monotonic() - first >= seconds:
                break
            time.sleep(INTERVAL_S / 2)
        return time.monotonic()

    def stop(self) -> list[Sample]:
        """Stop the local client (the device loop is killed by pid at cleanup)."""
        if self.proc is not None:
            kill_group(self.proc)
        if self._reader is not None:
            self._reader.join(timeout=2)
        return list(self.samples)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def summarize_power(samples: list[Sample], idle_end: float, run: tuple[float, float],
                    latency_ms: float, supply: str | None, charging: bool = False) -> Power:
    """Average power above idle during `run`, and energy per inference."""
    idle = [s.power_mw for s in samples if s.time < idle_end]
    busy = [s.power_mw for s in samples if run[0] <= s.time <= run[1]]
    detail = {"sensor": supply, "interval_s": INTERVAL_S, "idle_samples": len(idle),
              "run_samples": len(busy), "charging": charging,
              "window_s": round(run[1] - run[0], 3)}
    if len(idle) < 2 or len(busy) < 2:
        return Power(note=f"too few power samples (idle {len(idle)}, run {len(busy)}): the run "
                          f"was shorter than the sensor needs; raise --runs", detail=detail)
    idle_mw, run_mw = _mean(idle), _mean(busy)
    detail.update(idle_mw=round(idle_mw, 3), run_mw=round(run_mw, 3))
    excess = run_mw - idle_mw
    note = "battery is charging: the gauge sees the charger too" if charging else None
    if excess <= 0:
        return Power(power_mw=0.0, energy_mj=0.0, detail=detail,
                     note="no power above idle was measured (below the gauge's resolution)")
    return Power(power_mw=excess, energy_mj=excess * latency_ms / 1000.0, note=note,
                 detail=detail)
