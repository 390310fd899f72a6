"""mypy on the stage APIs, the manifest and the atomic writer (scope: pyproject [tool.mypy])."""

from __future__ import annotations

import tomllib

from typecheck import run_mypy

from conftest import ROOT


def test_the_stage_apis_type_check(tmp_path):
    proc = run_mypy(tmp_path / "mypy-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout


def test_the_scope_covers_every_stage_package_and_the_contracts():
    modules = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["modules"]
    for package in ("converters", "calibration", "compression", "delegates", "devices"):
        assert any(m.startswith(f"edgeopt.{package}") for m in modules), package
    assert {"edgeopt.atomic", "edgeopt.manifest", "typing_contracts"} <= set(modules)
