"""Image folders as model inputs: how a photo is made to fit an input, and what is said
when it did not fit.

    >>> arrays, labels, notes, record, warnings, names = load_image_folder(
    ...     Path("images/"), TensorSpec("image", (-1, 32, 32, 1), "float32"), Preprocessing())

Each image is scaled to cover the input and centre-cropped to its size (RESIZE_MODE: the
aspect ratio is kept), converted to the input's colour (Pillow's "L", ITU-R 601-2 luma,
for a 1-channel input) and normalised as (pixel - mean) / std on 0..255 values. Class
subfolders are read in `class_names` order, which is the label index.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeopt.data_limits import bounded_images, check_sample_count
from edgeopt.errors import DataError
from edgeopt.inputs import CAPS, check_regular
from edgeopt.model import TensorSpec

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
RESIZE_MODE = "cover, centre crop"
NHWC_TO_NCHW = (0, 3, 1, 2)
NCHW_TO_NHWC = (0, 2, 3, 1)
GRAY_MODES = ("1", "L", "LA", "I", "I;16", "F")


@dataclass(frozen=True)
class Preprocessing:
    """How images become input tensors; recorded in the manifest for the app to repeat."""

    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (255.0,)

    def __post_init__(self):
        if any(s == 0 for s in self.std):
            raise DataError("--std must not be 0")

    @classmethod
    def from_flags(cls, mean=None, std=None) -> Preprocessing:
        """--mean/--std over the one set of defaults (an unset flag keeps its default)."""
        default = cls()
        return cls(tuple(mean) if mean else default.mean, tuple(std) if std else default.std)



def shape_text(shape) -> str:
    """(N, 1, 32, 32): N for a dynamic batch, ? for another dynamic dimension."""
    return "(" + ", ".join("N" if i == 0 and d < 0 else ("?" if d < 0 else str(d))
                           for i, d in enumerate(shape)) + ")"



def image_layout(spec: TensorSpec) -> tuple[str, int, int, int]:
    """(layout, height, width, channels) of a 4-D image input."""
    if len(spec.shape) != 4:
        raise DataError(f"an image folder needs a 4-D image input; '{spec.name}' is "
                        f"{shape_text(spec.shape)}")
    _, a, b, c = spec.shape
    if c in (1, 3):
        layout, (h, w, ch) = "NHWC", (a, b, c)
    elif a in (1, 3):
        layout, (ch, h, w) = "NCHW", (a, b, c)
    else:
        raise DataError(f"input '{spec.name}' {shape_text(spec.shape)} has no 1- or 3-channel "
                        "axis; give .npz data instead of images")
    if h <= 0 or w <= 0:
        raise DataError(f"input '{spec.name}' has a dynamic image size {shape_text(spec.shape)}; "
                        f"fix it with --input-shape {spec.name}:1,...")
    return layout, h, w, ch


def class_names(folder: Path) -> tuple[str, ...] | None:
    """Class subfolders in label order: sorted by name, or by number when every name is a
    number (then the label is the number: `0/ 1/ 2/ ... 10/`); None without subfolders."""
    names = sorted(p.name for p in folder.iterdir() if p.is_dir())
    if not names:
        return None
    if not all(n.isdigit() for n in names):
        return tuple(names)
    by_index = {int(n): n for n in names}
    return tuple(by_index.get(i, str(i)) for i in range(max(by_index) + 1))


def _image_files(folder: Path) -> tuple[list[Path], list[int] | None]:
    names = class_names(folder)
    if names:
        files, labels = [], []
        for label, name in enumerate(names):
            if not (folder / name).is_dir():  # a gap in numbered classes
                continue
            for f in sorted((folder / name).iterdir()):
                if f.suffix.lower() in IMAGE_SUFFIXES:
                    files.append(f)
                    labels.append(label)
        return files, labels
    files = sorted(f for f in folder.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
    return files, None


@dataclass(frozen=True)
class _ImageFit:
    """How one image was made to fit the input (for the warnings)."""

    size: tuple[int, int]       # (width, height) as read
    colour_dropped: bool        # a colour image averaged to one channel
    gray_to_rgb: bool           # a grayscale image copied to three channels
    cropped: bool               # another aspect ratio: the centre was kept
    upscaled: bool              # smaller than the input


def _cover_crop(img, w: int, h: int):
    """Scale to cover w x h keeping the aspect ratio, then crop the centre (RESIZE_MODE)."""
    from PIL import Image

    scale = max(w / img.width, h / img.height)
    sw, sh = max(w, round(img.width * scale)), max(h, round(img.height * scale))
    img = img.resize((sw, sh), Image.BILINEAR)
    left, top = (sw - w) // 2, (sh - h) // 2
    return img.crop((left, top, left + w, top + h))


def _has_colour(img) -> bool:
    if img.mode in GRAY_MODES:
        return False
    r, g, b = (np.asarray(c, np.int16) for c in img.convert("RGB").split())
    return bool((r != g).any() or (g != b).any())


def _read_image(path: Path, h: int, w: int, channels: int) -> tuple[np.ndarray, _ImageFit]:
    from PIL import Image, UnidentifiedImageError

    check_regular(path, "image", DataError, CAPS["image"])  # a FIFO named x.png would block
    try:
        with bounded_images(str(path)), Image.open(path) as img:
            size = (img.width, img.height)
            colour = _has_colour(img)
            gray = img.mode in GRAY_MODES
            img = _cover_crop(img.convert("L" if channels == 1 else "RGB"), w, h)
            pixels = np.asarray(img, dtype=np.float32)
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise DataError(f"cannot read image {path}: {exc}") from exc
    fit = _ImageFit(size, channels == 1 and colour, channels == 3 and gray,
                    abs(size[0] * h - size[1] * w) > 0.01 * size[1] * w,
                    size[0] < w or size[1] < h)
    return (pixels[..., None] if channels == 1 else pixels), fit


def _fit_warnings(fits: list[_ImageFit], spec: TensorSpec, h: int, w: int) -> list[str]:
    """Say what was done to images that do not fit the input, with counts."""
    total, name = len(fits), spec.name
    warnings = []
    dropped = sum(f.colour_dropped for f in fits)
    if dropped:
        warnings.append(f"{dropped} of {total} images are colour but input '{name}' has 1 "
                        "channel: converted to grayscale (ITU-R 601-2 luma); the app must do "
                        "the same")
    gray = sum(f.gray_to_rgb for f in fits)
    if gray:
        warnings.append(f"{gray} of {total} images are grayscale but input '{name}' takes "
                        "RGB: the gray channel was copied to R, G and B")
    cropped = [f for f in fits if f.cropped]
    if cropped:
        sizes = sorted({f"{f.size[0]}x{f.size[1]}" for f in cropped})[:3]
        warnings.append(f"{len(cropped)} of {total} images ({', '.join(sizes)}) have another "
                        f"aspect ratio than input '{name}' ({w}x{h}): scaled to cover it and "
                        "centre-cropped (the edges are lost)")
    small = [f for f in fits if f.upscaled]
    if small:
        least = min(small, key=lambda f: f.size[0] * f.size[1]).size
        warnings.append(f"{len(small)} of {total} images are smaller than input '{name}' "
                        f"({w}x{h}; smallest {least[0]}x{least[1]}): upscaled, so they hold "
                        "less detail than the model expects")
    return warnings


def load_image_folder(folder: Path, spec: TensorSpec, prep: Preprocessing):
    """(arrays, labels, notes, preprocessing record, warnings, class names) of a folder."""
    layout, h, w, ch = image_layout(spec)
    files, labels = _image_files(folder)
    if not files:
        raise DataError(f"{folder} holds no .jpg or .png images")
    check_sample_count((len(files),), str(folder))
    for name, values in (("mean", prep.mean), ("std", prep.std)):
        if len(values) not in (1, ch):
            raise DataError(f"--{name} has {len(values)} values; input '{spec.name}' has "
                            f"{ch} channel(s)")
    read = [_read_image(f, h, w, ch) for f in files]
    images = np.stack([pixels for pixels, _ in read])
    fits = [fit for _, fit in read]
    if np.dtype(spec.dtype).kind == "f":
        images = (images - np.asarray(prep.mean, np.float32)) / np.asarray(prep.std, np.float32)
    else:  # an integer-input model takes raw pixels; its own input quantization normalises
        images = images.round().astype(spec.dtype)
        prep = Preprocessing(mean=(0.0,), std=(1.0,))
    if layout == "NCHW":
        images = images.transpose(NHWC_TO_NCHW)
    names = class_names(folder) if labels is not None else None
    record = {"source": "images", "resize": [h, w], "resize_mode": RESIZE_MODE,
              "color": "grayscale" if ch == 1 else "rgb",
              "layout": layout, "mean": list(prep.mean), "std": list(prep.std),
              "pixel_range": [0, 255]}
    label_array = None if labels is None else np.asarray(labels, np.int64)
    return ({spec.name: images}, label_array, (f"{len(files)} images from {folder}",), record,
            _fit_warnings(fits, spec, h, w), names)
