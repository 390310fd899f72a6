"""Close the loop on fallbacks: apply the rewrites a placement asks for, and keep them only
when they pay.

`improve` reads the ops the device's delegate leaves on the CPU, asks the catalogue
(edgeopt.rewrites) for the rewrites that answer them, checks each one on the float graph
in LiteRT (its own numeric cost), re-quantizes the rewritten graph, places it again and
validates it against the source. The rewritten artifact is kept when the delegate runs a
larger share of the ops (or the same share in fewer partitions) and the accuracy holds:
the budget when one is given, else within REWRITE_TOLERANCE_DB of the output SQNR the
unrewritten build reached. Either way the record says what was tried and why.

The step places and validates the artifact that ships (after `finish`, the build's own
last touches: metadata), so the build takes its placement and validation as they are
instead of placing (for Ethos-U: compiling with Vela) and validating it a second time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeopt import rewrites
from edgeopt.delegates import place_for_device
from edgeopt.delegates.ethosu import VELA_RULE
from edgeopt.errors import EdgeoptError
from edgeopt.validate import Validation

# A rewrite whose float graph departs further than this from the original is dropped.
FLOAT_RTOL = 1e-3
# Without a budget, the rewritten artifact may lose at most this much worst-output SQNR
# (a rewrite adds requantization points; a drop beyond rounding noise is not kept).
REWRITE_TOLERANCE_DB = 1.0
# Vela's reason for an op type it has no kernel for: the catalogue's "op_in_table" case.
VELA_NO_KERNEL = "Unsupported opType"


@dataclass(frozen=True)
class Attempt:
    """What `improve` did: the record for the manifest and report (None: nothing to
    rewrite), and the artifact to ship with its placement and, when the step ran it, its
    validation on the build's held-out samples."""

    record: dict[str, Any] | None
    artifact: Any  # the one to ship: the rewritten rebuild when kept, else the original
    placement: Any
    validation: Validation | None = None


def _unchanged(artifact):
    return artifact


def delegation(placement) -> dict[str, Any]:
    ops = len(placement.ops)
    return {"delegated_ops": placement.delegated_ops, "ops": ops,
            "share": round(placement.delegated_ops / ops, 4) if ops else 0.0,
            "partitions": len(placement.partitions)}


def improve(artifact, profile, float_outputs: Callable[[bytes], list],
            validate: Callable[[Any], Validation], budget: float | None,
            progress: Callable[[str], None],
            finish: Callable[[Any], Any] = _unchanged) -> Attempt | None:
    """The better of the artifact and its rewritten rebuild, placed (None: the step does not
    apply to this artifact; a record of None: nothing to rewrite).

    `float_outputs` runs a float graph of the artifact's layout on probe samples,
    `validate` an artifact against the source on the held-out samples, `finish` turns a
    built artifact into the one that ships (each candidate is placed and validated so)."""
    if artifact.format != "tflite" or artifact.remake is None or artifact.float_model is None:
        return None
    original = finish(artifact)
    placement = place_for_device(original.content, profile)
    names = rewrites.wanted((op.op, _rule(op)) for op in placement.fallbacks())
    if not names:
        return Attempt(None, original, placement)
    before = delegation(placement)
    progress(f"rewriting for {profile.delegate}: {', '.join(names)}")
    checked, costs = _checked_rewrites(artifact.float_model, names, float_outputs)
    record: dict[str, Any] = {"tried": names, "kept": False, "before": before, "after": None,
                              "applied": costs}
    if not checked:
        record["reason"] = "no rewrite both fits the graph and keeps its values"
        return Attempt(record, original, placement)
    rewritten, _ = rewrites.apply(artifact.float_model, checked)
    try:
        candidate = finish(artifact.remake(rewritten))
        new_placement = place_for_device(candidate.content, profile)
        new_validation = validate(candidate)
    except EdgeoptError as exc:  # the rewritten graph did not quantize or run: keep the old
        record["reason"] = f"the rewritten model did not build: {exc}"
        return Attempt(record, original, placement)
    validation = validate(original)  # the original, on the same held-out samples
    after = delegation(new_placement)
    record["after"] = after
    record["accuracy"] = {"before_worst_sqnr_db": _db(validation.worst_sqnr_db),
                          "after_worst_sqnr_db": _db(new_validation.worst_sqnr_db)}
    verdict = _float_verdict(original, candidate) or \
        _verdict(before, after, validation, new_validation, budget)
    record["reason"] = verdict or "more of the model runs on the delegate"
    record["kept"] = not verdict
    if verdict:
        return Attempt(record, original, placement, validation)
    return Attempt(record, candidate, new_placement, new_validation)


