"""What a long command shows on stderr while it works, and how it paints a terminal.

A terminal gets a live line per step (spinner, bar, elapsed time) redrawn in place, and
colour unless NO_COLOR is set; a pipe or a CI log gets one plain `• step` line per step and
never an escape code; `--json` gets nothing. The stages only call `progress(message)`: a
message ending in `(k/n)` reports how far the running step has got (it draws the bar),
any other message starts a new step.

    >>> with StepProgress(stream=sys.stderr) as progress:       # doctest: +SKIP
    ...     progress("comparing 3 devices")
    ...     for i, name in enumerate(names, 1):
    ...         progress(f"{name} ({i}/{len(names)})")
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from typing import TextIO

from edgeopt.display import printable
from edgeopt.interrupts import raise_if_interrupted

_COUNT = re.compile(r"^(?P<detail>.*?)\s*\((?P<done>\d+)/(?P<total>\d+)\)\s*$")
_CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34",
          "cyan": "36"}
_TICK_S = 0.1
_BAR_CELLS = 24
_EVERY_LINE_UP_TO = 20  # counts up to this long print every step in a log


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError, OSError):
        return False


def colour_enabled(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return is_terminal(stream) and not os.environ.get("NO_COLOR")


def paint(text: str, style: str, enabled: bool) -> str:
    """`text` in ANSI `style` ("bold", "green", "bold red"...) when `enabled`."""
    if not enabled or not style:
        return text
    codes = ";".join(_CODES[s] for s in style.split())
    return f"\x1b[{codes}m{text}\x1b[0m"


def _unicode_ok(stream: TextIO) -> bool:
    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        "✓━⠋".encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


class _Glyphs:
    def __init__(self, unicode: bool):
        self.done, self.failed = ("✓", "✗") if unicode else ("ok", "x")
        self.full, self.empty = ("━", "─") if unicode else ("#", "-")
        self.spinner = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏" if unicode else "|/-\\"


def _seconds(elapsed: float) -> str:
    return f"{elapsed:.1f}s" if elapsed < 60 else f"{int(elapsed // 60)}m{int(elapsed % 60):02d}s"


class StepProgress:
    """`progress(message)` for the stages; a context manager that owns the live line.

    ``quiet`` (for --json) prints nothing. The stream is looked up when the object is made,
    so make it inside `library_output_to_log()`, which keeps sys.stderr on the terminal.
    """

    def __init__(self, stream: TextIO | None = None, quiet: bool = False):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.live = not quiet and is_terminal(self.stream)
        self.colour = not quiet and colour_enabled(self.stream)
        self.glyphs = _Glyphs(_unicode_ok(self.stream))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._label: str | None = None
        self._detail = ""
        self._count: tuple[int, int] | None = None
        self._tenth = 0
        self._started = 0.0
        self._frame = 0

    # -- the stages' side ----------------------------------------------------------------

    def __call__(self, message: str) -> None:
        raise_if_interrupted()  # a step boundary: a Ctrl-C a library swallowed stops here
        message = printable(message)
        if self.quiet:
            return
        counted = _COUNT.match(message)
        with self._lock:
            if counted and self._label is not None:
                self._detail = counted["detail"]
                self._count = int(counted["done"]), int(counted["total"])
                if self.live:
                    self._draw()
                elif self._worth_a_line(*self._count):
                    self._write(f"• {message}\n")
                return
            self._finish(ok=True)
            self._label, self._detail, self._count, self._tenth = message, "", None, 0
            self._started = time.monotonic()
            if not self.live:
                self._write(f"• {message}\n")
            else:
                self._draw()

    def _worth_a_line(self, done: int, total: int) -> bool:
        """In a log, a long count (a bench's 1000 runs) gets a line per tenth, not per item."""
        if total <= _EVERY_LINE_UP_TO or done >= total:
            return True
        tenth = 10 * done // total
        if tenth == self._tenth:
            return False
        self._tenth = tenth
        return True

    # -- the context manager -------------------------------------------------------------

    def __enter__(self) -> StepProgress:
        if self.live:
            self._stop.clear()
            self._ticker = threading.Thread(target=self._tick, name="edgeopt-progress",
                                            daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        with self._lock:
            self._finish(ok=exc_type is None)

    # -- drawing -------------------------------------------------------------------------

    def _tick(self) -> None:
        while not self._stop.wait(_TICK_S):
            with self._lock:
                if self._label is not None:
                    self._frame += 1
                    self._draw()

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: progress is not worth a crash
            self.quiet = True

    def _finish(self, ok: bool) -> None:
        if self._label is None:
            return
        if self.live:
            mark = paint(self.glyphs.done, "green", self.colour) if ok else \
                paint(self.glyphs.failed, "red", self.colour)
            elapsed = paint(_seconds(time.monotonic() - self._started), "dim", self.colour)
            self._write(f"\r\x1b[2K{mark} {self._label}  {elapsed}\n")
        self._label = None

    def _draw(self) -> None:
        g = self.glyphs
        spin = paint(g.spinner[self._frame % len(g.spinner)], "cyan", self.colour)
        elapsed = _seconds(time.monotonic() - self._started)
        text = f"{self._label}  {self._bar()}"
        if self._count:
            text += f" {self._count[0]}/{self._count[1]}"
        if self._detail:
            text += f" {self._detail}"
        width = shutil.get_terminal_size((100, 24)).columns
        room = max(width - len(elapsed) - 5, 10)
        if len(text) > room:
            text = text[:room - 3] + "..."
        self._write(f"\r\x1b[2K{spin} {text}  {paint(elapsed, 'dim', self.colour)}")

    def _bar(self) -> str:
        """A filled bar when the step reports counts; a block bouncing along otherwise."""
        g, cells = self.glyphs, _BAR_CELLS
        if self._count:
            done, total = self._count
            filled = cells * min(done, total) // max(total, 1)
            cells_text = g.full * filled + g.empty * (cells - filled)
        else:
            width, span = 5, cells - 5
            pos = self._frame % (2 * span)
            start = pos if pos <= span else 2 * span - pos
            cells_text = g.empty * start + g.full * width + g.empty * (cells - start - width)
        return cells_text


def table(header: tuple[str, ...], rows: list[tuple], colour: bool = False,
          indent: str = "") -> str:
    """Columns aligned on their widest cell; the header bold on a terminal."""
    cells = [tuple(str(c) for c in header), *[tuple(str(c) for c in r) for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        return indent + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()

    return "\n".join([paint(line(cells[0]), "bold", colour), *map(line, cells[1:])])
