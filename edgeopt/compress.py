"""`edgeopt compress`, and the compression stage of `edgeopt build`.

Structured pruning removes channels (the model gets smaller and faster for real), magnitude
sparsity zeroes weights (2:4 or unstructured; the `.tflite` is written sparse where that
shrinks it), and distillation from the original model wins accuracy back, with or without
labels. Keras models are pruned directly; ONNX models through edgeopt's ONNX -> Keras
import, and come back as ONNX with the original node names (converters/onnx_keras.py).

    >>> result = compress(CompressConfig(model="m.keras", output="small.tflite", prune=0.5))
    >>> result.record["macs"]["after"] / result.record["macs"]["before"]   # about 0.5
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.atomic import check_output_path, write_file_atomic
from edgeopt.compress_settings import CompressSettings
from edgeopt.compression import DistillConfig, PruneConfig, distill, prune_structured
from edgeopt.compression.distill import require_gradients
from edgeopt.compression.graph import PruneError
from edgeopt.compression.measure import MeasureConfig, measure_tflite
from edgeopt.compression.sparsity import SparsityConfig, sparsify
from edgeopt.compression.teacher import input_permutation, runtime_teacher
from edgeopt.compression.tflite_sparse import write_sparse_tflite
from edgeopt.converters.onnx_keras import export_onnx, import_onnx
from edgeopt.converters.onnx_to_tf import fixed_shapes, static_onnx
from edgeopt.converters.tf_source import from_keras, run_converter
from edgeopt.data import DataSpec, load_data
from edgeopt.errors import ConfigError, DataError
from edgeopt.inputs import CAPS, read_toml
from edgeopt.model import load_keras, load_model, with_input_shapes
from edgeopt.runtime import make_runner, match_outputs, run_dataset
from edgeopt.validate import LOSSY_SQNR_DB, compare

OUTPUT_FORMATS = {".keras": "keras", ".tflite": "tflite", ".onnx": "onnx"}
VALIDATION_SAMPLES = 2048  # compared with the source on at most this many samples
Progress = Callable[[str], None]


@dataclass(frozen=True)
class CompressConfig:
    model: str
    output: str
    settings: CompressSettings
    data: str | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    input_shapes: tuple[str, ...] = ()
    eval: str | None = None


@dataclass
class Trainable:
    """A model edgeopt can prune and train: Keras layers, and the way back to the source."""

    model: Any
    source_format: str
    imported: Any = None  # converters.onnx_keras.Imported for ONNX sources
    input_perms: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def source_names(self) -> dict[str, str]:
        """Keras layer -> the ONNX node it was imported from (empty for Keras sources)."""
        if self.imported is None:
            return {}
        return {layer: node for node, layer in self.imported.layers.items()}

    def to_keras_layout(self, name: str, array: np.ndarray) -> np.ndarray:
        perm = self.input_perms.get(name)
        return np.ascontiguousarray(array.transpose(perm)) if perm else array


@dataclass
class Compressed:
    """The compressed Keras model, how to write it, and the record for manifest/report."""

    trainable: Trainable
    model: Any
    record: dict


def trainable_model(handle, workdir: Path) -> Trainable:
    """A Keras model of ``handle`` whose layers own their weights (Keras or ONNX sources)."""
    if handle.format == "keras":
        return Trainable(_static_keras(load_keras(handle.path), handle.inputs), "keras")
    if handle.format == "onnx":
        import onnx

        proto = onnx.load(str(_static_onnx(handle, workdir)))
        imported = import_onnx(proto)
        return Trainable(imported.model, "onnx", imported, dict(imported.input_perms))
    raise ConfigError(f"pruning needs the trainable source model (.keras or .onnx), not a "
                      f"{handle.format} file: {handle.path.name} keeps no trainable layers; "
                      "pass the .keras or .onnx it was converted from (save a SavedModel "
                      "as .keras first), or build this file unpruned with `edgeopt build`")


def _static_keras(model, inputs) -> Any:
    """A functional model whose input leaves its size open ([None, None, None, 3]: MTCNN's
    P-Net) rebuilt with the size --input-shape fixed, its weights copied; pruning counts
    MACs per layer and needs every layer's size. Other models come back as they are."""
    import keras

    config = model.get_config()
    layers = config.get("layers") if isinstance(config, dict) else None
    entries = [e for e in layers or [] if e.get("class_name") == "InputLayer"]
    if len(entries) != 1 or len(inputs) != 1:
        return model
    shape = entries[0]["config"].get("batch_shape")
    fixed = [None, *inputs[0].shape[1:]]
    if shape is None or len(shape) != len(fixed) or None not in shape[1:] or \
            any(d is not None and d <= 0 for d in fixed[1:]):
        return model
    entries[0]["config"]["batch_shape"] = fixed
    rebuilt = keras.Model.from_config(config)
    rebuilt.set_weights(model.get_weights())
    return rebuilt


