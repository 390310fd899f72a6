"""A max pool's padding with a minus-infinity stand-in gets its input's range (the ONet
class of issue 17: onnx2tf pads a ceil_mode MaxPool with float32's lowest value)."""

from __future__ import annotations

import numpy as np

from edgeopt.calibration.graphspec import CalibGraph, OpInfo
from edgeopt.calibration.saturation import max_padding_ranges

LOWEST = float(np.finfo(np.float32).min)


def _graph(reader: str) -> CalibGraph:
    ops = (OpInfo("act", "PRELU", ("conv", "alpha"), ("act",)),
           OpInfo("padded", "PADV2", ("act", "paddings", "value"), ("padded",)),
           OpInfo("pooled", reader, ("padded",), ("pooled",)))
    return CalibGraph("tflite", ("x",), ("pooled",), ("conv", "act", "padded", "pooled"),
                      (), {}, {}, ops)


def test_padding_read_by_a_max_pool_takes_its_input_range():
    ranges = {"act": (-0.5, 6.0), "padded": (LOWEST, 6.0), "pooled": (-0.4, 6.0)}
    fixed = max_padding_ranges(_graph("MAX_POOL_2D"), ranges)
    assert fixed["padded"] == (-0.5, 6.0)
    assert fixed["act"] == ranges["act"] and fixed["pooled"] == ranges["pooled"]
    assert ranges["padded"] == (LOWEST, 6.0)  # the caller's dict is left alone


def test_padding_read_by_anything_else_keeps_its_range():
    # a convolution computes with the pad value: its range is the model's, however odd
    ranges = {"act": (-0.5, 6.0), "padded": (LOWEST, 6.0)}
    assert max_padding_ranges(_graph("CONV_2D"), ranges)["padded"] == (LOWEST, 6.0)


def test_an_ordinary_pad_keeps_its_range():
    ranges = {"act": (0.0, 6.0), "padded": (-1.0, 6.0)}  # pads with -1: a real value
    assert max_padding_ranges(_graph("MAX_POOL_2D"), ranges)["padded"] == (-1.0, 6.0)
