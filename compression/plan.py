"""How many channels each group loses: uniform, from a sensitivity scan, or from a recipe."""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeopt.compression.graph import PruneError
from edgeopt.compression.groups import ChannelGraph
from edgeopt.compression.macs import MacModel
from edgeopt.compression.rebuild import masked_weights
from edgeopt.errors import ConfigError


@dataclass(frozen=True)
class PruneConfig:
    """Knobs of structured pruning, defaults visible.

    ``allocation``: ``sensitivity`` (greedy on a per-group scan at ``scan_ratios``, kept
    only if it changes the sample outputs less than the uniform plan) or ``uniform``.
    ``max_group_ratio``: no group loses more than this share of its channels.
    ``channel_multiple``: a pruned group keeps a multiple of this many channels. CPU
    kernels (XNNPACK) and NPUs work on channel tiles of 4 to 16: 66 channels cost what 80
    do, so pruning in whole tiles turns removed MACs into saved time.
    ``recalibrate_bn``: when sample inputs are given, re-estimate BatchNormalization
    statistics of the rebuilt model on them (see ``batchnorm``); False keeps the pruned
    model exactly the original with the removed channels' contributions zeroed.
    ``scan_macs``: the sensitivity scan (one forward pass per group and scan ratio) keeps
    within about this many MACs: past it, it runs on fewer samples, then at fewer ratios
    (``scan_extent``); the sensitivity and uniform plans are still compared on every
    sample.
    """

    allocation: str = "sensitivity"
    scan_ratios: tuple[float, ...] = (0.25, 0.5, 0.75)
    scan_macs: float = 1.5e11
    max_group_ratio: float = 0.9
    step: float = 0.05
    tolerance: float = 0.03
    seed: int = 0
    channel_multiple: int = 1
    recalibrate_bn: bool = True


@dataclass
class Planner:
    """Turns per-group prune counts into a ``kept`` array and counts its MACs."""

    cg: ChannelGraph
    orders: list[np.ndarray]  # per group: cluster roots, least important first
    config: PruneConfig

    def __post_init__(self) -> None:
        self.macs = MacModel(self.cg)
        self.limits = [min(len(o) - 1, int(len(o) * self.config.max_group_ratio))
                       for o in self.orders]

    def kept(self, counts: list[int]) -> np.ndarray:
        kept = self.cg.keep_all()
        for order, count in zip(self.orders, counts):
            kept[order[:count]] = False
        return kept

    def cost(self, counts: list[int]) -> int:
        return self.macs(self.kept(counts))

    def next_count(self, g: int, count: int) -> int:
        """Group ``g``'s count after one more step of channels, capped at its limit."""
        step = max(1, round(self.config.step * len(self.orders[g])))
        return self.snap(g, min(self.limits[g], count + step))

    def snap(self, g: int, count: int, nearest: bool = False) -> int:
        """``count`` moved so that group ``g`` keeps a multiple of ``channel_multiple``
        channels: up (remove more; to the nearest multiple when ``nearest``) unless that
        passes the group's limit, else down."""
        multiple, size = self.config.channel_multiple, len(self.orders[g])
        if multiple <= 1 or count <= 0:
            return max(count, 0)
        rounding = round if nearest else int
        kept = int(rounding((size - count) / multiple)) * multiple
        if kept >= multiple and size - kept <= self.limits[g]:
            return max(0, size - kept)
        return max(0, size - kept - multiple)


def _fit_last(planner: Planner, counts: list[int], g: int, low: int, target: float) -> None:
    """Shrink group ``g``'s count to the smallest in (low, counts[g]] that meets ``target``."""
    high = counts[g]
    while high - low > 1:
        mid = (low + high) // 2
        counts[g] = mid
        if planner.cost(counts) <= target:
            high = mid
        else:
            low = mid
    counts[g] = planner.snap(g, high)


def uniform_counts(planner: Planner, target: float) -> list[int]:
    """One channel ratio for all groups, the smallest that meets the MAC target."""
    def counts_at(r: float) -> list[int]:
        return [planner.snap(g, min(lim, int(r * len(o))))
                for g, (o, lim) in enumerate(zip(planner.orders, planner.limits))]

    low, high = 0.0, 1.0
    if planner.cost(counts_at(high)) > target:
        raise _unreachable(planner, counts_at(high))
    for _ in range(30):
        mid = (low + high) / 2
        low, high = (low, mid) if planner.cost(counts_at(mid)) <= target else (mid, high)
    return counts_at(high)


