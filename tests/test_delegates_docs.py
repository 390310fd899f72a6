"""SUPPORTED_OPS.md is generated from the rules and must be current; the rule tables hold
what the vendors publish; importing the package stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

from edgeopt.delegates import docs
from edgeopt.delegates.registry import RULE_MODULES, load_delegate_rules

# coral.ai/docs/edgetpu/models-intro, "Supported operations", as first published (every op
# there is supported by every runtime version). Source of this copy: a stored snapshot of
# the table (dgist-datalab/Datalab_Intern, Edge_TPU/convert_model_for_Edge_TPU.md).
CORAL_TABLE_V1 = (
    "Logistic Relu Relu6 ReluN1To1 Tanh Add Maximum Minimum Mul Sub AveragePool2d "
    "Concatenation Conv2d DepthwiseConv2d FullyConnected L2Normalization MaxPool2d Mean Pad "
    "Reshape ResizeBilinear ResizeNearestNeighbor Slice Softmax SpaceToDepth Split Squeeze "
    "StridedSlice").split()
TFLITE_NAME = {"Relu6": "RELU6", "ReluN1To1": "RELU_N1_TO_1", "AveragePool2d": "AVERAGE_POOL_2D",
               "Conv2d": "CONV_2D", "DepthwiseConv2d": "DEPTHWISE_CONV_2D",
               "L2Normalization": "L2_NORMALIZATION", "MaxPool2d": "MAX_POOL_2D",
               "FullyConnected": "FULLY_CONNECTED", "ResizeBilinear": "RESIZE_BILINEAR",
               "ResizeNearestNeighbor": "RESIZE_NEAREST_NEIGHBOR",
               "SpaceToDepth": "SPACE_TO_DEPTH", "StridedSlice": "STRIDED_SLICE"}


def test_supported_ops_md_is_current():
    assert not docs.is_stale(), "run: python -m edgeopt.delegates.docs"


def test_docs_check_command_exit_status(tmp_path):
    stale = tmp_path / "SUPPORTED_OPS.md"
    stale.write_text("old\n")
    assert docs.is_stale(stale)
    result = subprocess.run([sys.executable, "-m", "edgeopt.delegates.docs", "--check"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", RULE_MODULES)
def test_every_delegate_names_its_sources_and_documents_every_rule(name):
    rules = load_delegate_rules(name)
    assert rules.sources and rules.title and rules.unit
    for rule in rules.specific.values():
        assert rule.constraint and rule.constraint != rule.name, rule.name
    text = docs.render_delegate(rules)
    for op in rules.ops:
        assert f"| {op} |" in text


def test_edgetpu_table_holds_corals_published_ops():
    rules = load_delegate_rules("edgetpu")
    for name in CORAL_TABLE_V1:
        op = TFLITE_NAME.get(name, name.upper())
        assert op in rules.ops, op
        assert rules.ops[op].params.get("min_runtime", 0) == 0, op
    assert rules.partitioning.prefix_only
    assert "HARD_SWISH" not in rules.ops and "DEQUANTIZE" not in rules.ops


def test_importing_the_package_loads_no_framework():
    code = ("import sys, edgeopt.delegates, edgeopt.delegates.docs; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'keras', 'ai_edge_litert', 'ethosu', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120).stdout.strip()
    assert out == "[]"
