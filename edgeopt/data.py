"""Calibration and evaluation data: `.npz`, `.npy`, a folder of images, or `random`.

    >>> data = load_dataset("samples/digits_eval.npz", handle.inputs)
    >>> data.count, data.labels is not None
    (400, True)

Arrays are taken in the source model's layout; a 4-D array in the other image layout
(NHWC for an NCHW input, or the reverse) is transposed and the manifest says so. Image
folders are read by edgeopt.images (fit rules, class order); what did not fit the model
is said in `Dataset.warnings`.

Every command reads its data with `load_data(DataSpec(...), handle.inputs)`: the same
defaults (`Preprocessing()`, `HOLDOUT_SHARE`) everywhere, checked against the model's
inputs as soon as both are read, before any conversion.
"""

from __future__ import annotations

import math
import tokenize
import zipfile
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from edgeopt.data_limits import HOLDOUT_SHARE, check_npz_members, check_sample_count
from edgeopt.errors import DataError, first_line
from edgeopt.graph import MAX_TENSOR_BYTES
from edgeopt.images import (
    NCHW_TO_NHWC,
    NHWC_TO_NCHW,
    Preprocessing,
    class_names,
    image_layout,
    load_image_folder,
)
from edgeopt.images import shape_text as _shape_text
from edgeopt.inputs import CAPS, read_bytes
from edgeopt.model import ModelHandle, TensorSpec, batch_axis

__all__ = ["HOLDOUT_SHARE", "DataSpec", "Dataset", "Preprocessing", "class_names",
           "image_layout", "load_data", "load_dataset", "permuted", "shapes_from_data",
           "split_holdout"]

RANDOM_SAMPLES = 32
FEW_EVAL_SAMPLES = 30       # fewer validated samples make the accuracy figures noise


@dataclass(frozen=True)
class Dataset:
    arrays: dict[str, np.ndarray]
    labels: np.ndarray | None
    source: str
    representative: bool = True
    notes: tuple[str, ...] = ()
    preprocessing: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()          # what a person should read (manifest notes)
    class_names: tuple[str, ...] | None = None  # class subfolders, in label order

    @property
    def count(self) -> int:
        return len(next(iter(self.arrays.values())))

    def take(self, indices) -> Dataset:
        labels = None if self.labels is None else self.labels[indices]
        return replace(self, arrays={k: v[indices] for k, v in self.arrays.items()},
                       labels=labels)

    def sample(self, i: int) -> dict[str, np.ndarray]:
        """One sample with a batch dimension of 1."""
        return {k: v[i:i + 1] for k, v in self.arrays.items()}


def split_holdout(data: Dataset, fraction: float = HOLDOUT_SHARE) -> tuple[Dataset, Dataset]:
    """Every k-th sample goes to evaluation, the rest to calibration (deterministic)."""
    if data.count < 2:
        raise DataError(f"{data.source} has {data.count} sample; give at least 2, or --eval")
    step = max(2, round(1 / fraction))
    held = np.arange(data.count) % step == step - 1
    if not held.any():
        held[-1] = True
    return data.take(np.flatnonzero(~held)), data.take(np.flatnonzero(held))


@dataclass(frozen=True)
class DataSpec:
    """What a command's data flags say (--calib/--data, --eval, --mean, --std)."""

    calib: str | None
    eval: str | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    seed: int = 0
    holdout: float = HOLDOUT_SHARE
    calib_role: str = "calibration"

    @property
    def preprocessing(self) -> Preprocessing:
        return Preprocessing.from_flags(self.mean, self.std)


NO_CALIBRATION = ("no calibration data: pass --calib PATH (.npz, .npy or an image folder), "
                  "or --calib random for a smoke test whose accuracy figures mean nothing")


