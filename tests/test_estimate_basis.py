"""No estimate without its basis: the manifest, the terminal summary and the report say what
a latency rests on, and print it to the precision its interval allows."""

from __future__ import annotations

import json

from edgeopt.devices.profile import load_profile
from edgeopt.devices.render import figure_digits, latency_text
from edgeopt.pipeline import BuildResult
from edgeopt.summary import build_summary


def test_digits_follow_the_interval():
    assert figure_digits(2.7, None) == 1            # a prior nobody checked: one figure
    assert figure_digits(2.7, [1.0, 5.0]) == 1      # a range wider than the value
    assert figure_digits(2.7, [2.3, 3.2]) == 2      # a third of it
    assert figure_digits(2.7, [2.69, 2.71]) == 3


def test_latency_text_says_its_basis():
    assert latency_text(2.6912, None, "prior: unvalidated") == "~3 ms (prior: unvalidated)"
    text = latency_text(2.6912, [2.1, 3.4], "fitted: 21 rows, CV median error 14%")
    assert text == "2.7 ms (p10-p90 2.1-3.4 ms; fitted: 21 rows, CV median error 14%)"


def test_a_bundle_records_and_prints_the_basis(sample_bundles):
    folder = sample_bundles("plain")
    manifest = json.loads((folder / "manifest.json").read_text())
    estimate = manifest["estimate"]
    profile = load_profile(manifest["device"]["name"])
    assert estimate["basis"] == profile.basis
    assert (estimate["interval_ms"] is None) == (profile.fit is None)
    assert estimate["energy_basis"].startswith("modelled")
    summary = build_summary(BuildResult(output=folder, manifest=manifest))
    assert profile.basis in summary
    report = (folder / "report.html").read_text()
    assert profile.basis in report and "modelled" in report


def test_the_device_comparison_gives_every_figure_its_basis(sample_bundles):
    folder = sample_bundles("onnx")
    manifest = json.loads((folder / "manifest.json").read_text())
    rows = [r for r in manifest["comparison"] if r["latency_ms"] is not None]
    assert rows
    summary = build_summary(BuildResult(output=folder, manifest=manifest))
    report = (folder / "report.html").read_text()
    for r in rows:
        profile = load_profile(r["device"])
        assert r["basis"] == profile.basis
        short = "prior, unvalidated" if profile.fit is None else "fit "
        line = next(x for x in summary.splitlines() if x.strip().startswith(r["device"]))
        assert short in line, line
        assert latency_text(r["latency_ms"], r.get("interval_ms"), r["basis"]) in report
