"""Process environment for the native libraries edgeopt loads: quiet, and offline.

onnxruntime 1.32 ships Microsoft's 1DS telemetry client on Linux
(`core/platform/posix/telemetry_1ds.cc`): a few seconds after onnxruntime is loaded, a
native thread resolves `mobile.events.data.microsoft.com` (A and AAAA queries) to upload
usage events, and it writes a device id and an event cache under
`~/.cache/Microsoft/DeveloperTools/.onnxruntime/`. Commands that import TensorFlow first
live long enough for the upload thread to start, which is why the lookups showed there.
`onnxruntime.disable_telemetry_events()` does not stop that client; the environment
variable `ORT_DISABLE_TELEMETRY=1` does, but only when it is set before onnxruntime is
first imported, so `edgeopt/__init__.py` sets it before anything else can load it.
"""

import os

# Environment variables that keep a native library from reaching the network; edgeopt
# runs offline whatever the caller's environment says.
OFFLINE_ENVIRONMENT = {"ORT_DISABLE_TELEMETRY": "1"}


def offline_environment() -> None:
    """Set OFFLINE_ENVIRONMENT in this process (and the child processes it starts)."""
    os.environ.update(OFFLINE_ENVIRONMENT)


def quiet_tensorflow() -> None:
    """Call before importing tensorflow/keras: keeps C++ logs off the user's terminal."""
    offline_environment()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