def load_data(spec: DataSpec, inputs: tuple[TensorSpec, ...],
              hold_out: bool = True) -> tuple[Dataset, Dataset | None]:
    """(calibration, evaluation) for every command, checked against the model's inputs.

    Without --eval a `spec.holdout` share (every fifth sample) is held back when `hold_out`,
    else evaluation is None. --mean/--std given for arrays are recorded as what the app
    must repeat (`preprocessing["app_normalization"]`), with the same defaults as images.
    """
    if spec.calib is None:
        raise DataError(NO_CALIBRATION)
    prep = spec.preprocessing
    calib = _with_app_normalization(
        load_dataset(spec.calib, inputs, prep, spec.calib_role, spec.seed), spec)
    if spec.eval is not None:
        evaluation = load_dataset(spec.eval, inputs, prep, "evaluation", spec.seed)
        return calib, _warn_if_few(evaluation, "--eval")
    if not hold_out:
        return calib, None
    kept, held = split_holdout(calib, spec.holdout)
    return kept, _warn_if_few(held, f"held back from {calib.source}")


def _with_app_normalization(data: Dataset, spec: DataSpec) -> Dataset:
    if data.preprocessing.get("source") != "arrays" or not (spec.mean or spec.std):
        return data
    prep = spec.preprocessing
    record = {**data.preprocessing,
              "app_normalization": {"mean": list(prep.mean), "std": list(prep.std)}}
    return replace(data, preprocessing=record)


def _warn_if_few(evaluation: Dataset, where: str) -> Dataset:
    if evaluation.count >= FEW_EVAL_SAMPLES or not evaluation.representative:
        return evaluation
    warning = (f"validated on only {evaluation.count} sample(s) ({where}): accuracy figures "
               f"from fewer than {FEW_EVAL_SAMPLES} samples are noise; give --eval with more")
    return replace(evaluation, warnings=evaluation.warnings + (warning,))


def shapes_from_data(handle: ModelHandle,
                     data: Dataset) -> tuple[ModelHandle, Dataset, tuple[str, ...]]:
    """Dynamic input dimensions past the batch fixed to the data's own shape.

    A model with a dynamic spatial input ([-1, -1, -1, 3]) and calibration data of one
    shape builds for that shape rather than stopping, or writing a .tflite LiteRT cannot
    prepare; the note (terminal and manifest) says which shape was taken from the data.
    """
    fixed, notes = [], []
    for spec in handle.inputs:
        array = data.arrays.get(spec.name)
        axis = batch_axis(spec.shape) or 0
        dynamic = any(d < 0 for i, d in enumerate(spec.shape) if i != axis)
        if not dynamic or array is None or array.ndim != len(spec.shape):
            fixed.append(spec)
            continue
        dims = [int(d) for d in array.shape[1:]]  # the data keeps samples first
        dims.insert(axis, spec.shape[axis])
        shape = tuple(dims)
        fixed.append(TensorSpec(spec.name, shape, spec.dtype, spec.quantization))
        shown = [1 if i == axis and d < 0 else d for i, d in enumerate(shape)]
        notes.append(f"input '{spec.name}' {_shape_text(spec.shape)} is dynamic: built for "
                     f"{shown}, the shape of {data.source} (--input-shape {spec.name}:"
                     f"{','.join(str(d) for d in shown)} to choose another)")
    if not notes:
        return handle, data, ()
    return (replace(handle, inputs=tuple(fixed)),
            replace(data, warnings=data.warnings + tuple(notes)), tuple(notes))


def permuted(arrays: dict[str, np.ndarray], perms: dict) -> dict[str, np.ndarray]:
    """Arrays moved to a converted model's layout (`perms`: input name -> axes)."""
    return {k: (np.ascontiguousarray(v.transpose(perms[k])) if k in perms else v)
            for k, v in arrays.items()}


