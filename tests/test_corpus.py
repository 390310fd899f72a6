"""The measured-latency corpus loads, is large and varied enough to fit on, and cites sources."""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import astuple

import pytest

from edgeopt.devices.corpus import COLUMNS, load_corpus, load_file, measurements_dir
from edgeopt.errors import DeviceError


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def test_corpus_has_hundreds_of_rows_from_every_file(corpus):
    files = sorted(measurements_dir().glob("*.csv"))
    assert len(corpus) >= 5000
    assert all(load_file(path) for path in files), "an empty corpus file"
    assert len(files) >= 4


def test_every_row_names_its_source(corpus):
    for row in corpus:
        assert row.source.startswith(("github:", "https://")), row
        if row.source.startswith("github:"):
            # repository@commit:path, so the figure can be checked at that exact commit.
            repo_commit, _, path = row.source.removeprefix("github:").partition(":")
            assert "@" in repo_commit and path, row.source


def test_corpus_covers_many_devices_and_precisions(corpus):
    assert len({row.device for row in corpus}) >= 6
    assert len({row.soc for row in corpus}) >= 6
    assert {"int8", "fp16", "fp32"} <= {row.precision for row in corpus}
    assert {"npu", "gpu", "cpu", "edgetpu"} <= {row.compute_unit for row in corpus}
    # Leave-one-family-out cross validation needs many families.
    assert len({row.model_family for row in corpus}) >= 20


def test_families_are_architectures_not_tasks(corpus):
    """Leave-one-family-out holds out one architecture: the super-resolution networks are
    families of their own (QuickSRNet's sizes one, ESRGAN and Real-ESRGAN x4plus both
    RRDBNet), and no model sits in two families (a float and a quant file of one network)."""
    family = {}
    for row in corpus:
        assert family.setdefault(row.model, row.model_family) == row.model_family, row.model
    assert not any(row.model_family == "super-resolution" for row in corpus)
    assert {family[m] for m in ("quicksrnetsmall", "quicksrnetmedium", "quicksrnetlarge")} \
        == {"quicksrnet"}
    assert family["esrgan"] == family["real_esrgan_x4plus"] == "rrdbnet"
    assert len({family[m] for m in ("quicksrnetsmall", "xlsr", "sesr_m5",
                                    "real_esrgan_general_x4v3", "esrgan")}) == 5
    by_network = {}
    for model, fam in family.items():
        network = model.removesuffix("_float").removesuffix("_quant")
        by_network.setdefault(network, set()).add(fam)
    assert all(len(f) == 1 for f in by_network.values()), by_network


def test_no_duplicate_rows(corpus):
    assert len(set(corpus)) == len(corpus)
    key = Counter((r.model, r.input_shape, r.precision_label, r.precision, r.device,
                   r.runtime_detail, r.delegate, r.threads, r.source) for r in corpus)
    assert [k for k, n in key.items() if n > 1] == []


def test_rows_are_typed(corpus):
    row = corpus[0]
    assert isinstance(row.latency_ms, float) and row.latency_ms > 0
    assert all(r.threads is None or r.threads > 0 for r in corpus)
    assert len(astuple(row)) == len(COLUMNS)


def _write(path, rows):
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        writer.writerows(rows)


def _good():
    row = dict.fromkeys(COLUMNS, "")
    row.update(model="m", model_family="f", precision="int8", device="d", soc="s",
               runtime="tflite", delegate="cpu", compute_unit="cpu", latency_ms="1.5",
               source="https://example.org/table")
    return row


@pytest.mark.parametrize("column, value, message", [
    ("latency_ms", "fast", "latency_ms 'fast' is not a number"),
    ("latency_ms", "-2", "must be a positive number"),
    ("precision", "int3", "precision 'int3' is not one of"),
    ("source", "", "column source is empty"),
    ("threads", "four", "threads 'four' is not a whole number"),
    ("date", "2024/01/02", "is not YYYY-MM-DD"),
])
def test_bad_row_names_file_row_and_column(tmp_path, column, value, message):
    bad = dict(_good(), **{column: value})
    _write(tmp_path / "x.csv", [list(_good().values()), list(bad.values())])
    with pytest.raises(DeviceError, match=rf"x\.csv row 3: .*{message}"):
        load_corpus(tmp_path)


def test_wrong_header_and_empty_folder_are_errors(tmp_path):
    with pytest.raises(DeviceError, match=r"no measurement files"):
        load_corpus(tmp_path)
    (tmp_path / "y.csv").write_text("model,latency_ms\nm,1\n")
    with pytest.raises(DeviceError, match=r"y\.csv: header must be"):
        load_corpus(tmp_path)


def test_short_row_is_an_error(tmp_path):
    (tmp_path / "z.csv").write_text(",".join(COLUMNS) + "\nm,f\n")
    with pytest.raises(DeviceError, match=r"z\.csv row 2: expected"):
        load_corpus(tmp_path)


def test_readme_describes_every_file():
    readme = (measurements_dir() / "README.md").read_text()
    for path in measurements_dir().glob("*.csv"):
        assert f"`{path.name}`" in readme, path.name