def _unreachable(planner: Planner, counts: list[int]) -> PruneError:
    """`counts`: the most the plan could remove (every group at its limit, or as far as
    each group could still step with its channel multiple)."""
    share = 1 - planner.cost(counts) / planner.cost([0] * len(counts))
    most = np.floor(share * 100) / 100
    advice = (f"ask for at most --prune {most:.2f}" if most > 0 else
              "build it unpruned, or zero weights instead with --2:4 or --unstructured")
    return PruneError(f"cannot remove that many MACs: pruning can take at most {share:.0%} of "
                      f"this model's MACs (each layer keeps its limit of channels); {advice}")


def scan_extent(planner: Planner, available: int) -> tuple[int, tuple[float, ...]]:
    """(samples, scan ratios) of the scan: every sample and ratio unless its passes (one
    per group and ratio) would exceed ``config.scan_macs``; then the first samples only,
    down to one, and past that fewer ratios, down to the middle one.

    On a 320x320 text detector (PP-OCRv4, 34 groups, 0.56 GMAC) one pass over 16 samples
    took about 5 s on a loaded host, the scan's 102 passes over 8 minutes; a 416x416 YOLOX
    (66 groups, 3.2 GMAC) needs 12 times that. The scan only ranks the groups; the plan it
    yields is still compared with the uniform plan on every sample.
    """
    ratios = tuple(planner.config.scan_ratios)
    model_macs = max(planner.cost([0] * len(planner.orders)), 1) * max(len(planner.orders), 1)
    samples = int(min(available, planner.config.scan_macs // (model_macs * len(ratios))))
    if samples >= 1:
        return samples, ratios
    keep = int(max(1, planner.config.scan_macs // model_macs))
    if keep >= len(ratios):
        return 1, ratios
    if keep == 1:
        return 1, (ratios[len(ratios) // 2],)
    picks = np.round(np.linspace(0, len(ratios) - 1, keep)).astype(int)
    return 1, tuple(ratios[i] for i in picks)


def _first(inputs: Any, count: int) -> Any:
    if count >= len(inputs[0] if isinstance(inputs, list | tuple) else inputs):
        return inputs
    if isinstance(inputs, list | tuple):
        return [np.asarray(a)[:count] for a in inputs]
    return np.asarray(inputs)[:count]


def sensitivity_scan(planner: Planner, sample_inputs: Any) -> list[Callable[[int], float]]:
    """Per group, output change as a function of channels removed (prune each group alone),
    on the samples and at the ratios of ``scan_extent``."""
    model = planner.cg.model
    first = sample_inputs[0] if isinstance(sample_inputs, list | tuple) else sample_inputs
    count, ratios = scan_extent(planner, len(first))
    sample_inputs = _first(sample_inputs, count)
    reference = _flat_outputs(model, sample_inputs)
    curves = []
    for g, order in enumerate(planner.orders):
        xs, ys = [0.0], [0.0]
        for ratio in ratios:
            counts = [0] * len(planner.orders)
            counts[g] = max(1, min(planner.limits[g], round(ratio * len(order))))
            xs.append(counts[g])
            ys.append(_output_change(planner, counts, sample_inputs, reference))
        curves.append(_curve(xs, ys))
    return curves


def _curve(xs: list[float], ys: list[float]) -> Callable[[int], float]:
    slope = (ys[-1] - ys[-2]) / max(xs[-1] - xs[-2], 1.0)
    return lambda n: float(np.interp(n, xs, ys)) + max(0.0, n - xs[-1]) * slope


_FORWARD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _forward(model: Any) -> Callable[[Any], Any]:
    """``model``'s inference as one traced TensorFlow graph, made once per model.

    The scan runs the model 3 times per channel group; layer by layer in eager mode a
    300-layer detector took minutes per pass (ppocr_cls ran out of its 600 s). The graph
    reads the layers' variables, so weights set between calls are seen.
    """
    fn = _FORWARD.get(model)
    if fn is None:
        import tensorflow as tf

        fn = tf.function(lambda x: model(x, training=False), reduce_retracing=True)
        _FORWARD[model] = fn
    return fn


def _flat_outputs(model: Any, inputs: Any) -> np.ndarray:
    out = _forward(model)(inputs)
    out = out if isinstance(out, list | tuple) else [out]
    return np.concatenate([np.asarray(o).reshape(len(o), -1) for o in out], axis=1)


def _output_change(planner: Planner, counts: list[int], inputs: Any, ref: np.ndarray) -> float:
    """Relative squared output error with the given channels removed (by masking)."""
    model = planner.cg.model
    changed = masked_weights(planner.cg, planner.kept(counts))
    saved = {name: model.get_layer(name).get_weights() for name in changed}
    try:
        for name, weights in changed.items():
            model.get_layer(name).set_weights(weights)
        out = _flat_outputs(model, inputs)
    finally:
        for name, weights in saved.items():
            model.get_layer(name).set_weights(weights)
    return float(((out - ref) ** 2).sum() / max(float((ref ** 2).sum()), 1e-12))


def _cheapest_step(planner: Planner, counts: list[int], curves: list) -> tuple[int, int]:
    """The group whose next step costs least output change per MAC saved, and the new MACs."""
    cost = planner.cost(counts)
    best, best_score, best_cost = -1, np.inf, cost
    for g, count in enumerate(counts):
        new = planner.next_count(g, count)
        if new <= count:
            continue
        trial_cost = planner.cost(counts[:g] + [new] + counts[g + 1:])
        score = (curves[g](new) - curves[g](count) + 1e-9) / max(cost - trial_cost, 1)
        if score < best_score:
            best, best_score, best_cost = g, score, trial_cost
    if best < 0:  # no group can lose another step of channels
        raise _unreachable(planner, counts)
    return best, best_cost


def sensitivity_counts(planner: Planner, target: float, sample_inputs: Any) -> list[int]:
    """Greedy: remove the step of channels costing least output change per MAC saved."""
    curves = sensitivity_scan(planner, sample_inputs)
    counts = [0] * len(planner.orders)
    cost, last = planner.cost(counts), None
    while cost > target:
        group, cost = _cheapest_step(planner, counts, curves)
        last = (group, counts[group])
        counts[group] = planner.next_count(group, counts[group])
    if last is not None:
        _fit_last(planner, counts, last[0], last[1], target)
    return counts


def sensitivity_or_uniform(planner: Planner, target: float, sample_inputs: Any) -> list[int]:
    """The sensitivity plan, unless the uniform plan changes the outputs less.

    The greedy adds up per-group sensitivities measured alone; groups interact, so both
    plans are measured together on the samples and the better one wins.
    """
    model = planner.cg.model
    reference = _flat_outputs(model, sample_inputs)
    try:
        plans = [sensitivity_counts(planner, target, sample_inputs)]
    except PruneError:  # the greedy can stall (channel multiples) short of what one ratio
        plans = []      # for every group reaches: the uniform plan then decides alone
    plans.append(uniform_counts(planner, target))
    errors = [_output_change(planner, counts, sample_inputs, reference) for counts in plans]
    return plans[int(np.argmin(errors))]


def recipe_counts(planner: Planner, recipe: Mapping[str, float]) -> list[int]:
    """Channel ratios from ``{layer-name regex: ratio}``; the first rule matching a source."""
    counts = []
    for g, group in enumerate(planner.cg.groups):
        ratio = next((r for pattern, r in recipe.items()
                      if any(re.fullmatch(pattern, s) for s in group.sources)), 0.0)
        check_ratio(ratio, allow_zero=True)
        count = min(planner.limits[g], round(ratio * group.size))
        counts.append(planner.snap(g, count, nearest=True))
    return counts


def check_config(config: PruneConfig) -> None:
    """Refuse knob values that cannot plan anything."""
    if not isinstance(config.channel_multiple, int) or config.channel_multiple < 1:
        raise ConfigError(f"channel multiple must be a whole number >= 1, got "
                          f"{config.channel_multiple!r}")
    if not isinstance(config.scan_macs, int | float) or config.scan_macs <= 0:
        raise ConfigError(f"scan MAC budget must be a number > 0, got {config.scan_macs!r}")
    if not 0 < config.max_group_ratio < 1:
        raise ConfigError(f"max group ratio must be between 0 and 1, got "
                          f"{config.max_group_ratio!r}")


def check_ratio(ratio: float, allow_zero: bool = False) -> None:
    """Refuse a ratio outside (0, 1) (or [0, 1) for recipe entries)."""
    ok = isinstance(ratio, int | float) and (0 <= ratio < 1 if allow_zero else 0 < ratio < 1)
    if not ok:
        raise ConfigError(f"pruning ratio must be between 0 and 1 (exclusive), got {ratio!r}")
