"""Which corpus rows each shipped device profile is fitted to.

A row belongs to a profile when its chip, delegate, compute unit and precision are those
the profile describes; nothing else is guessed. The table is the decision, written down:

| profile | corpus rows |
|---|---|
| snapdragon-npu | Snapdragon 8 Gen 3 (Galaxy S24), `qnn-htp` on the NPU, int8 and fp16 |
| snapdragon-8gen2-npu | Snapdragon 8 Gen 2 (Galaxy S23), the same |
| snapdragon-8elite-npu | Snapdragon 8 Elite (Galaxy S25, 8 Elite QRD), the same |
| pixel3-cpu | Google Pixel 3 (Snapdragon 845) CPU, 4 threads, fp32 and int8 (the TFLite pages) |
| pixel3-gpu | Google Pixel 3 (Snapdragon 845) GPU delegate, fp16 |
| pixel4-cpu | Google Pixel 4 (Snapdragon 855) CPU, 4 threads, fp32 and int8 |
| pixel4-gpu | Google Pixel 4 (Snapdragon 855) GPU delegate, fp16 |
| coral-usb | Coral USB Accelerator on a desktop host (USB 3.0), int8 |
| coral-devboard | Coral Dev Board (Edge TPU + NXP i.MX 8M), int8 |
| rpi5-cpu | Raspberry Pi 5 (BCM2712) CPU, fp16 and int8 (NetsPresso) |
| rpi4-cpu | Raspberry Pi 4 Model B (BCM2711) CPU, fp16 and int8 (NetsPresso) |

The Snapdragon rows are AI Hub's (`float` runs in fp16 there) with no layer on the CPU,
from the runtimes the profiles describe: TFLite + QNN delegate and QNN itself (`tflite`,
`qnn_dlc`, `qnn_context_binary`, the same HTP backend). onnxruntime's QNN EP rows are left
out: the same models run a median 21% slower there (p10-p90 0.91-1.83x of the TFLite row,
166 pairs on the Galaxy S24), a runtime cost the profile's LiteRT path does not pay.
pixel-cpu, pixel-gpu and pixel-npu describe Tensor G3 phones, for which no public row
exists: they stay priors ("prior: unvalidated"), and the Pixel 3 and 4 rows (Snapdragon
chips) have profiles of their own. The Ethos-U profiles (their rows have no Keras
stand-in) and host-cpu (calibrated on the host) are not fitted either.
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
    runtime_details: tuple[str, ...] = ()

    def matches(self, row: Measurement) -> bool:
        return (row.soc in self.socs and row.delegate in self.delegates
                and row.compute_unit in self.compute_units and row.precision in self.precisions
                and (not self.devices or row.device in self.devices)
                and (self.threads is None or row.threads in (None, self.threads))
                and (not self.runtime_details or row.runtime_detail in self.runtime_details)
                and not row.layers_cpu)   # a row partly on the CPU is another placement


# AI Hub's runtimes on the HTP that the LiteRT + QNN delegate path matches (module doc)
QNN_RUNTIMES = ("tflite", "qnn_dlc", "qnn_context_binary")


def _snapdragon(socs: tuple[str, ...], describes: str) -> RowFilter:
    return RowFilter(socs, ("qnn-htp",), ("npu",), ("int8", "fp16"), describes=describes,
                     runtime_details=QNN_RUNTIMES)


def _pixel(soc: str, phone: str, unit: str) -> RowFilter:
    if unit == "cpu":
        return RowFilter((soc,), ("cpu",), ("cpu",), ("fp32", "int8"), (phone,), 4,
                         describes=f"{phone} ({soc}) CPU, 4 threads")
    return RowFilter((soc,), ("gpu",), ("gpu",), ("fp16",), (phone,),
                     describes=f"{phone} ({soc}) GPU delegate")


PROFILE_ROWS: dict[str, RowFilter] = {
    "snapdragon-npu": _snapdragon(("Snapdragon 8 Gen 3",),
                                  "Snapdragon 8 Gen 3 (Galaxy S24) Hexagon NPU"),
    "snapdragon-8gen2-npu": _snapdragon(("Snapdragon 8 Gen 2",),
                                        "Snapdragon 8 Gen 2 (Galaxy S23) Hexagon NPU"),
    "snapdragon-8elite-npu": _snapdragon(
        ("Snapdragon 8 Elite For Galaxy", "Snapdragon 8 Elite"),
        "Snapdragon 8 Elite (Galaxy S25, 8 Elite QRD) Hexagon NPU"),
    "pixel3-cpu": _pixel("Snapdragon 845", "Google Pixel 3", "cpu"),
    "pixel3-gpu": _pixel("Snapdragon 845", "Google Pixel 3", "gpu"),
    "pixel4-cpu": _pixel("Snapdragon 855", "Google Pixel 4", "cpu"),
    "pixel4-gpu": _pixel("Snapdragon 855", "Google Pixel 4", "gpu"),
    "coral-usb": RowFilter(("Edge TPU (USB 3.0, desktop host)",), ("edgetpu",),
                           ("edgetpu",), ("int8",),
                           describes="Coral USB Accelerator, USB 3.0 desktop host"),
    "coral-devboard": RowFilter(("Edge TPU + NXP i.MX 8M",), ("edgetpu",), ("edgetpu",),
                                ("int8",), describes="Coral Dev Board"),
    "rpi5-cpu": RowFilter(("Broadcom BCM2712",), ("cpu",), ("cpu",), ("fp16", "int8"),
                          describes="Raspberry Pi 5 (BCM2712) CPU"),
    "rpi4-cpu": RowFilter(("Broadcom BCM2711",), ("cpu",), ("cpu",), ("fp16", "int8"),
                          describes="Raspberry Pi 4 Model B (BCM2711) CPU"),
}


def profile_rows(rows: Iterable[Measurement], profile: str) -> list[Measurement]:
    """The rows of ``rows`` that ``profile`` is fitted to (none for an unmapped profile)."""
    wanted = PROFILE_ROWS.get(profile)
    return [r for r in rows if wanted is not None and wanted.matches(r)]


def mapped_rows(rows: Iterable[Measurement]) -> list[Measurement]:
    """Every row that some profile is fitted to."""
    rows = list(rows)
    return [r for r in rows if any(f.matches(r) for f in PROFILE_ROWS.values())]
