"""Arm Ethos-U through the real Vela compiler (offline, in a temporary directory)."""

from __future__ import annotations

import re
import subprocess

import pytest
from test_delegates_models import models

from edgeopt.delegates import place, place_for_device
from edgeopt.delegates.ethosu import place_with_vela
from edgeopt.delegates.vela import run_vela, system_for, vela_command
from edgeopt.errors import DeviceError
from edgeopt.tflite_reader import read_tflite


@pytest.mark.parametrize("accelerator, system, memory", [
    ("ethos-u55-256", "Ethos_U55_High_End_Embedded", "Shared_Sram"),
    ("ethos-u65-512", "Ethos_U65_High_End", "Dedicated_Sram"),
])
def test_int8_cnn_compiles_onto_the_npu(accelerator, system, memory):
    placement = place_for_device(models()["cnn_int8"], accelerator)
    assert placement.fully_delegated and len(placement.partitions) == 1
    figures = placement.compiler
    assert (figures["system_config"], figures["memory_mode"]) == (system, memory)
    assert figures["sram_kib"] > 0 and figures["cycles"] > 0 and figures["inference_ms"] > 0
    assert figures["npu_subgraphs"] == 1 and figures["macs"] > 0
    compiled = read_tflite(placement.artifact)
    assert [op.custom_code for op in compiled.ops] == ["ethos-u"]


def test_float_island_stays_on_the_cpu_with_velas_reasons():
    placement = place(models()["island_int8"], "ethos-u", accelerator="ethos-u55-256")
    cpu = {op.op: op for op in placement.fallbacks()}
    assert {"CUMSUM", "DEQUANTIZE", "QUANTIZE"} <= set(cpu)
    assert cpu["CUMSUM"].reason == "Vela: Unsupported opType"
    assert "Float32" in cpu["QUANTIZE"].reason and "quantize" in cpu["QUANTIZE"].rewrite
    assert len(placement.partitions) == placement.compiler["npu_subgraphs"] == 2
    assert {c.direction for c in placement.crossings} == {"cpu->npu", "npu->cpu"}


def test_cpu_count_agrees_with_velas_own_summary():
    data = models()["island_int8"]
    run = run_vela(data, "ethos-u65-512", *system_for("ethos-u65-512"))
    velas_count = int(re.search(r"CPU operators = (\d+)", run.stdout).group(1))
    assert place(data, "ethos-u", accelerator="ethos-u65-512").cpu_ops == velas_count


def test_npu_ops_are_in_velas_supported_ops_report(tmp_path):
    subprocess.run([*vela_command(), "--supported-ops-report"], cwd=tmp_path, check=True,
                   capture_output=True)
    report = (tmp_path / "SUPPORTED_OPS.md").read_text()
    section = report.split("## Ethos-U55 and Ethos-U65 TFLite Summary Table")[1].split("\n## ")[0]
    listed = set(re.findall(r"^\| ([A-Z0-9_]+) \|", section, flags=re.M))
    for name in ("cnn_int8", "island_int8"):
        placement = place(models()[name], "ethos-u")
        npu_types = {op.op for op in placement.ops if op.unit == "npu"}
        assert npu_types <= listed, npu_types - listed


def test_vela_failure_is_a_cpu_report_not_a_crash(monkeypatch):
    def broken(*args, **kwargs):
        raise DeviceError("Vela could not compile the model: out of SRAM")

    monkeypatch.setattr("edgeopt.delegates.ethosu.run_vela", broken)
    placement = place_with_vela(models()["cnn_int8"], "ethos-u55-256")
    assert placement.cpu_ops == len(placement.ops) and placement.artifact is None
    assert "out of SRAM" in placement.ops[0].reason and placement.compiler["error"]


def test_unknown_accelerator_and_missing_vela(monkeypatch):
    with pytest.raises(DeviceError, match="unknown Ethos-U accelerator"):
        place(models()["cnn_int8"], "ethos-u", accelerator="ethos-n78")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(DeviceError, match="pip install ethos-u-vela"):
        vela_command()


def test_a_graph_alone_cannot_go_through_vela():
    from edgeopt.errors import ConfigError

    with pytest.raises(ConfigError, match="bytes or path"):
        place(read_tflite(models()["cnn_int8"]), "ethos-u")
