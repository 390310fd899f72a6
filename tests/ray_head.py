"""A real Ray head on loopback with 2 CPUs, for tests/test_sweep.py and benchmarks/sweep.py.

    >>> with local_ray_head(Path("/tmp/edgeopt-ray-1")) as address:    # doctest: +SKIP
    ...     run_sweep(SweepConfig(space, ray=address))

The head runs in the foreground (`ray start --block`) under this interpreter (which has
edgeopt), in its own session, so stopping it ends exactly the processes it started.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

RAY_CLI = [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; "
           "sys.argv[0] = 'ray'; main()"]
START_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ray_head(temp_dir: Path, cpus: int = 2) -> tuple[str, subprocess.Popen]:
    """The head's GCS address and its process; `temp_dir` must be short (socket paths)."""
    port = free_port()
    head = subprocess.Popen([*RAY_CLI, "start", "--head", "--block", f"--port={port}",
                             "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}",
                             "--include-dashboard=false", "--disable-usage-stats",
                             f"--temp-dir={temp_dir}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and head.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return f"127.0.0.1:{port}", head
        except OSError:
            time.sleep(0.5)
    stop_ray_head(head, temp_dir)
    raise RuntimeError(f"the Ray head did not listen within {START_TIMEOUT_S:g} s")


def stop_ray_head(head: subprocess.Popen, temp_dir: Path) -> None:
    """Stop the head started here and every process under it, and nothing else."""
    import psutil

    try:
        started = psutil.Process(head.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        started = []
    head.terminate()
    try:
        head.wait(timeout=60)
    except subprocess.TimeoutExpired:
        head.kill()
        head.wait()
    for proc in started:
        with contextlib.suppress(psutil.Error):
            if proc.is_running():
                proc.kill()
    shutil.rmtree(temp_dir, ignore_errors=True)


@contextlib.contextmanager
def local_ray_head(temp_dir: Path, cpus: int = 2) -> Iterator[str]:
    address, head = start_ray_head(temp_dir, cpus)
    try:
        yield address
    finally:
        stop_ray_head(head, temp_dir)
