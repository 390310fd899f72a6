"""Load a real delegate library (libedgetpu, a QNN delegate, any TFLite external delegate).

LiteRT's ``load_delegate`` loads a shared library that exports
``tflite_plugin_create_delegate`` / ``tflite_plugin_destroy_delegate`` (the external
delegate interface). A missing file, a library that is not a delegate, or a delegate that
refuses its options all become one clear `DeviceError` instead of a ctypes traceback.

    >>> delegate = load_external_delegate("/usr/lib/libedgetpu.so.1")     # doctest: +SKIP
    >>> interpreter = interpreter_with_delegate("m_edgetpu.tflite", delegate)  # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgeopt.errors import DeviceError, first_line

SYMBOLS = ("tflite_plugin_create_delegate", "tflite_plugin_destroy_delegate")


def load_external_delegate(library: str | os.PathLike,
                           options: Mapping[str, Any] | None = None):
    """The LiteRT ``Delegate`` for ``library`` (a path, or a name the loader can find)."""
    path = _resolve(library)
    _check_exports(path)
    from ai_edge_litert.interpreter import load_delegate

    try:
        return load_delegate(path, {str(k): str(v) for k, v in (options or {}).items()})
    except (ValueError, RuntimeError, OSError) as exc:
        detail = first_line(exc).removeprefix("Failed to load delegate from ").strip()
        message = str(exc).splitlines()[1:] or [detail]
        raise DeviceError(f"delegate {path} failed to load: {message[0] or detail}") from exc


def _resolve(library: str | os.PathLike) -> str:
    path = Path(library)
    if path.exists():
        if not path.is_file():
            raise DeviceError(f"delegate library {path} is not a file")
        return str(path)
    if os.sep in str(library):
        raise DeviceError(f"delegate library not found: {path}")
    found = ctypes.util.find_library(str(library).removeprefix("lib").split(".so")[0])
    if found is None and not _loadable(str(library)):
        raise DeviceError(f"delegate library not found: {library} (not a file, and the "
                          "dynamic loader cannot find it)")
    return str(library)


def _loadable(name: str) -> bool:
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


def _check_exports(path: str) -> None:
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise DeviceError(f"delegate library {path} cannot be loaded: {first_line(exc)}") from exc
    missing = [name for name in SYMBOLS if not hasattr(lib, name)]
    if missing:
        raise DeviceError(f"{path} is not a TFLite external delegate (it does not export "
                          f"{', '.join(missing)})")


def interpreter_with_delegate(model: bytes | str | os.PathLike, delegate,
                              num_threads: int | None = None):
    """A LiteRT interpreter that runs ``model`` with ``delegate``, tensors allocated."""
    from ai_edge_litert.interpreter import Interpreter

    source = ({"model_content": bytes(model)} if isinstance(model, (bytes, bytearray))
              else {"model_path": str(model)})
    try:
        interpreter = Interpreter(**source, experimental_delegates=[delegate],
                                  num_threads=num_threads)
        interpreter.allocate_tensors()
    except (ValueError, RuntimeError) as exc:
        raise DeviceError(f"the delegate could not take the model: {first_line(exc)}") from exc
    return interpreter
