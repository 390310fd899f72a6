"""How long one model run may take: `EDGEOPT_RUN_DEADLINE_S` (default 300 s), and a
watchdog that enforces it on runs timed back to back.

    >>> run_deadline()
    300.0

The value must be a positive, finite number of seconds; anything else is one error before
work starts, not a deadline silently replaced by the default (nor `0` meaning "stop every
run at once").
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable

from edgeopt.errors import ConfigError

ENV_NAME = "EDGEOPT_RUN_DEADLINE_S"
DEFAULT_RUN_DEADLINE_S = 300.0


def run_deadline() -> float:
    """Seconds one run may take; ConfigError for a value that is no positive finite number."""
    raw = os.environ.get(ENV_NAME)
    if raw is None or raw.strip() == "":
        return DEFAULT_RUN_DEADLINE_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{ENV_NAME}={raw!r}: expected a positive number of seconds, e.g. "
                          f"{DEFAULT_RUN_DEADLINE_S:g}")
    return seconds


class RunWatchdog:
    """Calls `on_expire` when one armed run passes the deadline. One thread for all runs:
    arming is two assignments, so timed runs pay nothing for the watch (a timer thread per
    run would add its start-up to every latency sample)."""

    def __init__(self, on_expire: Callable[[], None], deadline: float | None = None):
        self.deadline = run_deadline() if deadline is None else deadline
        self._on_expire = on_expire
        self._started: float | None = None
        self.expired = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="edgeopt-watchdog")
        self._thread.start()

    def arm(self) -> None:
        self.expired = False
        self._started = time.monotonic()

    def disarm(self) -> None:
        self._started = None

    def close(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        poll = min(1.0, self.deadline / 10)
        while not self._stop.wait(poll):
            started = self._started
            if started is not None and time.monotonic() - started > self.deadline:
                self.expired = True
                self._started = None
                self._on_expire()


def exit_now(message: str, code: int = 2) -> None:
    """The CLI's error line and exit status, from a thread that cannot raise into the one
    stuck in native code; temporary folders left behind are swept by the next run."""
    import sys

    sys.stderr.write(f"edgeopt: error: {message}\n")
    sys.stderr.flush()
    os._exit(code)
