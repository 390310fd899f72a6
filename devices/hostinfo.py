"""What this machine's CPU is, from /proc/cpuinfo and sysfs (Linux), for calibrate.

    >>> info = host_cpu_info()      # doctest: +SKIP
    >>> info.flops_per_cycle, info.clock_hz, info.cache_bytes  # doctest: +SKIP
    (32, 2595000000.0, 33554432)
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CLOCK_HZ = 3.0e9


@dataclass(frozen=True)
class HostCpu:
    model: str
    cores: int
    clock_hz: float
    flags: frozenset[str]
    cache_bytes: int | None          # last-level cache
    l2_bytes: int | None = None      # one core's L2

    @property
    def flops_per_cycle(self) -> int:
        """fp32 FLOP per cycle per core from the widest FMA the flags advertise."""
        if "avx512f" in self.flags:
            return 64
        if "fma" in self.flags or "asimd" in self.flags:
            return 32 if "fma" in self.flags else 16
        return 16 if "avx" in self.flags else 8

    @property
    def int8_ops_per_cycle(self) -> int:
        """int8 ops per cycle per core: 4x the fp32 rate with dot-product instructions
        (AVX-512 VNNI, AVX-VNNI, Arm SDOT), else 2x."""
        dot = {"avx512_vnni", "avx_vnni", "asimddp"} & self.flags
        return self.flops_per_cycle * (4 if dot else 2)

    def describe(self) -> str:
        return (f"{self.model}, {self.cores} cores at {self.clock_hz / 1e9:.2f} GHz, "
                f"{self.flops_per_cycle} fp32 FLOP/cycle, {self.int8_ops_per_cycle} int8 "
                "ops/cycle")


def host_cpu_info(cpuinfo: Path = Path("/proc/cpuinfo")) -> HostCpu:
    fields = _cpuinfo_fields(cpuinfo)
    clock = _clock_hz(fields)
    flags = frozenset((fields.get("flags") or fields.get("Features") or "").split())
    model = fields.get("model name") or platform.processor() or platform.machine()
    caches = _cache_sizes()
    return HostCpu(model, os.cpu_count() or 1, clock, flags,
                   max(caches.values()) if caches else None, caches.get(2))


def _cpuinfo_fields(path: Path) -> dict[str, str]:
    fields: dict[str, str] = {}
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def _clock_hz(fields: dict[str, str]) -> float:
    maximum = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    try:
        return float(maximum.read_text()) * 1e3
    except (OSError, ValueError):
        pass
    try:
        return float(fields["cpu MHz"]) * 1e6
    except (KeyError, ValueError):
        return DEFAULT_CLOCK_HZ


def _cache_sizes() -> dict[int, int]:
    """Cache level -> size in bytes of cpu0's data/unified caches, from sysfs."""
    folder = Path("/sys/devices/system/cpu/cpu0/cache")
    sizes: dict[int, int] = {}
    for index in sorted(folder.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1024, "M": 1024 ** 2}.get(text[-1:], 1)
        digits = text.rstrip("KM")
        if kind != "Instruction" and digits.isdigit():
            sizes[level] = int(digits) * scale
    return sizes
