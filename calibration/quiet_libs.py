"""Silence the Python-level chatter of the writer libraries: logging, warnings, prints and
progress bars (which go to `sys.stdout` / `sys.stderr`, not to the file descriptors)."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings


@contextlib.contextmanager
def quiet_libraries():
    """onnxruntime.quantization logs and prints; ai-edge-quantizer warns and draws bars."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)
