"""Quantization-aware training: the step after post-training quantization misses a budget.

    PTQ result --(missed the budget, or --qat)--> fold BN -> fake-quant graph on the core's
    ranges -> distill from the float model in its own runtime (labels optional, early
    stopping on a held-back share) -> trained float weights + learned ranges -> the SAME
    writer (ai-edge-quantizer / onnxruntime QDQ) -> validated in the real runtime

The figure the user sees is the runtime's on held-out data, PTQ and QAT side by side.

    >>> outcome = run_qat(job, ptq_result, config, QatSettings(epochs=10), workdir, progress)
    >>> outcome.record["ptq"]["value"], outcome.record["qat"]["value"]   # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.calibration.config import Precision, QuantConfig, QuantResult
from edgeopt.calibration.engine import quantize_with
from edgeopt.calibration.fakequant import RANGE_VARIABLES
from edgeopt.calibration.finish import validate
from edgeopt.calibration.qat import (
    equalize_separable,
    fold_batchnorm,
    keras_values,
    layer_ranges,
    learned_ranges,
    match_tensors,
    merge_separable,
    qat_model,
    quantized_layer_count,
    runtime_ranges,
    split_separable,
    trained_float,
    training_view,
    unfold_into,
)
from edgeopt.calibration.session import open_format
from edgeopt.compress import trainable_model
from edgeopt.compression import DistillConfig, distill
from edgeopt.compression.distill import require_gradients
from edgeopt.compression.teacher import runtime_teacher
from edgeopt.converters.float_tflite import to_float_tflite
from edgeopt.converters.onnx_keras import export_onnx
from edgeopt.converters.onnx_to_tf import fixed_shapes
from edgeopt.converters.tf_source import from_keras, run_converter
from edgeopt.errors import ConfigError, DataError
from edgeopt.model import load_model, with_input_shapes

Progress = Callable[[str], None]
PROBE_SAMPLES = 2          # samples that match runtime tensors to Keras outputs
QAT_SCHEMES = ("w8a8",)


@dataclass(frozen=True)
class QatSettings:
    """`--qat [--epochs N]`: knobs of the QAT step, defaults visible."""

    enabled: bool = False
    epochs: int = 10
    # fine-tuning a trained model: Adam moves every weight by about the rate at first,
    # whatever its size, and 2e-4 threw a converged model off (its held-back loss x7)
    learning_rate: float = 2e-5
    # the quantizer ranges' own rate, in shares of each range's width per step (fakequant.
    # ActivationQuantizer). Off by default: on fer_emotion the ranges never moved (a min/max
    # start clips nothing), and on magika every rate tried (1e-4, 5e-4, 2e-3) lowered the
    # training graph's loss but left the runtime's int8 model 5-9 points below fixed
    # ranges (91.2% labelled; BENCHMARKS.md, issue 19 session 13)
    range_learning_rate: float = 0.0
    # equalize the channels between a SeparableConv2D's two halves before training: those
    # int8 tensors made 45% of the variance of fer_emotion's logit error; equalized, its
    # spread fell about 10% (flips: within the run-to-run spread; BENCHMARKS.md)
    equalize: bool = True
    batch_size: int = 32
    patience: int = 3
    seed: int = 0

    def check(self, scheme: str) -> None:
        if not self.enabled:
            return
        if self.epochs < 1:
            raise ConfigError(f"--epochs must be at least 1, got {self.epochs}")
        if scheme not in QAT_SCHEMES:
            raise ConfigError(f"--qat trains full-integer int8 models (--scheme w8a8), not "
                              f"'{scheme}'")


@dataclass
class QatJob:
    """What the step trains on, in the two layouts it needs (same samples, same order)."""

    source: Path                      # the user's float model: the teacher, in its runtime
    model: Any                        # the trainable Keras model (ONNX: edgeopt's import)
    runtime_format: str               # "tflite" or "onnx": what the writer writes
    float_model: bytes                # the float model PTQ quantized (the core's ranges)
    calib: dict[str, np.ndarray]      # runtime layout
    train_inputs: np.ndarray          # Keras layout
    train_labels: np.ndarray | None = None
    evaluation: dict[str, np.ndarray] | None = None   # runtime layout, held out
    eval_labels: np.ndarray | None = None
    imported: Any = None              # converters.onnx_keras.Imported for ONNX writers
    input_specs: Any = None           # the handle's TensorSpecs (fixed dims)


@dataclass
class QatOutcome:
    result: QuantResult               # what ships: QAT's, or PTQ's when QAT did not help
    record: dict = field(default_factory=dict)


def not_full_integer(result: QuantResult) -> list[str]:
    """Layers the PTQ result keeps above int8 (the precision search's raises)."""
    low = {str(Precision.INT8), str(Precision.INT4)}
    return [n for n, p in result.precision_per_layer.items() if p not in low]


def why_qat(result: QuantResult, config: QuantConfig, settings: QatSettings) -> str | None:
    """Why QAT runs, or None when it does not (PTQ met the budget at full integer)."""
    if not settings.enabled:
        return None
    if config.accuracy_budget is None:
        return "--qat (no accuracy budget: forced)"
    search = result.search or {}
    raised = not_full_integer(result)
    if search.get("float_fallback"):
        return f"post-training quantization missed the budget {config.accuracy_budget} " \
               "(only the float model met it)"
    if raised:
        return f"post-training quantization met the budget {config.accuracy_budget} only " \
               f"with {len(raised)} layer(s) above int8"
    return None


def skipped_record(result: QuantResult, config: QuantConfig) -> dict:
    return {"ran": False, "reason": f"post-training quantization already meets the budget "
            f"{config.accuracy_budget} at full integer: QAT skipped",
            "ptq": _figures(result)}


def _figures(result: QuantResult) -> dict:
    v = result.validation or {}
    return {"metric": v.get("metric"), "reference": v.get("reference"), "value": v.get("value"),
            "sqnr_db": v.get("sqnr_db"), "top1_agreement": v.get("top1_agreement"),
            "samples": v.get("samples"), "layers_above_int8": len(not_full_integer(result))}


def check_job(job: QatJob) -> None:
    if len(job.train_inputs) < 8:
        raise DataError(f"--qat trains on the calibration samples: {len(job.train_inputs)} "
                        "is too few (give at least 8, better hundreds)")


def _runtime_values(kind: str, model: bytes, probe: dict) -> dict[str, np.ndarray]:
    fmt = open_format(kind, model)
    batches = list(fmt.capture().stream(probe, set(fmt.graph.activations), PROBE_SAMPLES))
    # a capture may hand out fewer samples per batch than asked (onnxruntime's: one)
    return {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}


def _matches(job: QatJob, kind_model: bytes, keras_model: Any) -> dict[str, str]:
    probe = {k: v[:PROBE_SAMPLES] for k, v in job.calib.items()}
    return match_tensors(_runtime_values(job.runtime_format, kind_model, probe),
                         keras_values(keras_model, job.train_inputs[:PROBE_SAMPLES]))


def training_graph(job: QatJob, ptq: QuantResult,
                   settings: QatSettings = QatSettings()) -> tuple[Any, Any]:
    """(BN-folded float model, fake-quant training graph on the core's ranges; the
    equalized tensors between separable halves on their own new ranges)."""
    split = split_separable(job.model)
    equalized = (equalize_separable(split, job.train_inputs)
                 if settings.equalize and split is not job.model else {})
    folded = fold_batchnorm(split)
    core = {t: (r["min"], r["max"]) for t, r in ptq.ranges.items()}
    ranges = {**layer_ranges(_matches(job, job.float_model, folded), core), **equalized}
    student = qat_model(folded, ranges)
    if quantized_layer_count(student) == 0:
        raise ConfigError("--qat: the model has no trainable quantized layer (no Conv2D, "
                          "DepthwiseConv2D or Dense with channels-last weights)")
    require_gradients(student, job.train_inputs[:2], "--qat", RANGE_VARIABLES)
    return folded, student


class _EpochBar:
    """The QAT step's bar over epochs: `detail (done/total)` messages fill it."""

    def __init__(self, total: int, progress: Progress) -> None:
        self.total, self.progress = total, progress
        progress(f"quantization-aware training (at most {total} epochs)")

    def __call__(self, record: dict) -> None:
        self.progress(f"QAT held-back agreement {record['agreement']:.3f}, loss "
                      f"{record['val_loss']:.4f} ({int(record['epoch'])}/{self.total})")


def train(job: QatJob, student: Any, settings: QatSettings, progress: Progress) -> dict:
    """Distillation from the float model in its own runtime (labels mixed in when given),
    the best held-back epoch's weights kept."""
    config = DistillConfig(epochs=settings.epochs, batch_size=settings.batch_size,
                           learning_rate=settings.learning_rate, patience=settings.patience,
                           learning_rates=tuple((suffix, settings.range_learning_rate)
                                                for suffix in RANGE_VARIABLES),
                           augment=(), seed=settings.seed)
    result = distill(runtime_teacher(job.source, student), student, job.train_inputs,
                     job.train_labels, config, _EpochBar(settings.epochs, progress))
    return {"epochs_run": len(result.history) - 1, "best_epoch": result.best_epoch,
            "epochs_max": settings.epochs, "labels": job.train_labels is not None,
            "samples": int(len(job.train_inputs)),
            "history": [{k: round(float(v), 5) for k, v in h.items()} for h in result.history]}


def export_model(job: QatJob, trained: Any, workdir: Path) -> bytes:
    """The trained float model in the runtime's format, for the same writer as PTQ. An
    ONNX source goes back into its own graph, then (for a .tflite) through the same
    conversion as PTQ's float model: the import keeps some nodes in onnxruntime, which the
    TFLite converter cannot read from Keras."""
    if job.imported is None:
        if job.runtime_format == "onnx":
            raise ConfigError("--qat with an .onnx artifact needs an .onnx source model")
        return run_converter(from_keras(trained, workdir, job.input_specs).converter(),
                             "the QAT model")
    split = unfold_into(split_separable(job.model), trained)
    content = export_onnx(job.imported, merge_separable(job.model, split))
    if job.runtime_format == "onnx":
        return content
    path = workdir / "qat_trained.onnx"
    path.write_bytes(content)
    handle = load_model(path)
    return to_float_tflite(with_input_shapes(handle, tuple(fixed_shapes(handle))),
                           workdir).tflite


def _quantize(job: QatJob, content: bytes, config: QuantConfig, fixed: dict,
              progress: Progress) -> QuantResult:
    qat_config = config.replace(bias_correction=False, accuracy_budget=None)
    fmt = open_format(job.runtime_format, content, config.num_threads)
    return quantize_with(fmt, job.calib, qat_config, job.evaluation, job.eval_labels, progress,
                         fixed)


class _Phases:
    """Wall seconds per part of the step (where the time goes: the record's phase_seconds)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str, fn: Callable, *args) -> Any:
        started = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.seconds[name] = round(time.monotonic() - started, 1)


def run_qat(job: QatJob, ptq: QuantResult, config: QuantConfig, settings: QatSettings,
            reason: str, workdir: Path, progress: Progress) -> QatOutcome:
    """Train through the quantizer and write the result with PTQ's writer; the better of
    the two on the held-out samples ships (QAT unless it lost)."""
    check_job(job)
    started, phases = time.monotonic(), _Phases()
    progress(f"QAT: {reason}")
    folded, student = phases("graph", training_graph, job, ptq, settings)
    training = phases("train", train, job, training_view(student, folded, job.train_inputs[:8]),
                      settings, progress)
    trained = trained_float(student, folded)
    content = phases("export", export_model, job, trained, workdir)
    fixed = phases("match", lambda: runtime_ranges(_matches(job, content, trained),
                                                   learned_ranges(student)))
    progress(f"QAT: writing int8 with {len(fixed)} activation ranges from training")
    result = phases("write", _quantize, job, content, config, fixed, progress)
    result = phases("validate", against_source_float, job, result)
    result = replace(result, method=f"quantization-aware training ({training['epochs_run']} "
                     f"epochs, {len(fixed)} activation ranges from training); other tensors "
                     f"{result.method}")
    record = {"ran": True, "reason": reason, **training,
              "quantized_layers": quantized_layer_count(student),
              "learned_ranges": len(fixed), "seconds": round(time.monotonic() - started, 1),
              "phase_seconds": phases.seconds, "ptq": _figures(ptq), "qat": _figures(result)}
    shipped = choose(ptq, result, config, record)
    return QatOutcome(shipped, record)


def against_source_float(job: QatJob, result: QuantResult) -> QuantResult:
    """The QAT model's figures against the user's float model (the writer compared it with
    the trained float model), so PTQ and QAT are measured from the same reference."""
    if job.evaluation is None:
        return result
    fmt = open_format(job.runtime_format, job.float_model)
    figures = validate(fmt, result.model, job.evaluation, job.eval_labels)
    return replace(result, validation={**(result.validation or {}), **figures})


def _score(result: QuantResult) -> float:
    v = result.validation or {}
    value = v.get("value")
    return float(value) if v.get("metric") in ("top1_accuracy", "top1_agreement") and \
        value is not None else float(v.get("sqnr_db") or -np.inf)


def _meets(result: QuantResult, budget: float) -> bool:
    v = result.validation or {}
    if v.get("metric") == "top1_accuracy" and v.get("reference") is not None:
        return (v["reference"] - v["value"]) * 100 <= budget + 1e-9
    return float(v.get("sqnr_db") or -np.inf) >= budget


def choose(ptq: QuantResult, qat: QuantResult, config: QuantConfig, record: dict) -> QuantResult:
    """QAT ships when forced or when it meets the budget; else PTQ's (mixed) result."""
    budget = config.accuracy_budget
    if budget is None or _meets(qat, budget):
        record["shipped"] = "qat"
        if budget is None and _score(qat) < _score(ptq):
            record["note"] = (f"--qat ships QAT's int8 model as asked, though it scored below "
                              f"the post-training one on the held-out samples "
                              f"({_score(qat):.4g} vs PTQ {_score(ptq):.4g}); without --qat, "
                              "or with --accuracy-budget, the better result ships")
        return qat
    record["shipped"] = "ptq"
    record["note"] = (f"QAT's int8 model missed the budget {budget} too (held-out "
                      f"{_score(qat):.4g} vs PTQ {_score(ptq):.4g}); the post-training "
                      "result ships")
    return ptq


# --- the hook after post-training quantization (build and quantize) ------------------------

TRAINABLE_FORMATS = ("keras", "onnx")


def check_request(settings: QatSettings, handle: Any, calib: Any, scheme: str) -> None:
    """Bad --qat input, said before any work: no real samples, no trainable source."""
    if not settings.enabled:
        return
    settings.check(scheme)
    if calib is None or not calib.representative:
        raise DataError("--qat trains on real samples: give --calib (an image folder, .npz or "
                        ".npy; labels optional)")
    if handle.format not in TRAINABLE_FORMATS:
        raise ConfigError(f"--qat trains Keras models, and ONNX models through edgeopt's "
                          f"ONNX->Keras import; a {handle.format} source has no trainable "
                          f"graph ({handle.path.name})")
    if len(handle.inputs) != 1:
        raise ConfigError(f"--qat trains single-input models; {handle.path.name} has "
                          f"{len(handle.inputs)} inputs")


def _trainable(handle: Any, keras_model: Any, workdir: Path) -> tuple[Any, Any, Callable]:
    """(Keras model, ONNX import or None, source-layout -> Keras-layout function)."""
    if handle.format == "keras" and keras_model is not None:
        return keras_model, None, lambda _name, array: array
    trainable = trainable_model(handle, workdir)
    return trainable.model, trainable.imported, trainable.to_keras_layout


def after_ptq(ptq: QuantResult, config: QuantConfig, settings: QatSettings, *, handle: Any,
              keras_model: Any, runtime_format: str, float_model: bytes,
              calib_runtime: dict, calib: Any, eval_runtime: dict | None, eval_labels: Any,
              workdir: Path, progress: Progress) -> tuple[QuantResult, dict | None]:
    """The PTQ result, or QAT's when --qat asks for it: (result, manifest record)."""
    if not settings.enabled:
        return ptq, None
    reason = why_qat(ptq, config, settings)
    if reason is None:
        record = skipped_record(ptq, config)
        progress(record["reason"])
        return ptq, record
    model, imported, to_keras = _trainable(handle, keras_model, workdir)
    name = handle.inputs[0].name
    job = QatJob(handle.path, model, runtime_format, float_model, calib_runtime,
                 np.asarray(to_keras(name, calib.arrays[name]), np.float32), calib.labels,
                 eval_runtime, eval_labels, imported, handle.inputs)
    outcome = run_qat(job, ptq, config, settings, reason, workdir, progress)
    return outcome.result, outcome.record


def _g(value) -> str:
    return "—" if value is None else f"{value:.4g}"


def qat_summary(record: dict | None) -> list[str]:
    """PTQ and QAT side by side on the held-out samples (or why QAT did not run)."""
    if not record:
        return []
    if not record.get("ran"):
        return [record["reason"]]
    ptq, qat = record["ptq"], record["qat"]
    lines = [f"{record['epochs_run']} epochs (best {record['best_epoch']}), "
             f"{record['seconds']:.0f} s, {'labels' if record['labels'] else 'distillation'}; "
             f"{qat['metric']}: PTQ {_g(ptq['value'])} -> QAT {_g(qat['value'])} (SQNR "
             f"{_g(ptq['sqnr_db'])} -> {_g(qat['sqnr_db'])} dB); shipped {record['shipped']}"]
    return lines + ([record["note"]] if record.get("note") else [])