def load_dataset(spec: str, inputs: tuple[TensorSpec, ...],
                 preprocessing: Preprocessing | None = None, role: str = "calibration",
                 seed: int = 0) -> Dataset:
    """Read `spec` (a path or `random`) into arrays that fit `inputs`."""
    preprocessing = preprocessing or Preprocessing()
    for tensor in inputs:
        if 0 in tensor.shape:
            raise DataError(f"input '{tensor.name}' has a dimension of size 0 "
                            f"{_shape_text(tensor.shape)}; no data can fill it")
    if spec == "random":
        return _random_dataset(inputs, seed)
    path = Path(spec)
    if not path.exists():
        raise DataError(f"{role} data not found: {spec}")
    warnings, names = (), None
    if path.is_dir():
        image_input = _single_input(inputs, path)
        arrays, labels, notes, prep, warnings, names = load_image_folder(path, image_input,
                                                                         preprocessing)
    elif path.suffix == ".npz":
        arrays, labels = _load_npz(path, inputs)
        notes, prep = (), {"source": "arrays"}
    elif path.suffix == ".npy":
        arrays, labels = {_single_input(inputs, path).name: _np_load(path)}, None
        notes, prep = (), {"source": "arrays"}
    else:
        raise DataError(f"{role} data {spec}: expected a .npz, a .npy, a folder of "
                        ".jpg/.png images, or 'random'")
    fitted, layout_notes = _fit_arrays(arrays, inputs, str(path))
    if labels is not None:
        labels = _check_labels(labels, len(next(iter(fitted.values()))), str(path))
    return Dataset(fitted, labels, str(path), True, tuple(notes) + layout_notes, prep,
                   tuple(warnings), names)


# What numpy and zipfile raise for a corrupt .npy/.npz (a bad CRC is BadZipFile, a bad
# deflate stream zlib.error, an unknown compression method NotImplementedError, a garbled
# header dict SyntaxError or TokenError from numpy's header parser).
_READ_ERRORS = (ValueError, OSError, EOFError, KeyError, NotImplementedError, MemoryError,
                SyntaxError, tokenize.TokenError, zipfile.BadZipFile, zlib.error)


def _np_load(path: Path):
    magic = read_bytes(path, "data file", DataError, CAPS["numpy"], limit=6)
    if not (magic.startswith(b"PK\x03\x04") or magic == b"\x93NUMPY"):
        raise DataError(f"{path} is not a readable NumPy file (.npy or .npz)")
    try:
        _check_declared_sizes(path, zipped=magic.startswith(b"PK"))
        return np.load(path, allow_pickle=False)
    except _READ_ERRORS as exc:
        raise DataError(_read_error(path, exc)) from exc


def _read_error(path: Path, exc: BaseException) -> str:
    if "allow_pickle" in str(exc):
        return (f"{path} holds object arrays, which edgeopt does not unpickle (pickle runs "
                "code; np.load allow_pickle=False): save plain numeric arrays")
    return f"{path} is not a readable NumPy file: {first_line(exc)}"


def _check_declared_sizes(path: Path, zipped: bool) -> None:
    """numpy allocates the shape a `.npy` header declares before reading the data: compare
    it with the bytes really there, so a corrupt header is an error, not an allocation."""
    if not zipped:
        with path.open("rb") as f:
            _check_npy_header(f, path.stat().st_size, str(path))
        return
    with zipfile.ZipFile(path) as archive:
        check_npz_members(archive.infolist(), str(path))
        for info in archive.infolist():
            if info.filename.endswith(".npy"):
                with archive.open(info) as f:
                    _check_npy_header(f, info.file_size, f"{path}:{info.filename}")


def _check_npy_header(f, size: int, label: str) -> None:
    version = np.lib.format.read_magic(f)
    # version 3 differs from 2 only in the header's text encoding (UTF-8 names)
    read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                   (2, 0): np.lib.format.read_array_header_2_0,
                   (3, 0): np.lib.format.read_array_header_2_0}.get(version)
    if read_header is None:
        raise DataError(f"{label}: unsupported .npy format version {version}")
    shape, _, dtype = read_header(f, max_header_size=10_000)
    if dtype.hasobject:
        return  # refused by np.load(allow_pickle=False) with its own message
    declared = math.prod(shape) * dtype.itemsize
    present = size - f.tell()
    if declared > present:
        raise DataError(f"{label}: header declares shape {shape} of {dtype} ({declared:,} "
                        f"bytes) but only {present:,} bytes follow; the file is corrupt")
    check_sample_count(shape, label)


