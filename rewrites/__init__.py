"""The rewrite catalogue: semantics-preserving graph rewrites of a float `.tflite` that move
ops a delegate lacks onto ops it has, or fix the shapes it needs fixed.

Each rewrite is a module whose docstring is what the user reads; op rewrites replace one
op (`OPS`) by a short chain of others or fold it into its neighbours (PAD into a
convolution, TRANSPOSE pairs, RESHAPE chains), the model rewrite (`static_shapes`) edits
tensors.
`edgeopt build` asks for the rewrites its placement's fallbacks name, checks each one's
numeric effect in LiteRT, re-quantizes, re-places and keeps them only when delegation
rises and the accuracy holds (edgeopt/rewrite_step.py).

    >>> wanted([("HARD_SWISH", "op_in_table"), ("CONV_2D", "static_shapes")])
    ['hard_swish', 'static_shapes']
    >>> wanted([("PAD", "op_in_table"), ("TRANSPOSE", "after_first_unsupported")])
    ['fold_pad']
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

from edgeopt.rewrites import (
    arithmetic,
    fold_pad,
    hard_swish,
    leaky_relu,
    minimum,
    mirror_pad,
    relu_0_to_1,
    reshape_chains,
    reshapes,
    split_fc,
    static_shapes,
    transposes,
)
from edgeopt.rewrites.edit import Edit
from edgeopt.tflite_edit import opcode_name, pack, unpack

OP_REWRITES: dict[str, ModuleType] = {
    "hard_swish": hard_swish, "relu_0_to_1": relu_0_to_1, "leaky_relu": leaky_relu,
    "arithmetic": arithmetic, "reshapes": reshapes, "mirror_pad": mirror_pad,
    "minimum": minimum, "split_fc": split_fc, "fold_pad": fold_pad, "transposes": transposes,
    "reshape_chains": reshape_chains,  # after reshapes and transposes: they write RESHAPEs
}
CATALOGUE = (*OP_REWRITES, "static_shapes")
# The fallback reasons an op rewrite answers: the delegate has no kernel for the op.
OP_RULES = frozenset({"op_in_table", "feature_level"})
# A folding rewrite (RULES = "any") removes its op, which answers any reason it was refused
# for, except these: they follow from another op's fallback, not from the op itself.
CONSEQUENCES = frozenset({"after_first_unsupported", "partition_dropped"})


@dataclass(frozen=True)
class Applied:
    """One rewrite applied: how many ops or tensors it changed, and what it does."""

    name: str
    count: int
    message: str


def message(name: str) -> str:
    module = static_shapes if name == "static_shapes" else OP_REWRITES[name]
    return " ".join((module.__doc__ or "").split())


def wanted(fallbacks: Iterable[tuple[str, str | None]]) -> list[str]:
    """The rewrites that answer these (op, rule) fallbacks, in catalogue order."""
    names = set()
    for op, rule in fallbacks:
        if rule == "static_shapes":
            names.add("static_shapes")
        else:
            names.update(n for n, m in OP_REWRITES.items()
                         if op in m.OPS and _answers(getattr(m, "RULES", OP_RULES), rule))
    return [n for n in CATALOGUE if n in names]


def _answers(rules, rule: str | None) -> bool:
    if rules == "any":
        return rule is not None and rule not in CONSEQUENCES
    return rule in rules


def apply(content: bytes, names: Iterable[str]) -> tuple[bytes, list[Applied]]:
    """The model with the named rewrites applied wherever they fit (unchanged: no Applied).
    Op rewrites bring `static_shapes` along (listed in the Applied when it fixed any)."""
    model = unpack(content)
    if model is None:
        return content, []
    applied = []
    names = list(dict.fromkeys(names))
    if "static_shapes" not in names and any(n in OP_REWRITES for n in names):
        # every op rewrite needs fixed shapes (a RESHAPE's target, a slice's size): a model
        # whose input is fixed but whose tensors the converter left "dynamic" (a −1 batch)
        # gets them fixed first, else no op rewrite fits it (basic-pitch's 19 EXPAND_DIMS)
        names.append("static_shapes")
    # Shapes first: the tensors op rewrites add copy their source's (then fixed) shape.
    for name in sorted(names, key=lambda n: n != "static_shapes"):
        count = (static_shapes.rewrite_model(model, content) if name == "static_shapes"
                 else _apply_op_rewrite(model, OP_REWRITES[name]))
        if count:
            applied.append(Applied(name, count, message(name)))
    return (pack(model), applied) if applied else (content, [])


def _apply_op_rewrite(model, module: ModuleType) -> int:
    """Rewrite every op of `module.OPS` in the main graph (delegates take only that one);
    from the end backwards, so positions before the rewritten op stay valid."""
    graph = model.subgraphs[0]
    edit = Edit(model, graph)
    count = 0
    for position in range(len(graph.operators or []) - 1, -1, -1):
        op = graph.operators[position]
        if opcode_name(model, op)[0] in module.OPS and module.rewrite(edit, position, op):
            count += 1
    return count
