"""edgeopt: take a trained model to a phone or an embedded board, offline.

    >>> import edgeopt
    >>> edgeopt.build("samples/digits_cnn.onnx", device="pixel-npu",  # doctest: +SKIP
    ...               calib="samples/digits_calib.npz", output="dist")
"""

import importlib

from edgeopt.tf_env import offline_environment

# Before any module can load onnxruntime: its telemetry client reads the switch once, at
# load time (see edgeopt/tf_env.py).
offline_environment()

__version__ = "0.1.0"


def __getattr__(name: str):
    # `edgeopt.build` (edgeopt/api.py) loads the whole pipeline; the CLI and every
    # `import edgeopt.x` would pay for it at start-up if this file imported it.
    if name == "build":
        return importlib.import_module("edgeopt.api").build
    raise AttributeError(f"module 'edgeopt' has no attribute {name!r}")