def _single_input(inputs, path: Path) -> TensorSpec:
    if len(inputs) != 1:
        names = ", ".join(i.name for i in inputs)
        raise DataError(f"{path} holds one array but the model has {len(inputs)} inputs "
                        f"({names}); use a .npz keyed by input name")
    return inputs[0]


def _load_npz(path: Path, inputs) -> tuple[dict, np.ndarray | None]:
    archive = _np_load(path)
    try:
        contents = {key: archive[key] for key in archive.files}
    except _READ_ERRORS as exc:
        raise DataError(_read_error(path, exc)) from exc
    labels = contents.pop("labels", None)
    names = [spec.name for spec in inputs]
    if all(name in contents for name in names):
        return {name: contents[name] for name in names}, labels
    if len(contents) == 1:
        return {_single_input(inputs, path).name: next(iter(contents.values()))}, labels
    missing = [n for n in names if n not in contents]
    raise DataError(f"{path} has arrays {sorted(contents)} but no array for input(s) "
                    f"{missing}; key the arrays by input name")


def _check_labels(labels: np.ndarray, count: int, source: str) -> np.ndarray:
    if labels.dtype.kind not in "iu" or labels.ndim != 1:
        raise DataError(f"{source}: 'labels' must be a 1-D integer array of class indices, "
                        f"got {labels.dtype} {labels.shape}")
    if len(labels) != count:
        raise DataError(f"{source}: {len(labels)} labels for {count} samples")
    return labels.astype(np.int64)


def _matches(shape: tuple, expected: tuple) -> bool:
    return len(shape) == len(expected) and all(
        e < 0 or s == e for s, e in zip(shape[1:], expected[1:]))


def _fit_array(array: np.ndarray, spec: TensorSpec, source: str) -> tuple[np.ndarray, str]:
    if array.ndim == 0 or len(array) == 0:
        raise DataError(f"{source}: array for input '{spec.name}' is empty")
    note = ""
    if not _matches(array.shape, spec.shape):
        for perm, text in ((NHWC_TO_NCHW, "NHWC to NCHW"), (NCHW_TO_NHWC, "NCHW to NHWC")):
            if array.ndim == 4 and _matches(array.transpose(perm).shape, spec.shape):
                array, note = array.transpose(perm), f"'{spec.name}' transposed {text}"
                break
        else:
            raise DataError(f"{source}: array for input '{spec.name}' has shape "
                            f"{tuple(array.shape)} but the model takes {_shape_text(spec.shape)}")
    return _cast(array, spec, source), note


def _numpy_dtype(spec: TensorSpec) -> np.dtype:
    try:
        return np.dtype(spec.dtype)
    except TypeError as exc:  # 'string', 'unknown': no array of numbers can feed it
        raise DataError(f"input '{spec.name}' takes {spec.dtype} values, which edgeopt "
                        "cannot feed from arrays") from exc


def _cast(array: np.ndarray, spec: TensorSpec, source: str) -> np.ndarray:
    want = _numpy_dtype(spec)
    kind = array.dtype.kind
    if want.kind == "f":
        if kind != "f":
            raise DataError(
                f"{source}: input '{spec.name}' takes {want.name} but the data is "
                f"{array.dtype.name}; normalise it to floats first (or give an image folder "
                "with --mean/--std)")
        if not np.isfinite(array).all():
            bad = int((~np.isfinite(array)).sum())
            raise DataError(f"{source}: input '{spec.name}' has {bad} NaN/Inf values")
    elif want.kind in "iub" and kind not in "iub":
        raise DataError(f"{source}: input '{spec.name}' takes {want.name} but the data is "
                        f"{array.dtype.name}")
    return np.ascontiguousarray(array.astype(want, copy=False))


