"""Per-layer precision from the scheme, a recipe and what the writers can express.

    >>> choices, warnings = assign_precisions(graph, QuantConfig(scheme="w4a8"))  # doctest: +SKIP
    >>> choices["conv1"].precision                                                # doctest: +SKIP
    <Precision.INT4: 'int4'>
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.calibration.config import Mode, Precision, QuantConfig, WeightMethod, traits
from edgeopt.calibration.graphspec import CalibGraph, Layer
from edgeopt.calibration.recipes import Recipe

ORDER = (Precision.INT4, Precision.INT8, Precision.INT16, Precision.FP16, Precision.FLOAT)


@dataclass(frozen=True)
class LayerChoice:
    precision: Precision
    block_size: int | None
    requested_method: WeightMethod | None   # None: the default for the precision
    reason: str

    @property
    def weight_method(self) -> WeightMethod:
        return self.method_for(self.precision)

    def method_for(self, precision: Precision) -> WeightMethod:
        """GPTQ for int4 and RTN for int8 unless a flag or a recipe rule said otherwise."""
        if self.requested_method is not None:
            return self.requested_method
        return WeightMethod.GPTQ if precision == Precision.INT4 else WeightMethod.RTN


def higher(precision: Precision, int16: bool = False) -> Precision | None:
    """The next wider precision, or None after float; int16 activations only if `int16`."""
    order = ORDER if int16 else tuple(p for p in ORDER if p != Precision.INT16)
    if precision not in order:
        return Precision.FP16
    index = order.index(precision)
    return order[index + 1] if index + 1 < len(order) else None


def assign_precisions(graph: CalibGraph, config: QuantConfig):
    """(choices by layer name, warnings)."""
    recipe: Recipe | None = config.recipe
    scheme = traits(config.scheme)
    used_rules: set[int] = set()
    demoted: list[str] = []
    blockwise_ignored: list[str] = []
    choices = {}
    for layer in graph.layers:
        precision = scheme.int4_layers if layer.int4_capable else scheme.other_layers
        block, method, reason = config.block_size, config.weight_method, f"scheme {config.scheme}"
        rule = recipe.rule_for(layer.name, layer.kind) if recipe else None
        if rule is not None:
            used_rules.add(recipe.rules.index(rule))
            precision, reason = rule.precision, f"recipe rule {recipe.rules.index(rule) + 1}"
            block = rule.block_size or block
            method = rule.weight_method or method
        if block is not None and scheme.mode != Mode.WEIGHT_ONLY:
            blockwise_ignored.append(layer.name)
            block = None
        if precision == Precision.INT4 and not layer.int4_capable:
            precision, reason = Precision.INT8, f"{reason}; int4 needs a conv or dense layer"
            demoted.append(layer.name)
        choices[layer.name] = LayerChoice(precision, block, method, reason)
    warnings = _warnings(graph, recipe, used_rules, demoted)
    if blockwise_ignored:
        warnings.append(f"blockwise int4 is written only for weight-only schemes (w4a16, "
                        f"w4afp32); {config.scheme} keeps per-channel scales")
    return choices, warnings


def _warnings(graph: CalibGraph, recipe: Recipe | None, used: set[int],
              demoted: list[str]) -> list[str]:
    warnings = []
    if recipe is not None:
        example = graph.layers[0].name if graph.layers else "none"
        for index, rule in enumerate(recipe.rules):
            if index not in used and not any(rule.applies(la.name, la.kind)
                                             for la in graph.layers):
                warnings.append(f"recipe {recipe.name} rule {index + 1} (match "
                                f"{rule.match!r}) matches no layer; layers are named by "
                                f"their output tensor, e.g. '{example}'")
    if demoted:
        warnings.append(f"{len(demoted)} depthwise/grouped layer(s) kept int8 weights: the "
                        f"writers store int4 only for conv and dense layers ('{demoted[0]}'"
                        + (", ...)" if len(demoted) > 1 else ")"))
    return warnings


def weight_layers(graph: CalibGraph, choices: dict[str, LayerChoice]) -> list[Layer]:
    return [layer for layer in graph.layers if choices[layer.name].precision in
            (Precision.INT4, Precision.INT8, Precision.INT16)]
