"""The QAT benchmark's digits keep every pixel of the scans (issue 19)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import ROOT


@pytest.mark.slow   # importing scikit-learn alone takes 4 s here
def test_full_ink_pixels_stay_full_ink(monkeypatch):
    """The scans are 0..16; 16 is the brightest ink, not 0 (an x16 into uint8 wrapped it)."""
    from sklearn.datasets import load_digits

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import qat

    monkeypatch.setattr(qat, "SIZE", 8)   # the scans' own side: the resize is the identity
    splits = qat.digits()
    images = np.concatenate([splits[k][0] for k in ("train", "calib", "eval")])[..., 0]
    scans = load_digits().images
    assert images.shape == scans.shape and images.max() == 1.0
    # the same multiset of pixels as the scans, each within one uint8 step of value/16
    np.testing.assert_allclose(np.sort(images, axis=None), np.sort(scans / 16, axis=None),
                               atol=1 / 255)
    sys.modules.pop("qat", None)


@pytest.mark.slow   # scikit-learn, matplotlib's fonts and a real recognizer in onnxruntime
def test_printed_lines_are_read_by_the_real_recognizer(monkeypatch):
    """The OCR benchmark's truth is the printed text: PP-OCRv4's own float model, fed as
    rapidocr feeds it, reads most lines exactly (else the labels or the preprocessing
    would be wrong, and every score with them)."""
    pytest.importorskip("rapidocr_onnxruntime")
    import onnxruntime as ort

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import qat
    from zoo import printed_lines, rapidocr_rec_tensor

    images, texts = printed_lines(np.random.default_rng(5), 24)
    again = printed_lines(np.random.default_rng(5), 24)
    assert texts == again[1] and all(np.array_equal(a, b) for a, b in zip(images, again[0]))
    assert all(3 <= len(t) <= 20 for t in texts)
    x = rapidocr_rec_tensor(images)
    assert x.shape == (24, 3, 48, 320) and -1.0 <= x.min() and x.max() <= 1.0
    session = ort.InferenceSession(str(qat.ppocr_model()), providers=["CPUExecutionProvider"])
    read = qat.ctc_lines(session.run(None, {"x": x})[0])
    assert np.mean(read == np.array(texts, dtype=object)) >= 0.75
    sys.modules.pop("qat", None)
