"""Benchmark a .tflite on an Android phone over adb (see remote.py for the steps).

    >>> m = run_adb(RemoteBenchmark(Path("dist/model.tflite"), target="R5CT30XXXX",
    ...                             delegate="gpu", runs=100))
    >>> m.latency.mean, m.power.power_mw

The phone's serial, product, model and device names come from `adb devices -l`.
"""

from __future__ import annotations

from collections.abc import Callable

from edgeopt.devices.runners.adb import AdbClient, AdbError, adb_binary, list_devices
from edgeopt.devices.runners.measurement import Measurement
from edgeopt.devices.runners.remote import RemoteBenchmark, run_remote

PRODUCT_TIMEOUT_S = 20.0


def _product(client: AdbClient) -> dict:
    try:
        rows = list_devices(client, timeout=PRODUCT_TIMEOUT_S)
    except AdbError:
        return {}
    return next((props for serial, _, props in rows if serial == client.serial), {})


def run_adb(config: RemoteBenchmark, adb: str | None = None,
            progress: Callable[[str], None] = lambda _m: None) -> Measurement:
    """Measure `config.model` on the adb device `config.target`."""
    client = AdbClient(serial=config.target, binary=adb_binary(adb))
    return run_remote(config, client, "adb", _product(client), progress)
