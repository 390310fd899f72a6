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
