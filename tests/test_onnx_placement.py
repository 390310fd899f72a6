"""ONNX placement on onnxruntime's mobile execution providers, and its estimate (issue 15,
item 5): tiny ONNX models built here, onnxruntime's own op tables from the installed wheel,
onnxruntime's quantizer for the QDQ model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_models import OnnxNet, residual_onnx

from edgeopt.delegates.onnx_cost_view import NOT_COSTED, cost_view
from edgeopt.delegates.onnx_eps import helpers_dir, load_ep, read_ops_table
from edgeopt.delegates.onnx_placement import place_onnx, place_onnx_for_device
from edgeopt.delegates.onnx_rules import (
    NodeView,
    data_dtypes,
    fixed_input_shapes,
    in_main_graph,
    input_rank,
    op_in_ep_table,
    outside_qdq_group,
)
from edgeopt.delegates.view import ModelIndex
from edgeopt.devices.estimator import estimate
from edgeopt.devices.profile import load_profile
from edgeopt.onnx_reader import read_onnx


def _fixed(path, batch: int = 1):
    model = onnx.load(path)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = batch
    fixed = path.with_name(path.stem + "_fixed.onnx")
    onnx.save(model, fixed)
    return fixed


@pytest.fixture(scope="module")
def residual(tmp_path_factory):
    """The residual CNN with a dynamic batch, and the same model with batch 1."""
    path = residual_onnx(tmp_path_factory.mktemp("onnx_place") / "residual.onnx")
    return path, _fixed(path)


@pytest.fixture(scope="module")
def residual_qdq(residual):
    """The batch-1 residual CNN quantized by onnxruntime (QDQ, int8)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.batches = iter([{"x": rng.random((1, 3, 16, 16), dtype=np.float32)}
                                 for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    out = residual[1].with_name("residual_qdq.onnx")
    quantize_static(str(residual[1]), str(out), Reader(), activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return out


def _one_node(op_type: str, shape, dtype=TensorProto.FLOAT, domain: str = "", **attrs):
    node = helper.make_node(op_type, ["x"], ["y"], domain=domain or None, **attrs)
    graph = helper.make_graph([node], "one", [helper.make_tensor_value_info("x", dtype, shape)],
                              [helper.make_tensor_value_info("y", dtype, shape)])
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def _view(model: bytes, ep: str, position: int = 0) -> NodeView:
    graph = read_onnx(model)
    return NodeView(ModelIndex.build(graph), graph.ops[position], load_ep(ep))


def test_nnapi_and_coreml_tables_come_from_the_installed_onnxruntime():
    table = read_ops_table(helpers_dir() / "nnapi_supported_ops.md")
    assert load_ep("nnapi").ops == table and "ai.onnx:Conv" in table
    assert "Only 2D Conv" in load_ep("nnapi").caveat(None, "Conv")
    assert load_ep("coreml-mlprogram").max_rank == 5 and load_ep("coreml-mlprogram").ops


def test_op_in_ep_table():
    assert op_in_ep_table(_view(_one_node("Relu", [1, 4]), "nnapi"))[0]
    ok, detail = op_in_ep_table(_view(_one_node("HardSigmoid", [1, 4]), "nnapi"))
    assert not ok and detail == "ai.onnx:HardSigmoid"
    assert op_in_ep_table(_view(_one_node("HardSigmoid", [1, 4]), "qnn"))[0]


def test_fixed_input_shapes():
    assert fixed_input_shapes(_view(_one_node("Relu", [1, 4]), "nnapi"))[0]
    ok, detail = fixed_input_shapes(_view(_one_node("Relu", ["N", 4]), "nnapi"))
    assert not ok and "[-1, 4]" in detail
    assert fixed_input_shapes(_view(_one_node("Relu", ["N", 4]), "xnnpack"))[0]


def test_input_rank():
    assert input_rank(_view(_one_node("Relu", [1, 2, 2, 2, 2]), "coreml-mlprogram"))[0]
    ok, detail = input_rank(_view(_one_node("Relu", [1, 2, 2, 2, 2, 2]), "coreml-mlprogram"))
    assert not ok and "6-D" in detail


def test_data_dtypes():
    assert data_dtypes(_view(_one_node("Relu", [1, 4]), "nnapi"))[0]
    ok, detail = data_dtypes(_view(_one_node("Abs", [1, 4], TensorProto.DOUBLE), "nnapi"))
    assert not ok and detail.startswith("float64")


def test_in_main_graph():
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 4])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 4])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                      helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    graph = read_onnx(model.SerializeToString())
    body = next(op for op in graph.ops if op.subgraph > 0)
    assert in_main_graph(NodeView(ModelIndex.build(graph), graph.ops[0], load_ep("qnn")))[0]
    ok, _ = in_main_graph(NodeView(ModelIndex.build(graph), body, load_ep("qnn")))
    assert not ok


