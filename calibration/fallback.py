"""Every artifact is loaded and run by the real runtime before it is kept; a layer the
runtime rejects (LiteRT's prepare-time checks, onnxruntime's kernels) moves up one
precision (int4 -> int8 -> fp16 -> float) and the fallback is recorded. An op without
weights that the runtime blames (an int8 DIV whose divisor rounded to zero) is kept float,
listed with the runtime's words. The check runs every check sample, not one: an invoke
failure can depend on the input.
"""

from __future__ import annotations

from edgeopt.calibration.config import Precision
from edgeopt.calibration.plan import QuantPlan
from edgeopt.calibration.precision import higher
from edgeopt.calibration.runtime_errors import RuntimeRejected
from edgeopt.calibration.session import Session, check_data


def write_checked(session: Session, plan: QuantPlan) -> tuple[bytes, QuantPlan]:
    """Write, load and run the check samples; a layer the runtime rejects moves up a
    precision, an op without weights stays float."""
    sample = check_data(session)
    for _ in range(2 * len(plan.layers) + 2 + len(session.fmt.graph.ops)):
        model = session.fmt.write(plan)
        try:
            session.fmt.check(model, sample)
            return model, plan
        except RuntimeRejected as exc:
            plan = _fall_back(session, plan, exc)
    raise RuntimeRejected("the runtime kept rejecting the model after every fallback")


def _keep_float(session: Session, plan: QuantPlan, exc: RuntimeRejected) -> QuantPlan:
    if exc.tensor in plan.keep_float:
        raise exc
    session.fallbacks.append({"layer": exc.tensor, "from": "int8", "to": "float",
                              "reason": str(exc)})
    session.warnings.append(f"{session.fmt.runtime} rejected op output '{exc.tensor}' in "
                            "int8; it is kept float")
    return plan.keeping_float(exc.tensor, f"{session.fmt.runtime} refused it in int8: {exc}")


def _fall_back(session: Session, plan: QuantPlan, exc: RuntimeRejected) -> QuantPlan:
    if exc.tensor and exc.tensor not in plan.layers and plan.quantize_rest:
        return _keep_float(session, plan, exc)
    names = [exc.tensor] if exc.tensor in plan.layers else [
        n for n, p in plan.layers.items() if p.precision == Precision.INT4]
    if not names:
        raise exc
    changes = {}
    for name in names:
        old = plan.layers[name].precision
        new = higher(old)
        if new is None:
            raise exc
        changes[name] = session.replan(name, new)
        session.fallbacks.append({"layer": name, "from": str(old), "to": str(new),
                                  "reason": str(exc)})
    session.warnings.append(f"{session.fmt.runtime} rejected the model ({exc}); "
                            f"{len(changes)} layer(s) moved to a higher precision")
    return plan.with_layers(changes)
