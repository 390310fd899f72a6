"""report.html from real builds: every section, the device comparison of `--device all`,
the op-placement view and the latency breakdown; nothing that would reach the network.
(tests/test_report_browser.py renders the sample's report in Chromium.)"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from conftest import ROOT
from edgeopt.devices.render import figure_digits, significant

SECTIONS = ("summary", "comparison", "validation", "conversion", "io", "layers", "placement",
            "latency", "data", "toolchain")


def _build(run_cli, model, out: Path, *flags) -> tuple[dict, str]:
    result = run_cli("build", model, "--calib", "random", "-o", out, "--json", *flags)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), (out / "report.html").read_text()


@pytest.fixture(scope="module")
def compared(tmp_path_factory, tiny_float_tflite):
    """A w8a8 build for the host, estimated on every shipped device."""
    from edgeopt.cli import cli

    out = tmp_path_factory.mktemp("report") / "all"
    code = cli.main(["build", str(tiny_float_tflite), "--calib", "random", "-o", str(out),
                     "--device", "all"], standalone_mode=False)
    assert code == 0
    return json.loads((out / "manifest.json").read_text()), (out / "report.html").read_text()


def _section(page: str, key: str) -> str:
    match = re.search(rf'<section id="{key}"[^>]*>(.*?)</section>', page, re.S)
    assert match, key
    return match.group(1)


def test_every_section_is_there_and_nothing_is_fetched(compared):
    _, page = compared
    for key in SECTIONS:
        assert re.search(rf"<section id=\"{key}\"[^>]*><h2>", page), key
        assert f'href="#{key}"' in page or key in ("conversion", "io", "toolchain")
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert not re.search(r"(src|href)=[\"']?(https?:|//)", page)
    assert "url(" not in page and "@import" not in page


def test_summary_shows_size_accuracy_latency_energy_and_device(compared):
    manifest, page = compared
    summary = _section(page, "summary")
    estimate = manifest["estimate"]
    for label in ("device", "size", "latency", "energy", "scheme"):
        assert f"<span>{label}</span>" in summary, label
    digits = figure_digits(estimate["latency_ms"], estimate["interval_ms"])
    assert f"{significant(estimate['latency_ms'], digits)} ms" in summary  # as precise as earned
    assert f"~{significant(estimate['energy_mj'], 1)} mJ" in summary
    assert html.escape(estimate["basis"]) in summary
    assert "host-cpu" in summary and manifest["accuracy"]["metric"].replace("_", " ") in summary


def test_device_comparison(compared):
    import importlib.resources

    import jsonschema

    from edgeopt.devices.profile import profile_names

    manifest, page = compared
    schema = json.loads(importlib.resources.files("edgeopt").joinpath(
        "manifest.schema.json").read_text())
    jsonschema.validate(manifest, schema)
    rows = manifest["comparison"]
    assert [r["device"] for r in rows][0] == "host-cpu" and rows[0]["primary"]
    assert {r["device"] for r in rows} == set(profile_names())
    assert rows[0]["latency_ms"] == manifest["estimate"]["latency_ms"]
    for r in rows:
        if r["note"] is None:
            assert r["latency_ms"] > 0 and r["energy_mj"] > 0 and 0 <= r["delegated_share"] <= 1
    section = _section(page, "comparison")
    assert "host-cpu (built for)" in section
    assert all(f">{r['device']}<" in section for r in rows[1:])
    assert section.count("<rect") == 3 * sum(r["latency_ms"] is not None for r in rows)


def test_a_device_that_cannot_take_the_artifact_says_why(run_cli, tmp_path, tiny_float_tflite):
    manifest, page = _build(run_cli, tiny_float_tflite, tmp_path / "gpu",
                            "--device", "pixel-gpu,coral-usb")
    coral = manifest["comparison"][1]
    assert manifest["recipe"]["scheme"] == "fp16" and coral["device"] == "coral-usb"
    assert coral["latency_ms"] is None and "int8" in coral["note"]
    section = _section(page, "comparison")
    assert "Devices without an estimate" in section and "coral-usb" in section


def test_placement_view_has_a_box_per_op_coloured_by_where_it_runs(compared):
    from edgeopt.report_svg import CPU_GREY

    manifest, page = compared
    placement = manifest["placement"]
    section = _section(page, "placement")
    boxes = re.findall(r'<g><title>#(\d+) [^<]* on (\w[\w-]*) \(([^)]*)\)[^<]*</title>'
                       r'<rect [^>]*fill="([^"]+)"', section)
    assert len(boxes) == placement["delegated_ops"] + placement["cpu_ops"]
    on_cpu = [b for b in boxes if b[2] == "CPU"]
    assert len(on_cpu) == placement["cpu_ops"] and all(b[3] == CPU_GREY for b in on_cpu)
    assert all(b[3] != CPU_GREY for b in boxes if b[2] != "CPU")
    assert f"All {len(boxes)} ops" in section
    for k, ops in enumerate(placement["partitions"]):
        assert f"partition {k + 1}: {len(ops)} op(s)" in section


def test_latency_breakdown_by_unit_and_op_kind(compared):
    manifest, page = compared
    section = _section(page, "latency")
    assert 'aria-label="latency by unit"' in section
    assert 'aria-label="latency breakdown"' in section
    shares = [int(s) for s in re.findall(r"ms \((\d+)%\)</span>", section)]
    assert shares and 97 <= sum(shares) <= 103  # rounded parts of one whole
    assert re.search(r">\w+ on (cpu|npu|gpu|tpu)<", section)


def test_onnx_bundle_shows_its_placement_and_estimate(run_cli, tmp_path, tiny_onnx_path):
    manifest, page = _build(run_cli, tiny_onnx_path, tmp_path / "onnx", "--format", "onnx")
    placement = manifest["placement"]
    assert placement["execution_provider"] in _section(page, "placement")
    assert 'id="comparison"' not in page
    assert "latency breakdown" in _section(page, "latency")
    assert "<span>latency</span><b>—</b>" not in _section(page, "summary")


def test_readme_screenshot_is_the_sample_report():
    """docs/report.png (made by docs/screenshot.py) is a small PNG the README shows."""
    png = ROOT / "docs" / "report.png"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 400_000
    assert "docs/report.png" in (ROOT / "README.md").read_text()


def test_data_section_is_written_in_words_with_the_artifacts_layout(run_cli, tmp_path,
                                                                     tiny_onnx_path,
                                                                     tiny_nhwc_data):
    """NHWC arrays for an NCHW ONNX model, built to .tflite (NHWC): the section names the
    layout each side really has, and prints no Python values (True, lists, dicts)."""
    result = run_cli("build", tiny_onnx_path, "--device", "host-cpu", "--calib",
                     tiny_nhwc_data, "-o", tmp_path / "d", "--json")
    assert result.exit_code == 0, result.stderr
    data = _section((tmp_path / "d" / "report.html").read_text(), "data")
    text = html.unescape(re.sub(r"<[^>]+>", " ", data))
    assert "the .tflite artifact takes NHWC [1, 16, 16, 3]" in text
    assert "the onnx source takes NCHW, the conversion moved it to NHWC" in text
    assert "the data was given NHWC and transposed to the source model's NCHW" in text
    assert "calib.npz: 52 samples" in text and "yes: accuracy is measured against them" in text
    for python_value in ("True", "False", "None", "['", "{'"):
        assert python_value not in text, python_value


def test_data_section_of_random_data_says_it_is_not_representative(compared):
    text = html.unescape(re.sub(r"<[^>]+>", " ", _section(compared[1], "data")))
    assert "random inputs, not representative" in text and "True" not in text
