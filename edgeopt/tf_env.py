"""Quiet TensorFlow's start-up chatter before it is first imported."""

import os


def quiet_tensorflow() -> None:
    """Call before importing tensorflow/keras: keeps C++ logs off the user's terminal."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
