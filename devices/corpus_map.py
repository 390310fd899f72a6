"""Which corpus rows each shipped device profile is fitted to.

A row belongs to a profile when its chip, delegate, compute unit and precision are those
the profile describes; nothing else is guessed. The table is the decision, written down:

| profile | corpus rows |
|---|---|
| snapdragon-npu | Snapdragon 8 Gen 3 (Galaxy S24), `qnn-htp` on the NPU, int8 and fp16 |
| pixel-cpu | Google Pixel 3 (Snapdragon 845) CPU, 4 threads, fp32 and int8 (the TFLite pages) |
| pixel-gpu | Google Pixel 3 (Snapdragon 845) GPU delegate, fp16 |
| coral-usb | Coral USB Accelerator on a desktop host (USB 3.0), int8 |
| coral-devboard | Coral Dev Board (Edge TPU + NXP i.MX 8M), int8 |
| rpi5-cpu | Raspberry Pi 5 (BCM2712) CPU, fp16 and int8 (NetsPresso) |

The snapdragon-npu rows are AI Hub's (`float` runs in fp16 there) with no layer on the
CPU, from every runtime it lists (TFLite + QNN delegate, QNN, onnxruntime's QNN EP).
pixel-cpu and pixel-gpu describe a Tensor G3 phone, but the only public Pixel rows are
Pixel 3 and 4 (Snapdragon chips); the fit makes them Pixel 3 profiles in all but name, and
their basis says so. pixel-npu (NNAPI rows name no accelerator), the Ethos-U profiles
(their rows have no Keras stand-in) and host-cpu (calibrated on the host) are not fitted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from edgeopt.devices.corpus import Measurement


@dataclass(frozen=True)
class RowFilter:
    """The corpus rows of one profile."""

    socs: tuple[str, ...]
    delegates: tuple[str, ...]
    compute_units: tuple[str, ...]
    precisions: tuple[str, ...]
    devices: tuple[str, ...] = ()
    threads: int | None = None
    describes: str = ""

    def matches(self, row: Measurement) -> bool:
        return (row.soc in self.socs and row.delegate in self.delegates
                and row.compute_unit in self.compute_units and row.precision in self.precisions
                and (not self.devices or row.device in self.devices)
                and (self.threads is None or row.threads in (None, self.threads))
                and not row.layers_cpu)   # a row partly on the CPU is another placement


PROFILE_ROWS: dict[str, RowFilter] = {
    "snapdragon-npu": RowFilter(("Snapdragon 8 Gen 3",), ("qnn-htp",), ("npu",),
                                ("int8", "fp16"),
                                describes="Snapdragon 8 Gen 3 (Galaxy S24) Hexagon NPU"),
    "pixel-cpu": RowFilter(("Snapdragon 845",), ("cpu",), ("cpu",), ("fp32", "int8"),
                           ("Google Pixel 3",), 4,
                           describes="Google Pixel 3 (Snapdragon 845) CPU, 4 threads"),
    "pixel-gpu": RowFilter(("Snapdragon 845",), ("gpu",), ("gpu",), ("fp16",),
                           ("Google Pixel 3",),
                           describes="Google Pixel 3 (Snapdragon 845) GPU delegate"),
    "coral-usb": RowFilter(("Edge TPU (USB 3.0, desktop host)",), ("edgetpu",),
                           ("edgetpu",), ("int8",),
                           describes="Coral USB Accelerator, USB 3.0 desktop host"),
    "coral-devboard": RowFilter(("Edge TPU + NXP i.MX 8M",), ("edgetpu",), ("edgetpu",),
                                ("int8",), describes="Coral Dev Board"),
    "rpi5-cpu": RowFilter(("Broadcom BCM2712",), ("cpu",), ("cpu",), ("fp16", "int8"),
                          describes="Raspberry Pi 5 (BCM2712) CPU"),
}


def profile_rows(rows: Iterable[Measurement], profile: str) -> list[Measurement]:
    """The rows of ``rows`` that ``profile`` is fitted to (none for an unmapped profile)."""
    wanted = PROFILE_ROWS.get(profile)
    return [r for r in rows if wanted is not None and wanted.matches(r)]


def mapped_rows(rows: Iterable[Measurement]) -> list[Measurement]:
    """Every row that some profile is fitted to."""
    rows = list(rows)
    return [r for r in rows if any(f.matches(r) for f in PROFILE_ROWS.values())]