def test_outside_qdq_group(residual_qdq):
    graph = read_onnx(residual_qdq)
    index = ModelIndex.build(graph)
    dq = next(op for op in graph.ops if op.op == "DequantizeLinear")
    conv = next(op for op in graph.ops if op.op == "Conv")
    assert not outside_qdq_group(NodeView(index, dq, load_ep("xnnpack")))[0]
    assert not outside_qdq_group(NodeView(index, conv, load_ep("xnnpack")))[0]
    assert outside_qdq_group(NodeView(index, conv, load_ep("nnapi")))[0]


def test_dynamic_batch_stays_on_the_cpu_ep_and_says_what_fixing_it_gives(residual):
    placement = place_onnx(residual[0], "qnn")
    assert placement.delegated_ops == 0 and not placement.partitions
    assert {op.rule for op in placement.ops} == {"fixed_input_shapes"}
    fixed = place_onnx(residual[1], "qnn")
    assert fixed.fully_delegated and len(fixed.partitions) == 1
    note = next(n for n in placement.notes if "make_dynamic_shape_fixed" in n)
    assert f"{len(fixed.ops)}/{len(fixed.ops)} nodes" in note


def test_unsupported_op_splits_the_partitions(tmp_path):
    net = OnnxNet(3)
    x = net.node("Relu", [net.conv("x", 3, 8)])
    x = net.node("HardSigmoid", [x])           # not in onnxruntime's NNAPI table
    x = net.node("Relu", [net.conv(x, 8, 8)])
    out = net.node("Flatten", [net.node("GlobalAveragePool", [x])], axis=1)
    path = net.save(tmp_path / "split.onnx", [1, 3, 8, 8], out, 8)
    placement = place_onnx(path, "nnapi")
    cpu = placement.fallbacks()
    assert [op.op for op in cpu] == ["HardSigmoid"] and cpu[0].rule == "op_in_ep_table"
    assert len(placement.partitions) == 2
    assert any("usability rule" in n and ": MAYBE" in n for n in placement.notes)
    assert place_onnx(path, "qnn").fully_delegated  # QNN builds HardSigmoid


def test_devices_map_to_their_execution_providers(residual):
    fixed = residual[1]
    qnn = place_onnx_for_device(fixed, "snapdragon-npu")
    assert qnn.execution_provider == "QNNExecutionProvider" and qnn.device == "snapdragon-npu"
    assert place_onnx_for_device(fixed, "host-cpu").execution_provider == \
        "XnnpackExecutionProvider"
    coral = place_onnx_for_device(fixed, "coral-usb")
    assert coral.execution_provider == "CPUExecutionProvider" and coral.delegated_ops == 0
    assert "no Edge TPU execution provider" in coral.ops[0].reason
    # The Tensor TPU computes quantized graphs: float nodes stay on the CPU EP.
    pixel = place_onnx_for_device(fixed, "pixel-npu")
    assert pixel.delegated_ops == 0 and pixel.ops[0].rule == "data_dtypes"


def test_qdq_model_runs_quantized_on_the_npus(residual_qdq):
    for device in ("snapdragon-npu", "pixel-npu"):
        placement = place_onnx_for_device(residual_qdq, device)
        assert placement.fully_delegated, placement.top_reasons()
        conv = next(op for op in placement.ops if op.op == "Conv")
        assert conv.precision == "uint8"


