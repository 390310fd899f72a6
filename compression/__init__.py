"""Compression: structured pruning that removes channels for real, sparsity, distillation.

Public API: :func:`prune_structured`, :class:`PruneResult`, :class:`PruneConfig`,
:func:`build_channel_graph`, :func:`count_macs`, :class:`PruneError`, ``CRITERIA``,
:func:`recalibrate_batchnorm`;
:func:`sparsify`, :class:`SparsityConfig`, :class:`SparsityResult`;
:func:`measure_tflite`, :func:`measure_sparse`, :class:`MeasureConfig`;
:func:`distill`, :class:`DistillConfig`, :class:`DistillResult`, :func:`agreement`,
:func:`runtime_teacher`. Heavy frameworks are imported inside functions only.
"""

from edgeopt.compression.batchnorm import recalibrate_batchnorm
from edgeopt.compression.criteria import CRITERIA
from edgeopt.compression.distill import DistillConfig, DistillResult, agreement, distill
from edgeopt.compression.graph import PruneError
from edgeopt.compression.groups import build_channel_graph
from edgeopt.compression.macs import count_macs
from edgeopt.compression.measure import MeasureConfig, measure_sparse, measure_tflite
from edgeopt.compression.plan import PruneConfig
from edgeopt.compression.prune import PruneResult, prune_structured
from edgeopt.compression.sparsity import SparsityConfig, SparsityResult, sparsify
from edgeopt.compression.teacher import runtime_teacher

__all__ = ["CRITERIA", "DistillConfig", "DistillResult", "MeasureConfig", "PruneConfig",
           "PruneError", "PruneResult", "SparsityConfig", "SparsityResult", "agreement",
           "build_channel_graph", "count_macs", "distill", "measure_sparse", "measure_tflite",
           "prune_structured", "recalibrate_batchnorm", "runtime_teacher", "sparsify"]
