"""Runners that measure a model for real: on this host, on phones over adb, on boards over ssh.

    >>> from edgeopt.devices.runners.host import HostBenchmark, run_host
    >>> run_host(HostBenchmark(Path("m.tflite"), runs=50)).latency.median
    >>> from edgeopt.devices.runners.android import run_adb
    >>> run_adb(RemoteBenchmark(Path("m.tflite"), target="R5CT30XXXX", delegate="gpu"))

Every runner returns a `Measurement` (measurement.py): the `bench --json` record of
DESIGN.md, which `edgeopt devices calibrate` reads back from a JSON-lines file.

host.py, sessions.py, memory.py    LiteRT / onnxruntime on this machine
remote.py, staging.py, workspace.py  the device flow shared by adb and ssh
adb.py, android.py / ssh.py        the two transports (real clients, argv lists)
device_scripts.py                  every device shell script, values shlex-quoted
benchmark_output.py                parser of TFLite benchmark_model's output
remote_bench.py                    benchmark_model's flags and output, in Python, for boards
power.py, numerics.py, android_numerics.py, stats.py, delegates.py, report_text.py
"""
