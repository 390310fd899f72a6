"""Compression: structured pruning that removes channels for real, and distillation.

Public API: :func:`prune_structured`, :class:`PruneResult`, :class:`PruneConfig`,
:func:`build_channel_graph`, :func:`count_macs`, :class:`PruneError`, ``CRITERIA``;
:func:`distill`, :class:`DistillConfig`, :class:`DistillResult`, :func:`agreement`.
Heavy frameworks are imported inside functions only.
"""

from edgeopt.compression.criteria import CRITERIA
from edgeopt.compression.distill import DistillConfig, DistillResult, agreement, distill
from edgeopt.compression.graph import PruneError
from edgeopt.compression.groups import build_channel_graph
from edgeopt.compression.macs import count_macs
from edgeopt.compression.plan import PruneConfig
from edgeopt.compression.prune import PruneResult, prune_structured

__all__ = ["CRITERIA", "DistillConfig", "DistillResult", "PruneConfig", "PruneError",
           "PruneResult", "agreement", "build_channel_graph", "count_macs", "distill",
           "prune_structured"]
