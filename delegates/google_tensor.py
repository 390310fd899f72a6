"""The Google Tensor TPU in Pixel 6 and later (LiteRT NPU acceleration; NNAPI on older builds).

Google publishes no per-op table for the Tensor TPU. These rules combine what is published:
the LiteRT NPU documentation (ai.google.dev/edge/litert: full-integer int8 models, static
shapes, ahead-of-time compilation per partition), the Android NNAPI operation set that the
Pixel's TPU driver serves (feature level 5, Android 12, the first Tensor phones; see
``nnapi.py``) restricted to quantized 8-bit operands, and the Edge TPU family's constraints
on weights (constant, symmetric per-channel int8). They are the least certain rule set in
this package: treat a "delegated" verdict as "offered to the TPU compiler".
"""

from __future__ import annotations

from edgeopt.delegates import checks as generic
from edgeopt.delegates.rules import build_rules

RULES = build_rules("google_tensor.toml", generic.GENERIC)