def _frozen_note(trainable: Trainable) -> str:
    """Why an ONNX model may have nothing left to prune: the nodes kept whole lock channels."""
    frozen = trainable.imported.frozen if trainable.imported is not None else {}
    locking = [node for node, why in frozen.items() if why.startswith("channels kept")]
    if not locking:
        return ""
    return (f" ({len(locking)} ONNX node(s) have no prunable Keras layer and keep the channels "
            f"they read, first '{locking[0]}')")


def _refuse_frozen(trainable: Trainable, way_out: str) -> None:
    """An ONNX node pruning keeps whole runs in onnxruntime (converters/onnx_frozen.py)."""
    frozen = trainable.imported.frozen if trainable.imported is not None else {}
    if frozen:
        node = next(iter(frozen))
        raise ConfigError(f"the ONNX model has {len(frozen)} node(s) with no Keras layer, "
                          f"kept whole (first: '{node}'); {way_out}")


def _static_onnx(handle, workdir: Path) -> Path:
    """Dynamic batch -> 1, shapes propagated and shape subgraphs folded (onnxslim).

    Without onnxslim's MatMul+Add -> Gemm fusion: on a batch-1 sequence ([1, T, K] @ W) it
    writes Reshape [T, K] -> Gemm -> Reshape [1, T, N], rows that mix the batch with the
    time axis, so the import could not make the product a Dense layer (PP-OCRv4's
    recognizer: its attention and MLP weights stayed constants in onnxruntime, untrained
    and with no gradient through them). The MatMul itself is one Dense on the last axis."""
    import io

    path = static_onnx(handle, workdir, fixed_shapes(handle), io.StringIO(),
                       skip_fusions=("FusionGemm",))
    return path or handle.path


def read_prune_recipe(path: str) -> dict[str, float]:
    """A recipe file: ``[prune]`` maps layer-name regexes to the share of channels removed."""
    import re

    table = read_toml(path, "prune recipe", ConfigError, CAPS["recipe"])
    rules = table.get("prune")
    if not isinstance(rules, dict) or not rules:
        raise ConfigError(f"prune recipe {path} needs a [prune] table of "
                          "\"layer regex\" = ratio entries")
    for pattern, ratio in rules.items():
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"prune recipe {path}: '{pattern}' is not a regex ({exc})") \
                from None
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio < 1:
            raise ConfigError(f"prune recipe {path}: '{pattern}' = {ratio!r}; ratios are "
                              "numbers in [0, 1)")
    return {k: float(v) for k, v in rules.items()}


def _single_input(handle) -> str:
    if len(handle.inputs) != 1:
        names = ", ".join(spec.name for spec in handle.inputs)
        raise ConfigError(f"compression trains on single-input models; {handle.path.name} has "
                          f"{len(handle.inputs)} inputs ({names}); prune the network in its "
                          "training framework before it is exported with these inputs, or "
                          "build it unpruned with `edgeopt build`")
    return handle.inputs[0].name


def _prune(trainable: Trainable, settings: CompressSettings, samples: np.ndarray | None,
           labels: np.ndarray | None, progress: Progress) -> tuple[Any, dict]:
    target: Any = settings.prune
    if settings.recipe:
        target = read_prune_recipe(settings.recipe)
    goal = f"recipe {settings.recipe}" if settings.recipe else f"{settings.prune:.0%} of MACs"
    progress(f"pruning channels ({settings.criterion}, {goal})")
    try:
        result = prune_structured(trainable.model, target, settings.criterion, samples,
                                  PruneConfig(seed=settings.seed,
                                              channel_multiple=settings.channel_multiple),
                                  labels)
    except PruneError as exc:
        raise PruneError(f"{exc}{_frozen_note(trainable)}") from None
    names = trainable.source_names()
    record = {"pattern": "structured", "criterion": settings.criterion,
              "target": settings.prune, "recipe": settings.recipe,
              "channel_multiple": settings.channel_multiple,
              "bn_recalibrated": bool(getattr(result, "bn_recalibrated", False)),
              "macs": {"before": int(result.macs_before), "after": int(result.macs_after)},
              "layers": [{"layer": names.get(name, name), "before": int(b),
                          "after": int(a)} for name, (b, a) in result.per_layer.items()],
              "group_ratios": {k: round(float(v), 4) for k, v in result.group_ratios.items()}}
    return result.model, record


