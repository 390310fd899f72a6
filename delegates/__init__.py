"""Which op runs where, and why: per-delegate op rules, the partitioner, placement reports.

    >>> from edgeopt.delegates import place, place_for_device
    >>> placement = place("model_int8.tflite", "edgetpu")               # doctest: +SKIP
    >>> placement.summary_line()                                         # doctest: +SKIP
    >>> place_for_device(tflite_bytes, "ethos-u55-256").compiler         # doctest: +SKIP

Importing this package imports no framework: LiteRT, Vela and TensorFlow load only inside
the functions that need them.
"""

from edgeopt.delegates.engine import load_model_graph, place, place_for_device, place_with_rules
from edgeopt.delegates.external import interpreter_with_delegate, load_external_delegate
from edgeopt.delegates.placement import Crossing, OpPlacement, Placement
from edgeopt.delegates.registry import delegate_names, load_delegate_rules

__all__ = [
    "Crossing",
    "OpPlacement",
    "Placement",
    "delegate_names",
    "interpreter_with_delegate",
    "load_delegate_rules",
    "load_external_delegate",
    "load_model_graph",
    "place",
    "place_for_device",
    "place_with_rules",
]
