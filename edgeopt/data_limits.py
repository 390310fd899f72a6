"""Caps on calibration and evaluation data, checked from headers before anything is
decompressed or decoded: a 600 KB .npz can inflate to 600 MB of zeros, a 100-byte PNG can
declare 100000 x 100000 pixels.

    >>> check_sample_count((200, 32, 32, 1), "digits_calib.npz:image.npy")
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager

from edgeopt.errors import DataError
from edgeopt.keras_archive import MAX_MEMBERS, MAX_RATIO, bomb_ratio

HOLDOUT_SHARE = 0.2  # without --eval, every fifth sample is held back for the figures
# Calibration uses a few hundred samples; 50,000 is the size of the ImageNet validation set.
MAX_SAMPLES = 50_000
# The arrays of one .npz, decompressed (numpy holds them all in memory at once).
MAX_DATA_BYTES = 4 << 30
# 8192 x 8192: larger than any camera frame an edge model is fed, resized down anyway.
MAX_IMAGE_PIXELS = 8192 * 8192


def check_sample_count(shape: tuple[int, ...], label: str) -> None:
    """Refuse an array (or folder) of more than MAX_SAMPLES samples."""
    if shape and shape[0] > MAX_SAMPLES:
        raise DataError(f"{label} holds {shape[0]:,} samples; edgeopt reads at most "
                        f"{MAX_SAMPLES:,} (calibration needs a few hundred): pass a subset")


def check_npz_members(infos, label: str) -> None:
    """Sizes the zip directory declares, before a byte is inflated: the total, and the
    compression ratio a real array never reaches (keras_archive's limits)."""
    if len(infos) > MAX_MEMBERS:
        raise DataError(f"{label} holds {len(infos):,} arrays, more than the {MAX_MEMBERS:,} "
                        "edgeopt reads")
    total = sum(info.file_size for info in infos)
    if total > MAX_DATA_BYTES:
        raise DataError(f"{label} decompresses to {total / 2**30:.1f} GiB, over the "
                        f"{MAX_DATA_BYTES / 2**30:.0f} GiB of data edgeopt reads at once")
    for info in infos:
        if (ratio := bomb_ratio(info)) is not None:
            raise DataError(f"{label}: {info.filename} inflates {ratio:,.0f}-fold "
                            f"({info.compress_size:,} -> {info.file_size:,} bytes), more than "
                            f"the {MAX_RATIO}-fold real data compresses; refusing a zip bomb")


@contextmanager
def bounded_images(label: str):
    """PIL with an explicit pixel cap, over which opening an image raises DataError (PIL's
    own default only warns below twice its limit, and its error is no DataError)."""
    from PIL import Image

    previous = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            yield
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        side = math.isqrt(MAX_IMAGE_PIXELS)
        raise DataError(f"image {label} declares more than {MAX_IMAGE_PIXELS:,} pixels "
                        f"({side} x {side}); refusing to decode it") from None
    finally:
        Image.MAX_IMAGE_PIXELS = previous