def _sparsify(trainable: Trainable, settings: CompressSettings,
              progress: Progress) -> tuple[Any, dict]:
    sparsity = 0.5 if settings.pattern == "2:4" else float(settings.prune)
    progress(f"zeroing {sparsity:.0%} of the weights ({settings.pattern})")
    result = sparsify(trainable.model, SparsityConfig(sparsity, settings.pattern))
    if not result.density:
        raise DataError("no layer could be sparsified: " + "; ".join(
            f"{k}: {v}" for k, v in result.skipped.items()) or "no Conv2D/Dense layer")
    return result.model, {"pattern": settings.pattern, "sparsity": sparsity,
                          "density": {k: round(v, 4) for k, v in result.density.items()},
                          "skipped": dict(result.skipped)}


def _distill(handle, trainable: Trainable, student: Any, data, settings: CompressSettings,
             progress: Progress) -> dict:
    name = _single_input(handle)
    inputs = trainable.to_keras_layout(name, data.arrays[name]).astype("float32")
    config = DistillConfig(epochs=settings.epochs, seed=settings.seed)
    bar = _EpochBar(settings.epochs, progress)
    result = distill(runtime_teacher(handle.path, student), student, inputs, data.labels, config,
                     bar)
    return {"epochs_run": len(result.history) - 1, "best_epoch": result.best_epoch,
            "labels": data.labels is not None, "samples": int(len(inputs)),
            "history": [{k: round(float(v), 5) for k, v in h.items()}
                        for h in result.history]}


class _EpochBar:
    """The distillation step with a bar over epochs: `detail (done/total)` messages fill it."""

    def __init__(self, total: int, progress: Progress) -> None:
        self.total, self.progress = total, progress
        progress(f"distilling from the original model (at most {total} epochs)")

    def __call__(self, record: dict) -> None:
        self.progress(f"held-back agreement {record['agreement']:.3f}, loss "
                      f"{record['val_loss']:.4f} ({int(record['epoch'])}/{self.total})")


def _student(handle, settings: CompressSettings) -> Trainable:
    """The user's Keras student, fed samples in its own layout (the teacher may be NCHW)."""
    student_handle = load_model(settings.student)
    if student_handle.format != "keras":
        raise ConfigError(f"--student must be a .keras model (it is trained), not a "
                          f"{student_handle.format} file: {student_handle.path.name}")
    model = load_keras(student_handle.path)
    name = _single_input(handle)
    if len(model.inputs) != 1:
        raise ConfigError(f"--student {student_handle.path.name} has {len(model.inputs)} "
                          "inputs; the teacher has one")
    perm = input_permutation(tuple(model.inputs[0].shape), handle.inputs[0].shape)
    perms = {name: tuple(int(i) for i in np.argsort(perm))} if perm else {}
    return Trainable(model, "keras", input_perms=perms)


def _distill_student(handle, data, settings: CompressSettings,
                     progress: Progress) -> Compressed:
    if data is None:
        raise DataError("--student needs sample inputs to distill on: give --data (an image "
                        "folder, .npz or .npy; labels optional)")
    progress(f"reading the student {Path(settings.student).name}")
    trainable = _student(handle, settings)
    before = None
    if handle.format == "keras":
        before = int(load_keras(handle.path).count_params())
    record = {"pattern": "student", "student": Path(settings.student).name,
              "distillation": _distill(handle, trainable, trainable.model, data, settings,
                                       progress)}
    record["parameters"] = {"before": before, "after": int(trainable.model.count_params())}
    return Compressed(trainable, trainable.model, record)


