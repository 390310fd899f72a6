"""Engine logic that needs no runtime: runtime-rejection fallbacks, the search ladder."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from test_calibration_core import fake_graph

from edgeopt.calibration.config import Mode, Precision, QuantConfig
from edgeopt.calibration.engine import Session, build_plan, write_checked
from edgeopt.calibration.precision import assign_precisions
from edgeopt.calibration.runtime_errors import RuntimeRejected
from edgeopt.calibration.search import ladder


class StubFormat:
    """Writes the plan's precisions as text; its 'runtime' refuses int4 for one layer."""

    name, runtime = "stub", "stub runtime"

    def __init__(self, refuse: str | None = "conv_a"):
        rng = np.random.default_rng(0)
        graph = fake_graph()
        weights = {"wa": rng.normal(size=(8, 3, 3, 3)), "wb": rng.normal(size=(3, 1, 3, 3)),
                   "wc": rng.normal(size=(4, 3))}
        self.graph = replace(graph, weights=weights)
        self.refuse = refuse

    def write(self, plan) -> bytes:
        return repr(sorted(plan.precisions().items())).encode()

    def check(self, model: bytes, sample) -> None:
        if self.refuse and f"('{self.refuse}', 'int4')" in model.decode():
            raise RuntimeRejected("Node number 0 (CONV_2D) failed to prepare", self.refuse)


def session_for(fmt, scheme="w4a8") -> Session:
    config = QuantConfig(scheme=scheme)
    choices, _ = assign_precisions(fmt.graph, config)
    session = Session(fmt, config, {"in": np.zeros((2, 4), np.float32)}, choices)
    session.stats = SimpleNamespace(layers=SimpleNamespace(stats={}))
    return session


def test_a_layer_the_runtime_rejects_moves_up_one_precision_and_is_reported():
    session = session_for(StubFormat())
    model, plan = write_checked(session, build_plan(session, {}))
    assert plan.layers["conv_a"].precision == Precision.INT8
    assert plan.layers["head"].precision == Precision.INT4
    assert session.fallbacks == [{"layer": "conv_a", "from": "int4", "to": "int8",
                                  "reason": "Node number 0 (CONV_2D) failed to prepare"}]
    assert any("stub runtime rejected" in w for w in session.warnings)


def test_an_unattributed_rejection_raises_every_int4_layer():
    fmt = StubFormat(refuse=None)
    session = session_for(fmt)
    calls = []

    def check(model, sample):
        calls.append(model)
        if b"int4" in model:
            raise RuntimeRejected("prepare failed")

    fmt.check = check
    _, plan = write_checked(session, build_plan(session, {}))
    assert {p.precision for p in plan.layers.values()} == {Precision.INT8}
    assert len(calls) == 2


def test_a_model_rejected_even_in_float_raises():
    fmt = StubFormat(refuse=None)
    fmt.check = lambda model, sample: (_ for _ in ()).throw(RuntimeRejected("broken"))
    session = session_for(fmt, scheme="float")
    with pytest.raises(RuntimeRejected):
        write_checked(session, build_plan(session, {}))


def test_ladder_raises_sensitive_layers_first_one_step_at_a_time():
    session = session_for(StubFormat(refuse=None))
    plan = build_plan(session, {})
    assert plan.mode == Mode.STATIC
    steps = ladder(plan, {"conv_a": 30.0, "dw_b": 50.0, "head": 10.0})
    assert steps[:2] == [("head", Precision.INT8), ("conv_a", Precision.INT8)]
    assert steps[2] == ("head", Precision.FP16)          # then the int8 -> fp16 round
    assert steps[-1] == ("dw_b", Precision.FLOAT)
    assert len(steps) == 2 + 3 + 3


def test_bisection_tries_round_ends_then_bisects_inside_the_first_that_passes():
    from edgeopt.calibration.search import _bisect, round_ends

    steps = [("a", Precision.INT8), ("b", Precision.INT8), ("c", Precision.INT8),
             ("a", Precision.FP16), ("b", Precision.FP16), ("a", Precision.FLOAT)]
    assert round_ends(steps) == [3, 5, 6]
    passes = {0: False, 1: False, 2: True, 3: True, 5: False, 6: False}
    tried = []

    def attempt(k):
        tried.append(k)
        return passes[k], f"model{k}", f"plan{k}"

    assert _bisect(attempt, round_ends(steps)) == (2, ["model2", "plan2"])
    assert tried[:2] == [0, 3]
    assert _bisect(lambda k: (False, None, None), [3, 5, 6]) == (None, None)


def test_shared_weights_are_rounded_to_nearest_and_shared_biases_left_alone():
    from edgeopt.calibration.graphspec import Layer, LayerKind
    from edgeopt.calibration.layer_stats import LayerInputStats

    fmt = StubFormat(refuse=None)
    rng = np.random.default_rng(1)
    twin = Layer("conv_twin", "CONV_2D", LayerKind.CONV, "in", "conv_twin", "wa", "b", "NHWC")
    first = replace(fmt.graph.layers[0], bias="b")
    fmt.graph = replace(fmt.graph, layers=(first, twin) + fmt.graph.layers[1:],
                        biases={"b": np.zeros(8)})
    session = session_for(fmt)
    stats = LayerInputStats(with_hessian=True)
    stats.update(rng.random((64, 27)))
    session.stats = SimpleNamespace(layers=SimpleNamespace(stats={"conv_a": stats}))
    assert {"wa", "b"} <= session.shared
    plan = session.replan("conv_a", Precision.INT4)
    assert plan.weight_method == "rtn" and plan.bias is None
