"""A sweep worker's stage memo: keys by content, nothing kept when off, and a second build
of the same model reuses the first one's float conversion and compressed model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgeopt import stage_memo
from edgeopt.config import BuildConfig
from edgeopt.pipeline import REUSE_NOTES, build

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture(autouse=True)
def _empty_memo():
    stage_memo.clear()
    yield
    stage_memo.clear()


def test_a_key_is_made_of_content_not_of_paths(tmp_path):
    a, b = tmp_path / "a.keras", tmp_path / "copy" / "b.keras"
    b.parent.mkdir()
    a.write_bytes(b"model bytes")
    b.write_bytes(b"model bytes")
    x = {"image": np.ones((2, 3), np.float32)}
    assert stage_memo.key(a, x, "w8a8") == stage_memo.key(b, x, "w8a8")
    assert stage_memo.key(a, x, "w8a8") != stage_memo.key(a, x, "float")
    assert stage_memo.key(a, x) != stage_memo.key(a, {"image": np.zeros((2, 3), np.float32)})
    assert stage_memo.key(a, x) != stage_memo.key(a, {"image": np.ones((3, 2), np.float32)})
    folder = tmp_path / "saved"
    (folder / "variables").mkdir(parents=True)
    (folder / "variables" / "v").write_bytes(b"1")
    before = stage_memo.key(folder)
    (folder / "variables" / "v").write_bytes(b"2")
    assert stage_memo.key(folder) != before


def _onnx_with_external_weights(folder: Path, weight: float) -> Path:
    """y = x + w, w stored in the external-data file weights.bin beside model.onnx."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.full((1, 64), weight, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder.mkdir()
    path = folder / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin",
                    size_threshold=0)
    return path


def test_an_onnx_model_is_keyed_by_its_external_data_too(tmp_path):
    # the same .onnx bytes beside other weights is another model: it must not reuse the
    # first one's conversion
    from edgeopt.model import load_model

    one = load_model(_onnx_with_external_weights(tmp_path / "one", 1.0))
    two = load_model(_onnx_with_external_weights(tmp_path / "two", 2.0))
    assert one.path.read_bytes() == two.path.read_bytes()
    assert one.files() == (one.path, one.path.parent / "weights.bin")
    assert stage_memo.key(one.files) != stage_memo.key(two.files)
    assert stage_memo.key(one.path) == stage_memo.key(two.path)  # what the key used to read
    with stage_memo.enabled():
        assert stage_memo.entry_key(one.files) == stage_memo.key(one.files)


def test_nothing_is_kept_or_recalled_when_the_memo_is_off():
    # off, a build's key is not even computed: a missing file is never read
    assert stage_memo.entry_key(Path("/nonexistent/model.keras"), {"x": np.ones(3)}) is None
    stage_memo.keep("compress", "k", "value", 5)
    with stage_memo.enabled():
        assert stage_memo.recall("compress", "k") is None  # kept while off: nothing
        stage_memo.keep("compress", "k", "value", 5)
        with stage_memo.hits() as hits:
            assert stage_memo.recall("compress", "k") == "value"
        assert hits == ["compress"]
    assert stage_memo.recall("compress", "k") is None  # off again


def test_the_oldest_results_go_when_the_memo_is_full(monkeypatch):
    monkeypatch.setattr(stage_memo, "MAX_BYTES", 10)
    with stage_memo.enabled():
        stage_memo.keep("s", "a", 1, 6)
        stage_memo.keep("s", "b", 2, 6)
        assert stage_memo.recall("s", "a") is None and stage_memo.recall("s", "b") == 2


def _build(model, data, out, scheme: str, progress: list) -> dict:
    config = BuildConfig(model=str(model), device="host-cpu", calib=str(data), scheme=scheme,
                         prune=0.5, output=str(out))
    build(config, progress.append)
    return json.loads((out / "manifest.json").read_text())


@pytest.mark.slow
def test_a_second_candidate_reuses_the_conversion_and_the_pruned_model(tmp_path):
    model, data = SAMPLES / "digits_cnn.keras", SAMPLES / "digits_calib.npz"
    first, second, alone = [], [], []
    with stage_memo.enabled():
        a = _build(model, data, tmp_path / "a", "float", first)
        b = _build(model, data, tmp_path / "b", "w8a8", second)
    c = _build(model, data, tmp_path / "c", "w8a8", alone)
    assert any(m.startswith("pruning") for m in first)
    assert not any(m.startswith("pruning") for m in second)
    assert any(m.startswith("reusing the compressed model") for m in second)
    assert a["compression"] == b["compression"]
    assert set(REUSE_NOTES.values()) <= set(b["notes"])
    assert not set(REUSE_NOTES.values()) & set(a["notes"] + c["notes"])
    # the reused stages give what a build of its own gives
    assert b["compression"]["parameters"] == c["compression"]["parameters"]
    assert b["model"]["sha256"] == c["model"]["sha256"]
