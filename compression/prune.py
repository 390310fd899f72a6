"""Structured pruning: remove whole channels and rebuild a smaller Keras model.

>>> result = prune_structured(model, 0.5, "l1", sample_inputs=x)   # doctest: +SKIP
>>> result.macs_after / result.macs_before                          # about 0.5
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgeopt.compression.criteria import Criterion, cluster_scores, get_criterion
from edgeopt.compression.graph import PruneError
from edgeopt.compression.groups import ChannelGraph, build_channel_graph
from edgeopt.compression.macs import count_macs
from edgeopt.compression.plan import (
    Planner,
    PruneConfig,
    check_ratio,
    recipe_counts,
    sensitivity_or_uniform,
    uniform_counts,
)
from edgeopt.compression.rebuild import rebuild


@dataclass
class PruneResult:
    """The rebuilt model, channels before/after per layer, and MACs before/after.

    ``group_ratios``: share of channels removed per group (sources joined by commas);
    ``kept_channels``: per Conv2D/Dense, the original indices of the channels it kept.
    """

    model: Any
    per_layer: dict[str, tuple[int, int]]
    macs_before: int
    macs_after: int
    group_ratios: dict[str, float] = field(default_factory=dict)
    kept_channels: dict[str, list[int]] = field(default_factory=dict)


def default_samples(model: Any, count: int = 8, seed: int = 0) -> Any:
    """Seeded standard-normal inputs shaped like the model's, for when none are given."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((count, *t.shape[1:])).astype("float32") for t in model.inputs]
    return arrays[0] if len(arrays) == 1 else arrays


def _planner(cg: ChannelGraph, criterion: Criterion, samples: Any,
             config: PruneConfig) -> Planner:
    groups = [g for g in cg.groups if g.size >= 2]
    if not groups:
        raise PruneError("the model has no prunable layer (no Conv2D/Dense channels that "
                         "can be removed without changing the outputs)")
    cg.groups = groups
    scores = criterion(cg, samples)
    orders = [np.asarray(g.roots)[np.argsort(cluster_scores(g, scores), kind="stable")]
              for g in groups]
    return Planner(cg, orders, config)


def _counts(planner: Planner, ratio_or_plan: float | Mapping[str, float], samples: Any,
            macs_before: int) -> list[int]:
    if isinstance(ratio_or_plan, Mapping):
        return recipe_counts(planner, ratio_or_plan)
    check_ratio(ratio_or_plan)
    target = (1 - ratio_or_plan) * macs_before
    if planner.config.allocation == "uniform":
        return uniform_counts(planner, target)
    if planner.config.allocation == "sensitivity":
        return sensitivity_or_uniform(planner, target, samples)
    raise PruneError(f"unknown allocation '{planner.config.allocation}' "
                     "(choose sensitivity or uniform)")


def _per_layer(before: Any, after: Any) -> dict[str, tuple[int, int]]:
    kinds = ("Conv2D", "DepthwiseConv2D", "Dense")
    return {layer.name: (int(layer.output.shape[-1]),
                         int(after.get_layer(layer.name).output.shape[-1]))
            for layer in before.layers if type(layer).__name__ in kinds}


def _validate(original: Any, pruned: Any, expected_macs: int) -> int:
    if [tuple(t.shape) for t in original.outputs] != [tuple(t.shape) for t in pruned.outputs]:
        raise PruneError("internal error: the pruned model's output shape changed")
    macs = count_macs(pruned)
    if macs != expected_macs:
        raise PruneError(f"internal error: planned {expected_macs} MACs, rebuilt {macs}")
    return macs


def prune_structured(model: Any, ratio_or_plan: float | Mapping[str, float],
                     criterion: str | Criterion = "l1", sample_inputs: Any = None,
                     config: PruneConfig | None = None) -> PruneResult:
    """Remove channels from a Keras functional/Sequential model and rebuild it smaller.

    ``ratio_or_plan``: a float in (0, 1) is the share of MACs to remove (0.5 = half),
    allocated per group by ``config.allocation``; a mapping ``{layer regex: ratio}`` is a
    recipe of channel ratios per group. ``sample_inputs`` feed the sensitivity scan and
    data-driven criteria; seeded random inputs stand in when they are None.
    """
    config = config or PruneConfig()
    if not isinstance(ratio_or_plan, Mapping):
        check_ratio(ratio_or_plan)
    cg = build_channel_graph(model)
    samples = sample_inputs if sample_inputs is not None else default_samples(
        cg.model, seed=config.seed)
    planner = _planner(cg, get_criterion(criterion), sample_inputs, config)
    macs_before = count_macs(cg.model)
    counts = _counts(planner, ratio_or_plan, samples, macs_before)
    pruned = rebuild(cg, planner.kept(counts))
    macs_after = _validate(cg.model, pruned, planner.cost(counts))
    kept = planner.kept(counts)
    ratios = {",".join(g.sources): c / g.size for g, c in zip(cg.groups, counts)}
    channels = {name: np.flatnonzero(cg.keep_mask(name, kept)).tolist()
                for name in dict.fromkeys(n for n, _ in cg.atoms)}
    return PruneResult(pruned, _per_layer(cg.model, pruned), macs_before, macs_after, ratios,
                       channels)