def _rule(op) -> str | None:
    """The fallback's rule as the catalogue reads it: every Ethos-U fallback has Vela's
    rule, and one for an op type Vela has no kernel for (SQUARE, DIV on the U55) is the
    missing kernel a decomposition answers."""
    if op.rule == VELA_RULE and VELA_NO_KERNEL in op.reason:
        return "op_in_table"
    return op.rule


def _checked_rewrites(model: bytes, names: list[str], float_outputs) -> tuple[list[str], list]:
    """The rewrites that apply and keep the float graph's values, each measured alone."""
    reference = None  # the float graph runs only once a rewrite fits it
    kept, costs = [], []
    for name in names:
        content, applied = rewrites.apply(model, [name])
        found = {a.name: a for a in applied}
        if name not in found:  # only the shapes an op rewrite brings along were fixed
            continue
        reference = float_outputs(model) if reference is None else reference
        error = _relative_error(reference, float_outputs(content))
        ok = error <= FLOAT_RTOL
        costs.append({"name": name, "changed": found[name].count,
                      "message": found[name].message,
                      "float_max_rel_error": float(f"{error:.3g}"), "kept": ok,
                      **({"static_shapes_fixed": found["static_shapes"].count}
                         if name != "static_shapes" and "static_shapes" in found else {})})
        if ok:
            kept.append(name)
    return kept, costs


def _relative_error(reference: list, outputs: list) -> float:
    """The worst output's max |a − b| over its max |a|; inf when a shape differs or a
    NaN/inf appears (or goes) anywhere (a NaN would else compare as no error at all)."""
    worst = 0.0
    for a, b in zip(reference, outputs):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape:
            return float("inf")
        odd = ~np.isfinite(a) | ~np.isfinite(b)
        if np.any(odd) and not np.array_equal(a[odd], b[odd], equal_nan=True):
            return float("inf")
        a, b = a[~odd], b[~odd]
        scale = max(float(np.max(np.abs(a))) if a.size else 0.0, 1e-12)
        worst = max(worst, float(np.max(np.abs(a - b))) / scale if a.size else 0.0)
    return worst


def _float_count(artifact) -> int:
    quant = artifact.quant
    return len(quant.float_ops or []) if quant is not None else 0


def _float_verdict(old, new) -> str:
    """A rewrite must not cost the full-integer promise: no op newly left in float."""
    added = _float_count(new) - _float_count(old)
    if added > 0:
        return (f"the rewritten model keeps {added} more op(s) in float (the quantizer has no "
                "int8 rule for an op the rewrite emits)")
    return ""


def _verdict(before: dict, after: dict, old: Validation, new: Validation,
             budget: float | None) -> str:
    """'' when the rewritten artifact is better, else why it was not kept."""
    more = after["share"] > before["share"] or (
        after["share"] >= before["share"] and after["partitions"] < before["partitions"])
    if not more:
        return (f"delegation did not rise ({before['share']:.0%} of ops in "
                f"{before['partitions']} partition(s) before, {after['share']:.0%} in "
                f"{after['partitions']} after)")
    if new.collapsed and not old.collapsed:
        return "an output collapses in the rewritten model"
    if budget is not None and old.metric == "top1_accuracy" and new.delta is not None:
        if -new.delta * 100 > budget + 1e-9:
            return (f"top-1 drops {-new.delta * 100:.2f} points, over the budget of "
                    f"{budget:g}")
        return ""
    floor = old.worst_sqnr_db - REWRITE_TOLERANCE_DB
    if budget is not None and old.worst_sqnr_db >= budget:  # a budget the original met
        floor = min(floor, budget)  # it may allow a larger drop than the tolerance
    if new.worst_sqnr_db < floor:
        return (f"worst output SQNR {new.worst_sqnr_db:.1f} dB, under "
                f"{floor:.1f} dB")
    return ""


def _db(value: float) -> float | None:
    return round(float(value), 2) if np.isfinite(value) else None
