"""Structured pruning: remove whole channels and rebuild a smaller Keras model.

>>> result = prune_structured(model, 0.5, "l1", sample_inputs=x)   # doctest: +SKIP
>>> result.macs_after / result.macs_before                          # about 0.5
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgeopt.compression.batchnorm import recalibrate_batchnorm
from edgeopt.compression.criteria import Criterion, cluster_scores, get_criterion
from edgeopt.compression.graph import PruneError
from edgeopt.compression.groups import ChannelGraph, build_channel_graph
from edgeopt.compression.macs import count_macs
from edgeopt.compression.plan import (
    Planner,
    PruneConfig,
    check_config,
    check_ratio,
    recipe_counts,
    sensitivity_or_uniform,
    uniform_counts,
)
from edgeopt.compression.rebuild import rebuild
from edgeopt.errors import DataError


@dataclass
class PruneResult:
    """The rebuilt model, channels before/after per layer, and MACs before/after.

    ``group_ratios``: share of channels removed per group (sources joined by commas);
    ``kept_channels``: per Conv2D/Dense, the original indices of the channels it kept.
    ``bn_recalibrated``: BatchNormalization statistics were re-estimated on the samples.
    """

    model: Any
    per_layer: dict[str, tuple[int, int]]
    macs_before: int
    macs_after: int
    group_ratios: dict[str, float] = field(default_factory=dict)
    kept_channels: dict[str, list[int]] = field(default_factory=dict)
    bn_recalibrated: bool = False


def default_samples(model: Any, count: int = 8, seed: int = 0) -> Any:
    """Seeded standard-normal inputs shaped like the model's, for when none are given."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((count, *t.shape[1:])).astype("float32") for t in model.inputs]
    return arrays[0] if len(arrays) == 1 else arrays


def check_samples(model: Any, samples: Any) -> None:
    """Refuse sample inputs whose count or shape does not fit the model's inputs."""
    arrays = samples if isinstance(samples, list | tuple) else [samples]
    if len(arrays) != len(model.inputs):
        raise DataError(f"the model has {len(model.inputs)} inputs, got {len(arrays)} "
                        "sample arrays")
    for array, tensor in zip(arrays, model.inputs):
        shape, expected = tuple(np.shape(array)), tuple(tensor.shape)
        fits = len(shape) == len(expected) and all(
            e is None or s == e for s, e in zip(shape[1:], expected[1:]))
        if not fits or shape[0] < 1:
            wanted = ", ".join("N" if e is None else str(e) for e in expected)
            raise DataError(f"sample inputs have shape {shape}, the model expects ({wanted})")


def _planner(cg: ChannelGraph, criterion: Criterion, samples: Any,
             config: PruneConfig) -> Planner:
    groups = [g for g in cg.groups if g.size >= 2]
    if not groups:
        raise PruneError("the model has no prunable layer (no Conv2D/Dense channels that "
                         "can be removed without changing the outputs); zero weights instead "
                         "with --2:4 or --unstructured, or build it unpruned")
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
    kinds = ("Conv2D", "DepthwiseConv2D", "SeparableConv2D", "Dense")
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
                     config: PruneConfig | None = None, labels: Any = None) -> PruneResult:
    """Remove channels from a Keras functional/Sequential model and rebuild it smaller.

    ``ratio_or_plan``: a float in (0, 1) is the share of MACs to remove (0.5 = half),
    allocated per group by ``config.allocation``; a mapping ``{layer regex: ratio}`` is a
    recipe of channel ratios per group. ``sample_inputs`` feed the sensitivity scan and
    the data-driven criteria (``activation``, ``taylor``); seeded random inputs stand in for
    the scan when they are None. ``labels`` of the samples, when given, are the Taylor
    criterion's targets (else the model's own top-1 outputs are). With sample inputs the
    rebuilt model's BatchNormalization statistics are re-estimated on them
    (``config.recalibrate_bn``).
    """
    config = config or PruneConfig()
    check_config(config)
    if not isinstance(ratio_or_plan, Mapping):
        check_ratio(ratio_or_plan)
    cg = build_channel_graph(model)
    if sample_inputs is not None:
        check_samples(cg.model, sample_inputs)
    samples = sample_inputs if sample_inputs is not None else default_samples(
        cg.model, seed=config.seed)
    planner = _planner(cg, get_criterion(criterion, labels), sample_inputs, config)
    macs_before = count_macs(cg.model)
    counts = _counts(planner, ratio_or_plan, samples, macs_before)
    pruned = rebuild(cg, planner.kept(counts))
    macs_after = _validate(cg.model, pruned, planner.cost(counts))
    kept = planner.kept(counts)
    ratios = {",".join(g.sources): c / g.size for g, c in zip(cg.groups, counts)}
    channels = {name: np.flatnonzero(cg.keep_mask(name, kept)).tolist()
                for name in dict.fromkeys(n for n, _ in cg.atoms)}
    recalibrated = (config.recalibrate_bn and sample_inputs is not None
                    and recalibrate_batchnorm(pruned, sample_inputs))
    return PruneResult(pruned, _per_layer(cg.model, pruned), macs_before, macs_after, ratios,
                       channels, bool(recalibrated))
