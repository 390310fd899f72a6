"""Ctrl-C ends a command with "interrupted" and exit status 130, whatever code it lands in.

Python raises KeyboardInterrupt wherever the main thread is, and libraries do not all let
it through: a pybind11 module whose import it interrupts re-raises it as `ImportError:
initialization failed`, a C function that sees it pending fails with SystemError, a wrapper
turns either into its own error, and one raised in a `__del__` is printed and dropped. So
the handler also records the signal: the CLI then reports the interrupt whatever error (or
success) comes out; one dropped in a `__del__` is delivered again, and the next progress
step raises it if a library caught it.

    >>> with watch_interrupts():
    ...     run_the_command()
    >>> interrupted()
    False
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_received = threading.Event()


def _on_sigint(signum, frame) -> None:
    _received.set()
    raise KeyboardInterrupt


@contextmanager
def watch_interrupts() -> Iterator[None]:
    """Record SIGINT while the block runs (signal handlers exist in the main thread only)."""
    _received.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_sigint)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _unraisable_hook(previous_hook)
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


def _unraisable_hook(previous):
    """A KeyboardInterrupt raised in a `__del__` or a weakref callback cannot propagate:
    instead of the "Exception ignored" traceback, deliver the interrupt again, to land in
    code that can raise it."""
    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _thread.interrupt_main()
            return
        previous(unraisable)
    return hook


def interrupted(exc: BaseException | None = None) -> bool:
    """Whether SIGINT came during the command, or `exc` was caused by a KeyboardInterrupt."""
    if _received.is_set():
        return True
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt again when a library swallowed the first one."""
    if _received.is_set():
        raise KeyboardInterrupt
