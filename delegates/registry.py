"""Which module holds each delegate's rules: the one place that maps a name to its code.

Delegate names are the ``delegate`` values of the device profiles. Rule modules are
imported on first use; ``ethos-u`` has no static rules: Arm's Vela compiler decides.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module

from edgeopt.delegates.rules import DelegateRules
from edgeopt.errors import ConfigError

RULE_MODULES = {
    "xnnpack": "edgeopt.delegates.xnnpack",
    "gpu": "edgeopt.delegates.gpu",
    "nnapi": "edgeopt.delegates.nnapi",
    "qnn-htp": "edgeopt.delegates.qnn_htp",
    "google-tensor": "edgeopt.delegates.google_tensor",
    "edgetpu": "edgeopt.delegates.edgetpu",
}
# Delegates placed by running the vendor's own compiler instead of rules.
COMPILED = ("ethos-u",)


def delegate_names() -> tuple[str, ...]:
    """Every delegate `place` accepts."""
    return tuple(RULE_MODULES) + COMPILED


@cache
def load_delegate_rules(name: str) -> DelegateRules:
    """The rules of delegate ``name``; ConfigError for an unknown name."""
    if name not in RULE_MODULES:
        known = ", ".join(delegate_names())
        raise ConfigError(f"unknown delegate '{name}'; known delegates: {known}")
    return import_module(RULE_MODULES[name]).RULES
