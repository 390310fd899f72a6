"""Every `benchmarks/results/*.json` says which package versions made it."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

import pytest

from conftest import ROOT

RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*.json"))


def test_write_results_records_the_package_versions(tmp_path):
    """In a fresh interpreter, as the scripts run: and without importing TensorFlow."""
    code = "\n".join([
        "import json, pathlib, sys",
        "sys.path.insert(0, 'benchmarks')",
        "import _common",
        f"_common.write_results('probe', {{'x': 1}}, pathlib.Path({str(tmp_path)!r}))",
        "print(json.dumps([m for m in ('tensorflow', 'onnxruntime', 'numpy') "
        "if m in sys.modules]))"])
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
    record = json.loads((tmp_path / "probe.json").read_text())
    versions = record["package_versions"]
    assert versions["onnxruntime"] == version("onnxruntime")
    assert versions["tensorflow"] == version("tensorflow")
    assert {"ai-edge-litert", "ai-edge-quantizer", "onnx", "onnx2tf", "keras", "numpy",
            "ethos-u-vela", "python", "platform"} <= set(versions)
    assert record["x"] == 1 and isinstance(record["machine"]["cpu_int8_flags"], list)


@pytest.mark.parametrize("path", RESULTS, ids=[p.name for p in RESULTS])
def test_every_result_file_says_what_made_it(path):
    record = json.loads(path.read_text())
    versions = record["package_versions"]
    if versions is None:  # measured before versions were recorded: said so, not guessed
        assert "predate" in record["package_versions_note"]
    else:
        assert versions["onnxruntime"] and versions["tensorflow"] and versions["python"]