def compress_model(handle, data, settings: CompressSettings, workdir: Path,
                   progress: Progress) -> Compressed:
    """Prune or sparsify ``handle``'s model, then distill from the original when asked."""
    settings.check()
    if settings.student is not None:
        return _distill_student(handle, data, settings, progress)
    if settings.distill and data is None:
        raise DataError("--distill needs sample inputs: give --data (an image folder, .npz "
                        "or .npy; labels optional)")
    progress(f"reading {handle.path.name} as trainable layers")
    trainable = trainable_model(handle, workdir)
    name = _single_input(handle)
    samples = labels = None
    if data is not None:
        samples = trainable.to_keras_layout(name, data.arrays[name][:64]).astype("float32")
        labels = None if data.labels is None else data.labels[:64]
    if settings.distill:
        require_gradients(trainable.model, samples[:2], "--distill")
    if settings.pattern == "structured":
        model, record = _prune(trainable, settings, samples, labels, progress)
    else:
        model, record = _sparsify(trainable, settings, progress)
    if settings.distill:
        record["distillation"] = _distill(handle, trainable, model, data, settings, progress)
        if settings.pattern != "structured":  # training refills zeroed weights: zero again
            model, again = _sparsify(Trainable(model, trainable.source_format), settings,
                                     progress)
            record["density"] = again["density"]
    record["parameters"] = {"before": int(trainable.model.count_params()),
                            "after": int(model.count_params())}
    return Compressed(trainable, model, record)


def write_model(compressed: Compressed, fmt: str, workdir: Path) -> bytes:
    """The compressed model as .keras, .onnx (ONNX sources) or float .tflite bytes."""
    if fmt == "keras":
        path = workdir / "compressed.keras"
        compressed.model.save(path)
        return path.read_bytes()
    if fmt == "onnx":
        if compressed.trainable.source_format != "onnx":
            raise ConfigError("an .onnx output needs an .onnx input model (edgeopt does not "
                              "export Keras to ONNX); write .tflite or .keras")
        return export_onnx(compressed.trainable.imported, compressed.model)
    _refuse_frozen(compressed.trainable, "only onnxruntime runs it: write -o NAME.onnx and "
                   "build that .onnx for the device")
    if compressed.record["pattern"] in ("2:4", "unstructured"):
        sparse = write_sparse_tflite(compressed.model)
        compressed.record["tflite"] = {"sparse_format": sparse.sparse_format,
                                       "dense_bytes": sparse.dense_bytes,
                                       "sparse_bytes": sparse.sparse_bytes}
        return sparse.content
    source = from_keras(compressed.model, workdir)
    return run_converter(source.converter(), "the compressed model")


# --- `edgeopt compress` -------------------------------------------------------------------

@dataclass(frozen=True)
class CompressResult:
    output: Path
    record: dict


def output_format(output: str) -> str:
    fmt = OUTPUT_FORMATS.get(Path(output).suffix.lower())
    if fmt is None:
        raise ConfigError(f"-o {output}: the output must end in .keras, .tflite or .onnx")
    check_output_path(output)
    return fmt


def _load_data(config: CompressConfig, handle, spec: str | None, role: str):
    if spec is None:
        return None
    data_spec = DataSpec(spec, mean=config.mean, std=config.std, seed=config.settings.seed,
                         calib_role=role)
    return load_data(data_spec, handle.inputs, hold_out=False)[0]


def _bench_ms(content: bytes) -> float:
    """Median single-thread CPU time of one LiteRT invoke (XNNPACK on, as shipped)."""
    return float(measure_tflite(content, MeasureConfig(runs=30, min_secs=0.5)).latency.median)


def _baseline_tflite(handle, compressed: Compressed, workdir: Path) -> bytes | None:
    """The uncompressed model as a float .tflite, to time against (None: not at hand)."""
    if compressed.record["pattern"] != "student":
        return write_model(Compressed(compressed.trainable, compressed.trainable.model,
                                      {"pattern": "structured"}), "tflite", workdir)
    if handle.format == "tflite":
        return handle.tflite_bytes()
    if handle.format == "keras":
        return run_converter(from_keras(load_keras(handle.path), workdir).converter(),
                             "the teacher")
    return None


