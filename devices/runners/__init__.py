"""Runners that measure a model for real: on this host, on a phone over adb, on a board.

    >>> from edgeopt.devices.runners.host import HostBenchmark, run_host
    >>> measurement = run_host(HostBenchmark(model=Path("m.tflite"), runs=50))
    >>> measurement.latency.median

Every runner returns a `Measurement` (measurement.py): the `bench --json` record of
DESIGN.md, which `edgeopt devices calibrate` reads back from a JSON-lines file.
"""
