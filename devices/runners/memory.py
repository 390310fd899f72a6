"""Resident memory of this process while a model loads and runs, sampled on a thread.

    >>> with RssSampler() as rss:
    ...     interpreter = build()
    ...     rss.mark("init")
    ...     run()
    >>> rss.footprint_mb()
    {'init': 3.2, 'overall': 5.1, 'peak': 5.4}

The figures are deltas from the moment sampling started, like benchmark_model's "Memory
footprint delta from the start of the tool (MB): init=.. overall=..", plus the peak seen by
periodic monitoring ("Overall peak memory footprint (MB) via periodic monitoring").
"""

from __future__ import annotations

import threading

import psutil

MB = 1024.0 * 1024.0


class RssSampler:
    def __init__(self, interval_s: float = 0.005):
        self.interval_s = interval_s
        self._process = psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self.start_rss = self.peak_rss = self._rss()
        self.marks: dict[str, int] = {}

    def _rss(self) -> int:
        return self._process.memory_info().rss

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_rss = max(self.peak_rss, self._rss())

    def mark(self, name: str) -> None:
        rss = self._rss()
        self.peak_rss = max(self.peak_rss, rss)
        self.marks[name] = rss

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.mark("overall")
        self._stop.set()
        self._thread.join()

    def footprint_mb(self) -> dict[str, float]:
        figures = {name: (rss - self.start_rss) / MB for name, rss in self.marks.items()}
        figures["peak"] = (self.peak_rss - self.start_rss) / MB
        return figures
