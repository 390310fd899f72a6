"""The Python API: `edgeopt.build` from a model file or a PyTorch module.

    >>> import edgeopt, torchvision                                    # doctest: +SKIP
    >>> model = torchvision.models.mobilenet_v3_small()
    >>> result = edgeopt.build(model, example_inputs=(torch.randn(1, 3, 224, 224),),
    ...                        device="pixel-npu", calib="calib.npz", output="dist")
    >>> result.manifest["conversion"]["torch_export"]["parity"]["cosine"]

Every other keyword is a `BuildConfig` field (scheme, format, eval, labels, ...), as the
CLI's `edgeopt build` flags are; `torch_route="litert"` converts a module or .pt2 with
litert-torch straight to a float .tflite instead of through ONNX (`--torch-route`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from edgeopt.config import BuildConfig
from edgeopt.pipeline import BuildResult, Progress
from edgeopt.pipeline import build as build_config
from edgeopt.torch_module import save_module


def build(model, *, device: str, example_inputs=None, output: str | os.PathLike = "dist",
          progress: Progress | None = None, **options) -> BuildResult:
    """Build a bundle for `device`; raises EdgeoptError (with the CLI's message) on bad input.

    `model` is a path (.onnx, .keras, SavedModel, .tflite, .pt2) or a torch.nn.Module with
    `example_inputs` (a tensor or a tuple of tensors, one per forward argument)."""
    progress = progress or (lambda _: None)
    if isinstance(model, (str, os.PathLike)):
        return build_config(BuildConfig(model=str(model), device=device, output=str(output),
                                        **options), progress)
    with tempfile.TemporaryDirectory(prefix="edgeopt-module-") as tmp:
        path = save_module(model, example_inputs, Path(tmp), options.pop("name", None))
        config = BuildConfig(model=str(path), device=device, output=str(output), **options)
        return build_config(config, progress)
