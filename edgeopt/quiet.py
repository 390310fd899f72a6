"""Keep framework chatter off the user's terminal and off stdout.

TensorFlow, LiteRT and onnx2tf print from C++ and Python straight to file descriptors 1
and 2. While edgeopt works, both descriptors point at a log file; edgeopt's own
progress and results go to the original terminal streams through `sys.stdout` and
`sys.stderr`. `--json` therefore prints one JSON object on stdout and nothing else.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import warnings

from edgeopt.tempfiles import shared_tempdir


def _keep_terminal(stream, saved_fd: int, fd: int):
    """A Python stream on the saved descriptor when `stream` writes to `fd`; else `stream`
    itself (a test runner's capture buffer is not a descriptor and needs no saving)."""
    try:
        if stream.fileno() == fd:
            wrapper = io.TextIOWrapper(os.fdopen(os.dup(saved_fd), "wb"), line_buffering=True)
            return wrapper, True
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass
    return stream, False


@contextlib.contextmanager
def library_output_to_log():
    """Point fds 1 and 2 at a log file; Python's sys.stdout/err keep the real streams."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        saved = os.dup(1), os.dup(2)
    except OSError:  # no real descriptors (embedded use): nothing to redirect
        yield None
        return
    keep = os.environ.get("EDGEOPT_KEEP_LOG")  # then the log outlives the run's temp folder
    log = tempfile.NamedTemporaryFile(prefix="edgeopt-", suffix=".log", delete=False,
                                      dir=shared_tempdir() if keep else None)
    streams = sys.stdout, sys.stderr
    sys.stdout, own_out = _keep_terminal(sys.stdout, saved[0], 1)
    sys.stderr, own_err = _keep_terminal(sys.stderr, saved[1], 2)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield log.name
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        for stream, own in ((sys.stdout, own_out), (sys.stderr, own_err)):
            if own:
                stream.close()
        sys.stdout, sys.stderr = streams
        log.close()
        if not keep:
            os.unlink(log.name)


@contextlib.contextmanager
def captured_prints():
    """Swallow Python-level prints and warnings of a noisy library; yields the text."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield buffer