def _fit_arrays(arrays: dict, inputs, source: str) -> tuple[dict, tuple[str, ...]]:
    """Every array with its samples first: a recurrent state [layers, N, units] is moved
    (the runners feed it back in the model's layout) and a scalar input's one value is
    repeated per sample."""
    fitted, notes = {}, []
    tensors = [spec for spec in inputs if spec.shape]
    moved = {spec.name: _samples_first(np.asarray(arrays[spec.name]), spec) for spec in tensors}
    count = _common_count(moved, tensors)
    for spec in tensors:
        array, axis = moved[spec.name]
        if len(array) != count and array.ndim > 1:
            array, axis = _recount(np.asarray(arrays[spec.name]), count, array, axis)
        expected = _moved_shape(spec.shape, axis)
        fitted[spec.name], note = _fit_array(array, replace(spec, shape=expected), source)
        if axis:
            note = (f"'{spec.name}' counts its samples on axis {axis} "
                    f"{_shape_text(spec.shape)}; fed to the model in that layout")
        if note:
            notes.append(note)
    counts = {len(a) for a in fitted.values()}
    if len(counts) > 1:
        raise DataError(f"{source}: inputs have different sample counts {sorted(counts)}")
    for spec in inputs:
        if not spec.shape:
            fitted[spec.name], note = _fit_scalar(np.asarray(arrays[spec.name]), spec,
                                                  count or 1, source)
            notes.append(note)
    return fitted, tuple(notes)


def _samples_first(array: np.ndarray, spec: TensorSpec) -> tuple[np.ndarray, int]:
    axis = batch_axis(spec.shape) or 0
    if axis and array.ndim == len(spec.shape):
        return np.moveaxis(array, axis, 0), axis
    return array, 0


def _common_count(moved: dict, tensors: list[TensorSpec]) -> int | None:
    """The sample count of the inputs whose samples are on axis 0 (the most common)."""
    counts = [len(moved[s.name][0]) for s in tensors if moved[s.name][0].ndim]
    return max(set(counts), key=counts.count) if counts else None


def _recount(original: np.ndarray, count: int | None, array: np.ndarray, axis: int):
    """An input whose declared shape hid its sample axis (--input-shape state:2,16,128):
    the one axis as long as the other inputs' sample count."""
    axes = [i for i, d in enumerate(original.shape) if d == count]
    if len(axes) == 1:
        return np.moveaxis(original, axes[0], 0), axes[0]
    return array, axis


def _moved_shape(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return shape if not axis else (shape[axis], *shape[:axis], *shape[axis + 1:])


def _fit_scalar(array: np.ndarray, spec: TensorSpec, count: int,
                source: str) -> tuple[np.ndarray, str]:
    """A scalar input's value per sample: one value for all, or one per sample."""
    if array.ndim == 0:
        values = np.full((count,), array.item())
    elif array.ndim == 1 and len(array) == count:
        values = array
    else:
        raise DataError(f"{source}: input '{spec.name}' is a scalar (rank 0): give one "
                        f"value, or one per sample ({count}), not shape {tuple(array.shape)}")
    values = _cast(values, spec, source)
    shown = values[0].item() if len(set(values.tolist())) == 1 else "per sample"
    return values, f"'{spec.name}' is a scalar input: {shown} for every sample"


def _random_dataset(inputs, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    arrays = {}
    for spec in inputs:
        axis = batch_axis(spec.shape) or 0
        if any(d < 0 for i, d in enumerate(spec.shape) if i != axis):
            raise DataError(f"--calib random cannot invent a size for the dynamic dimensions "
                            f"of input '{spec.name}' {_shape_text(spec.shape)}; fix them with "
                            f"--input-shape {spec.name}:1,... or give real data")
        shape = (RANDOM_SAMPLES,) + _moved_shape(spec.shape, axis)[1:]
        dtype = _numpy_dtype(spec)
        size = math.prod(shape) * dtype.itemsize
        if size > MAX_TENSOR_BYTES:
            raise DataError(f"--calib random would make {size / 2**30:.2f} GiB for input "
                            f"'{spec.name}' ({RANDOM_SAMPLES} samples of "
                            f"{_shape_text(spec.shape)}); give real data")
        if dtype.kind == "f":
            arrays[spec.name] = rng.random(shape, dtype=np.float32).astype(dtype)
        else:
            arrays[spec.name] = rng.integers(0, 2, shape).astype(dtype)
    return Dataset(arrays, None, "random", representative=False,
                   notes=("random uniform [0, 1) inputs: not representative of real data",),
                   preprocessing={"source": "random"})
