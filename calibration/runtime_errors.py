"""The error a writer's runtime check raises when the real runtime refuses a model."""

from __future__ import annotations

from edgeopt.errors import ConversionError


class RuntimeRejected(ConversionError):
    """The runtime refused the written model; `tensor` names the op output it blamed."""

    def __init__(self, message: str, tensor: str | None = None):
        super().__init__(message)
        self.tensor = tensor
