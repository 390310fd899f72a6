"""edgeopt: take a trained model to a phone or an embedded board, offline."""

from edgeopt.tf_env import offline_environment

# Before any module can load onnxruntime: its telemetry client reads the switch once, at
# load time (see edgeopt/tf_env.py).
offline_environment()

__version__ = "0.1.0"