def test_cost_view_folds_bn_activations_and_qdq(residual, residual_qdq):
    view = cost_view(read_onnx(residual[1]))
    costed = [op.op for op in view.ops if op.subgraph != NOT_COSTED]
    assert "BatchNormalization" not in costed and costed.count("DEPTHWISE_CONV_2D") == 1
    assert "FULLY_CONNECTED" in costed
    qdq = cost_view(read_onnx(residual_qdq))
    convs = [op for op in qdq.ops if op.subgraph == 0 and "CONV" in op.op]
    assert all(qdq.tensors[op.inputs[0]].dtype == "uint8" for op in convs)
    assert all(qdq.tensors[op.inputs[1]].dtype == "int8" for op in convs)


def test_estimate_of_an_onnx_model_has_its_basis_and_rows(residual, residual_qdq):
    profile = load_profile("snapdragon-npu")
    float_est = estimate(read_onnx(residual[1]), profile)
    int8_est = estimate(read_onnx(residual_qdq), profile)
    assert float_est.precision == "float16" and int8_est.precision == "int8"
    assert int8_est.latency_s > 0 and int8_est.manifest_json()["basis"] == profile.basis
    assert {row.op for row in int8_est.ops} >= {"Conv", "Gemm"}  # ONNX names, not builtins
    assert all(row.unit == "npu" for row in int8_est.ops)
    cpu = estimate(read_onnx(residual[0]), profile)  # dynamic batch: the CPU EP
    assert all(row.unit == "cpu" and row.dtype == "float32" for row in cpu.ops)


def test_cpu_ep_estimate_on_an_accelerator_profile_says_prior(residual):
    profile = load_profile("coral-usb")  # fitted to Edge TPU rows; no EP runs .onnx there
    est = estimate(read_onnx(residual[1]), profile)
    assert profile.fit is not None and est.basis == "prior: unvalidated"
    assert est.interval_s is None and any("CPU EP" in n for n in est.notes)


def test_nodes_folded_at_load_go_with_their_readers():
    """A Constant feeding a delegated Mul joins its partition; one feeding a node the EP
    lacks stays with it on the CPU EP; neither splits the partitions."""
    from onnx import numpy_helper

    def const(name):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
            np.ones((1, 4), np.float32), name + "_v"))

    nodes = [const("c1"), helper.make_node("Mul", ["x", "c1"], ["m"]), const("c2"),
             helper.make_node("HardSigmoid", ["m"], ["h"]),
             helper.make_node("Add", ["h", "c2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    placement = place_onnx(model.SerializeToString(), "nnapi")
    units = [op.unit for op in placement.ops]
    assert units == ["nnapi", "nnapi", "nnapi", "cpu", "nnapi"]
    assert placement.partitions == ((0, 1), (2, 4))
    assert placement.top_reasons(1)[0][0].startswith("ai.onnx:HardSigmoid")
    assert any("become initializers" in n for n in placement.notes)


def test_dynamic_inputs_are_costed_at_the_build_shapes(residual):
    from edgeopt.delegates.onnx_shapes import dynamic_inputs, with_fixed_inputs
    from edgeopt.devices.estimator import estimate_onnx_model

    content = residual[0].read_bytes()
    assert dynamic_inputs(content) == ["x"]
    assert read_onnx(with_fixed_inputs(content, {"x": (-1, 3, 16, 16)})).tensors[
        read_onnx(content).inputs[0]].shape_signature == (1, 3, 16, 16)
    profile = load_profile("host-cpu")
    one = estimate_onnx_model(content, profile, None, {"x": (1, 3, 16, 16)})
    four = estimate_onnx_model(content, profile, None, {"x": (4, 3, 16, 16)})
    assert sum(r.compute_s for r in four.ops) > 3 * sum(r.compute_s for r in one.ops)
    assert any("x [4, 3, 16, 16]" in n for n in four.notes)


def test_cpu_profile_costs_cpu_ep_nodes_as_optimized_cpu_kernels(residual_qdq):
    graph = read_onnx(residual_qdq)
    placement = place_onnx_for_device(graph, "host-cpu")  # XNNPACK leaves QDQ to the CPU EP
    assert placement.delegated_ops == 0
    est = estimate(graph, load_profile("host-cpu"), placement)
    assert {row.unit for row in est.ops} == {"xnnpack"}
    assert any("CPU EP are costed" in n for n in est.notes)
