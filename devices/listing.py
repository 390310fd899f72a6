"""The table `edgeopt devices` prints: the shipped profiles, and which row a profile in the
user cache (`edgeopt devices calibrate`) replaces on this machine.

    >>> print(devices_table([p.summary() for p in all_profiles()]))   # doctest: +SKIP
    name            kind  delegate       precision  io       formats      basis
    ...
    host-cpu *      cpu   xnnpack        int8       float32  tflite,onnx
    * calibrated on this machine: ~/.cache/edgeopt/profiles/host-cpu.toml ...
"""

from __future__ import annotations

from edgeopt.devices.profile import USER_CACHE
from edgeopt.terminal import table

HEADER = ("name", "kind", "delegate", "precision", "io", "formats", "basis")
MARK = " *"


def _row(p: dict) -> tuple[str, ...]:
    name = p["name"] + (MARK if p.get("origin") == USER_CACHE else "")
    return (name, p["kind"], p["delegate"], p["precision"], p["io_dtype"],
            ",".join(p["formats"]), p.get("basis", ""))


def devices_table(profiles: list[dict]) -> str:
    """Aligned rows of `DeviceProfile.summary()` records; a footnote per calibrated one."""
    lines = [table(HEADER, [_row(p) for p in profiles])]
    lines += [f"{MARK.strip()} {p['name']}: calibrated on this machine, {p['file']} (in the user "
              "cache, used instead of the shipped profile; delete it to go back)"
              for p in profiles if p.get("origin") == USER_CACHE]
    return "\n".join(lines)