def _measure(handle, compressed: Compressed, content: bytes, workdir: Path,
             progress: Progress) -> dict:
    """Size and host latency of the uncompressed and compressed float .tflite."""
    progress("measuring host latency (LiteRT, XNNPACK) before and after")
    baseline = _baseline_tflite(handle, compressed, workdir)
    if baseline is None:
        after = _bench_ms(content)
        return {"runtime": "ai-edge-litert, XNNPACK, 1 thread, median CPU time per invoke",
                "before_ms": None, "after_ms": round(after, 4), "ratio": None,
                "before_bytes": None, "after_bytes": len(content),
                "note": f"the {handle.format} teacher is not timed in LiteRT"}
    before, after = _bench_ms(baseline), _bench_ms(content)
    return {"runtime": "ai-edge-litert, XNNPACK, 1 thread, median CPU time per invoke",
            "before_ms": round(before, 4), "after_ms": round(after, 4),
            "ratio": round(after / before, 4) if before else None,
            "before_bytes": len(baseline), "after_bytes": len(content)}


def _agreement(handle, compressed: Compressed, data, source: str) -> dict | None:
    """Every output of the compressed model against the source's (matched by name, as the
    build's parity check matches them): per-output SQNR, cosine and agreement, with top-1
    agreement (and accuracy with labels) where an output is class scores."""
    if data is None:
        return None
    name = _single_input(handle)
    arrays = data.arrays[name][:VALIDATION_SAMPLES]
    labels = None if data.labels is None else data.labels[:VALIDATION_SAMPLES]
    inputs = compressed.trainable.to_keras_layout(name, arrays).astype("float32")
    reference = _source_outputs(handle, compressed.model, inputs)
    out = compressed.model(inputs, training=False)
    out = [np.asarray(o) for o in (out if isinstance(out, list | tuple) else [out])]
    keys = [str(n) for n in getattr(compressed.model, "output_names", None) or []]
    order = match_outputs(handle.outputs, keys if len(keys) == len(out) else
                          [f"output_{i}" for i in range(len(out))],
                          [tuple(o.shape) for o in out])
    out = [_like(out[j], r) for j, r in zip(order, reference)]
    names = [s.name for s in handle.outputs]
    return {**compare(reference, out, labels, names).to_json(), "data": source}


def _source_outputs(handle, student: Any, inputs: np.ndarray) -> list[np.ndarray]:
    """All outputs of the source model, in its own runtime, on student-layout `inputs`
    (the distillation teacher gives only the first)."""
    source = load_model(handle.path)
    runner = make_runner(source)
    perm = input_permutation(tuple(student.inputs[0].shape), source.inputs[0].shape)
    feed = inputs.transpose(perm) if perm else inputs
    return run_dataset(runner, {runner.input_names[0]: np.ascontiguousarray(feed)})


