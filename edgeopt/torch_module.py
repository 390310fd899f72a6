"""Capture a PyTorch `nn.Module` with torch.export, the Python API's way in.

    >>> path = save_module(model, (torch.randn(1, 3, 224, 224),), Path(tmp))  # doctest: +SKIP

The program is saved as a `.pt2` and read back through the same checks as a user's file
(edgeopt.torch_archive), so a module and a file take one route. Export failures become one
message each: a forward that branches on tensor values (data-dependent control flow) and
example inputs the module cannot take are told apart.
"""

from __future__ import annotations

import re
from pathlib import Path

from edgeopt.errors import ConfigError, ModelLoadError, first_line
from edgeopt.torch_program import import_torch

_DATA_DEPENDENT = re.compile(r"data.dependent|GuardOnDataDependent|DataDependent", re.I)
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def _example_args(example_inputs) -> tuple:
    torch = import_torch()
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (tuple, list)) and example_inputs and all(
            isinstance(x, torch.Tensor) for x in example_inputs):
        return tuple(example_inputs)
    raise ConfigError("example_inputs must be a tensor or a tuple of tensors, one per "
                      "forward argument, e.g. example_inputs=(torch.randn(1, 3, 224, 224),)")


def export_module(module, example_inputs):
    """The module's ExportedProgram (eval mode), or one error saying why export failed."""
    torch = import_torch()
    if not isinstance(module, torch.nn.Module):
        raise ConfigError(f"edgeopt.build takes a model path or a torch.nn.Module, got "
                          f"{type(module).__name__}")
    args = _example_args(example_inputs)
    module.eval()
    name = type(module).__name__
    try:
        return torch.export.export(module, args)
    except Exception as exc:  # torch.export raises UserError, GuardOnDataDependentSymNode...
        text = f"{type(exc).__name__}: {exc}"
        if _DATA_DEPENDENT.search(text):
            raise ModelLoadError(
                f"torch.export cannot capture {name}: its forward branches on tensor values "
                "(data-dependent control flow); compute the branch outside the model or "
                "write it with torch.where / torch.cond") from None
        raise ModelLoadError(f"torch.export cannot run {name} on the example inputs "
                             f"{[tuple(a.shape) for a in args]}: {first_line(exc)}") from None


def save_module(module, example_inputs, folder: Path, name: str | None = None) -> Path:
    """`folder/<name>.pt2`: the exported module, as edgeopt reads any .pt2."""
    torch = import_torch()
    program = export_module(module, example_inputs)
    stem = _NAME.sub("_", name or type(module).__name__.lower()) or "model"
    path = folder / f"{stem}.pt2"
    torch.export.save(program, path)
    return path
