"""Models no accelerator fully takes: a vendor custom op, TF Select (Flex) ops, control
flow, several subgraphs, string tensors. Every delegate (Vela included) places them with a
reason on the CPU; nothing raises."""

from __future__ import annotations

import pytest
from test_delegates_models import models

from edgeopt.delegates import delegate_names, place

BAD = ("custom_op", "flex_strings", "while_float", "two_signatures")


@pytest.mark.parametrize("delegate", delegate_names())
@pytest.mark.parametrize("name", BAD)
def test_bad_input_is_placed_not_raised(name, delegate):
    placement = place(models()[name], delegate)
    multi_subgraph_delegate = delegate in ("xnnpack", "gpu", "nnapi")
    assert placement.cpu_ops >= 1 or (name == "two_signatures" and multi_subgraph_delegate)
    for op in placement.fallbacks():
        assert op.reason, f"{delegate}: op #{op.index} {op.op} on the CPU without a reason"


@pytest.mark.parametrize("delegate", [d for d in delegate_names() if d != "ethos-u"])
def test_custom_op_reason(delegate):
    op = next(o for o in place(models()["custom_op"], delegate).ops if o.op == "CUSTOM")
    assert op.unit == "cpu" and op.rule == "not_custom"
    assert "MyVendorOp" in op.reason and "MyVendorOp" in op.rewrite


@pytest.mark.parametrize("delegate", [d for d in delegate_names() if d != "ethos-u"])
def test_flex_and_string_reasons(delegate):
    ops = {o.op: o for o in place(models()["flex_strings"], delegate).ops}
    assert ops["CUSTOM"].rule == "not_flex" and "FlexStringToNumber" in ops["CUSTOM"].reason
    assert "SELECT_TF_OPS" in ops["CUSTOM"].rewrite
    assert ops["RESHAPE"].unit == "cpu"
    assert ops["RESHAPE"].rule in ("no_string_tensors", "float_op_in_integer_graph",
                                   "data_dtypes", "precision_dtypes")


def test_string_tensors_have_their_own_reason():
    reshape = next(o for o in place(models()["flex_strings"], "xnnpack").ops
                   if o.op == "RESHAPE")
    assert reshape.rule == "no_string_tensors"


def test_control_flow_stays_on_the_cpu_and_bodies_follow_the_delegate():
    placement = place(models()["while_float"], "xnnpack")
    loop = next(o for o in placement.ops if o.op == "WHILE")
    assert loop.unit == "cpu" and "WHILE" in loop.reason
    body = [o for o in placement.ops if o.subgraph > 0 and o.unit == "xnnpack"]
    assert body, "XNNPACK delegates inside control-flow bodies"
    edgetpu = place(models()["while_float"], "edgetpu")
    assert all(o.unit == "cpu" for o in edgetpu.ops)
    assert {o.rule for o in edgetpu.ops if o.subgraph > 0} <= {"in_main_subgraph",
                                                              "no_control_flow",
                                                              "float_op_in_integer_graph"}


def test_second_signature_subgraph_is_reported():
    placement = place(models()["two_signatures"], "qnn-htp", precision="fp16")
    units = {o.subgraph: o.unit for o in placement.ops}
    assert units[0] == "npu" and units[1] == "cpu"
    second = [o for o in placement.ops if o.subgraph == 1]
    assert all(o.rule == "in_main_subgraph" for o in second)
    vela = place(models()["two_signatures"], "ethos-u")
    assert all(o.unit == "cpu" for o in vela.ops if o.subgraph == 1)