def _like(out: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """An output with no batch axis first ([T, 1, C], kept per sample by the ONNX import)
    has the teacher's values with the 1-sized axis left in: same order, same count."""
    if out.shape != reference.shape and out.size == reference.size and \
            out.shape[:1] == reference.shape[:1]:
        return out.reshape(reference.shape)
    return out


def _cost_warnings(validation: dict | None, distilled: bool = False) -> list[str]:
    """Say so when the compressed model no longer follows the source, on its worst output:
    'ok' with a 1 dB output is not a compression anyone should ship unread (real OCR models
    pruned 30% in one shot came out at 1-2 dB; MTCNN's P-Net kept its scores at 13 dB and
    lost its boxes, 0 dB)."""
    worst = _worst_output(validation or {})
    if worst is None or worst[1] >= LOSSY_SQNR_DB:
        return []
    fix = ("distill longer (--epochs) or prune less (a smaller --prune)" if distilled else
           "prune less (a smaller --prune) or fine-tune with --distill where the model "
           "allows it")
    name, sqnr = worst
    where = f"on output {name!r} " if len((validation or {}).get("outputs") or ()) > 1 else ""
    return [f"the compressed model follows the source at {sqnr:.1f} dB output SQNR "
            f"{where}(below {LOSSY_SQNR_DB:.0f} dB) on {validation['samples']} samples: "
            f"compression cost much; {fix}"]


def _worst_output(validation: dict) -> tuple[str, float] | None:
    """(name, SQNR) of the output that follows the source worst (the pooled figure when
    there are no per-output rows)."""
    rows = [(o["name"], o["sqnr_db"]) for o in validation.get("outputs") or ()
            if o.get("sqnr_db") is not None]
    if rows:
        return min(rows, key=lambda row: row[1])
    sqnr = validation.get("sqnr_db")
    return None if sqnr is None else ("output", sqnr)


def compress(config: CompressConfig, progress: Progress) -> CompressResult:
    """Load, compress, (distill), write OUT atomically; raises EdgeoptError for bad input."""
    fmt = output_format(config.output)
    config.settings.check()
    handle = with_input_shapes(load_model(config.model), config.input_shapes)
    data = _load_data(config, handle, config.data, "sample")
    evaluation = _load_data(config, handle, config.eval, "evaluation")
    with tempfile.TemporaryDirectory(prefix="edgeopt-compress-") as tmp:
        workdir = Path(tmp)
        compressed = compress_model(handle, data, config.settings, workdir, progress)
        progress(f"writing the compressed model as .{fmt}")
        content = write_model(compressed, fmt, workdir)
        record = {"source": {"file": handle.path.name, "format": handle.format,
                             "size_bytes": handle.size_bytes},
                  "output": {"file": str(config.output), "format": fmt,
                             "size_bytes": len(content)},
                  **compressed.record}
        record["validation"] = (
            _agreement(handle, compressed, evaluation, str(config.eval)) if evaluation
            else _agreement(handle, compressed, data, f"{config.data} (the --data samples; "
                            "give --eval for held-out figures)"))
        if fmt == "tflite":
            record["latency"] = _measure(handle, compressed, content, workdir, progress)
    record["warnings"] = list(dict.fromkeys(
        [w for d in (data, evaluation) if d is not None for w in d.warnings]
        + _cost_warnings(record.get("validation"), bool(record.get("distillation")))))
    write_file_atomic(Path(config.output), content)
    return CompressResult(Path(config.output), record)


def render_summary(result: CompressResult) -> str:
    r = result.record
    rows = [("output", f"{result.output} ({r['output']['size_bytes'] / 1024:.1f} KiB, "
                       f"source {r['source']['size_bytes'] / 1024:.1f} KiB)")]
    if r["pattern"] == "student":
        rows.append(("student", f"{r['student']}, distilled from the source"))
    elif "macs" in r:
        rows.append(("MACs", f"{r['macs']['before']:,} -> {r['macs']['after']:,} "
                             f"({r['macs']['after'] / r['macs']['before']:.2f}x)"))
    else:
        rows.append(("sparsity", f"{r['sparsity']:.0%} ({r['pattern']}); "
                                 f"{len(r['density'])} layers sparsified"))
    if r["pattern"] != "student":
        rows.append(("parameters",
                     f"{r['parameters']['before']:,} -> {r['parameters']['after']:,}"))
    if r.get("latency") and r["latency"]["before_ms"] is None:
        lat = r["latency"]
        rows.append(("host latency", f"{lat['after_ms']:.3f} ms ({lat['note']})"))
    elif r.get("latency"):
        lat = r["latency"]
        rows.append(("host latency", f"{lat['before_ms']:.3f} ms -> {lat['after_ms']:.3f} ms "
                                     f"({lat['ratio']:.2f}x, {lat['runtime']})"))
    if r.get("distillation"):
        d = r["distillation"]
        last = d["history"][d["best_epoch"]]
        rows.append(("distillation", f"{d['epochs_run']} epochs, best {d['best_epoch']}: "
                                     f"held-back agreement {last['agreement']:.3f}"))
    if r.get("validation"):
        v = r["validation"]
        text = f"{v['samples']} samples"
        if v.get("top1_agreement") is not None:  # class scores only: no 0 for a box map
            text += f", top-1 agreement {v['top1_agreement']:.3f}"
        if v.get("sqnr_db") is not None:
            pooled = "pooled " if len(v.get("outputs") or ()) > 1 else ""
            text += f", {pooled}output SQNR {v['sqnr_db']:.1f} dB"
        if v["metric"] == "top1_accuracy":
            text += f", accuracy {v['reference']:.4f} -> {v['value']:.4f}"
        rows.append(("vs source", text))
        if len(v.get("outputs") or ()) > 1:
            rows += [(f"  {o['name']}", _output_text(o)) for o in v["outputs"]]
    for layer in r.get("layers", []):
        if layer["before"] != layer["after"]:
            rows.append((f"  {layer['layer']}", f"{layer['before']} -> {layer['after']} channels"))
    rows += [("warning", w) for w in r.get("warnings", [])]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def _output_text(row: dict) -> str:
    """One output's figures against the source, for the summary."""
    text = f"SQNR {row['sqnr_db']:.1f} dB, cosine {row['cosine']:.3f}"
    if row.get("top1_agreement") is not None:
        text += f", top-1 agreement {row['top1_agreement']:.3f}"
    return text
