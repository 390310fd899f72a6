"""`edgeopt build`: load -> convert -> quantize -> validate -> bundle.

    >>> result = build(BuildConfig(model="samples/digits_cnn.keras", device="pixel-npu",
    ...                            calib="samples/digits_calib.npz", output="dist"))
    >>> result.manifest["accuracy"]["metric"]
    'top1_accuracy'
"""

from __future__ import annotations

import copy
import hashlib
import platform
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import numpy as np

from edgeopt import stage_memo
from edgeopt.atomic import check_path_length
from edgeopt.bundle import MANIFEST, check_destination, manifest_bytes, write_bundle
from edgeopt.calibration import onnx_static, tflite_aeq, tflite_converter
from edgeopt.calibration.config import QuantConfig
from edgeopt.calibration.recipes import load_recipe
from edgeopt.calibration.report import render_layer_chart
from edgeopt.calibration.schemes import check_scheme, default_scheme, int4_cpu_note
from edgeopt.comparison import compare_devices, compared_profiles
from edgeopt.compress import CompressSettings, compress_model, write_model
from edgeopt.config import BuildConfig, primary_device
from edgeopt.converters.float_tflite import to_float_tflite
from edgeopt.converters.onnx_adapt import adapt_onnx, adaptation_notes
from edgeopt.converters.onnx_fold import fold_control_flow
from edgeopt.converters.onnx_pin import held_inputs
from edgeopt.converters.parity import check_parity
from edgeopt.converters.tflite_onnx import to_float_onnx
from edgeopt.data import Dataset, DataSpec, load_data, permuted, shapes_from_data
from edgeopt.delegates import place_for_device
from edgeopt.delegates.int16 import int16_support
from edgeopt.delegates.onnx_placement import place_onnx_for_device
from edgeopt.devices.edgetpu import runs_float_ops
from edgeopt.devices.estimator import estimate, estimate_onnx_model
from edgeopt.devices.profile import DeviceProfile, load_profile
from edgeopt.errors import ConfigError, ConversionError
from edgeopt.float_islands import (
    FULL_INTEGER_SCHEMES,
    WRITERS,
    device_note,
    float_ops,
    float_ops_note,
    require_full_integer,
)
from edgeopt.images import NCHW_TO_NHWC
from edgeopt.io_layout import output_layout_changes
from edgeopt.manifest import SCHEMA_VERSION
from edgeopt.model import ModelHandle, TensorSpec, load_keras, load_model, with_input_shapes
from edgeopt.qat_step import QatSettings, after_ptq, check_request
from edgeopt.quantize import quantize_onnx, quantize_tflite
from edgeopt.report import render_report
from edgeopt.rewrite_step import improve
from edgeopt.runtime import LayoutAdapter, OnnxRunner, TFLiteRunner, make_runner, run_dataset
from edgeopt.snippets import usage_snippets
from edgeopt.tflite_metadata import (
    check_labels_file,
    labels_record,
    with_build_metadata,
    with_packed_files,
)
from edgeopt.tflite_prepare import given_scheme
from edgeopt.tflite_reader import read_tflite
from edgeopt.torch_program import ProgramRunner
from edgeopt.validate import LOSSY_SQNR_DB, Validation, check_collapsed, compare

TOOLCHAIN = ("edgeopt", "tensorflow", "ai-edge-litert", "ai-edge-quantizer", "onnx",
             "onnxruntime", "onnx2tf", "tf2onnx", "numpy")
ONNX_ESTIMATE_NOTE = ("the estimator reads .tflite and .onnx graphs; build with --format "
                      "tflite for a latency and energy estimate")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Artifact:
    content: bytes
    format: str
    method: str
    runner: object
    conversion: dict
    quant: object | None = None  # the calibration core's QuantResult, when it made the model
    scheme: str | None = None  # what the artifact is, when not the scheme asked for
    float_model: bytes | None = field(default=None, repr=False)  # the graph it was made from
    # the same build from another float graph (the rewrite step's re-quantization), and
    # a runner for a .tflite of the artifact's layout
    remake: Callable[[bytes], Artifact] | None = field(default=None, repr=False)
    runner_for: Callable[[bytes], object] | None = field(default=None, repr=False)
    qat: dict | None = None  # --qat: the QAT step's record (manifest "qat")


@dataclass(frozen=True)
class BuildResult:
    output: Path
    manifest: dict


def _quiet(_: str) -> None:
    pass


def resolve_scheme(config: BuildConfig, profile: DeviceProfile) -> str:
    scheme = config.scheme or default_scheme(profile.precision, profile.kind)
    check_scheme(scheme, config.format)
    if config.format not in profile.formats:
        raise ConfigError(f"device {profile.name} does not run .{config.format} models "
                          f"(it runs: {', '.join('.' + f for f in profile.formats)})")
    if profile.kind in ("npu", "tpu") and scheme != "w8a8" and profile.precision == "int8":
        raise ConfigError(f"device {profile.name} runs full-integer models only; scheme "
                          f"'{scheme}' would fall back to its CPU (use --scheme w8a8)")
    return scheme


def _build_data(config: BuildConfig, handle: ModelHandle) -> tuple[Dataset, Dataset]:
    """--calib/--eval read as every command reads them (edgeopt.data.load_data)."""
    spec = DataSpec(config.calib, config.eval, config.mean, config.std, config.seed,
                    config.eval_fraction)
    return load_data(spec, handle.inputs)


def _tflite_artifact(handle, config, scheme, profile, calib, evaluation, reference,
                     workdir, keras_model, progress) -> Artifact:
    progress("converting to float .tflite")
    samples = {k: v[:config.parity_samples] for k, v in calib.arrays.items()}
    conv = to_float_tflite(handle, workdir, samples, keras_model)
    names = [s.name for s in handle.inputs]

    def runner_for(content: bytes):
        return LayoutAdapter(TFLiteRunner(content, names), conv.input_perms, conv.output_perms,
                             handle.outputs)

    conversion = {"converter": conv.converter, "float_tflite_bytes": len(conv.tflite),
                  "batch_fixed_to_1": bool(conv.tf_source and conv.tf_source.batch_fixed),
                  "input_layout_changes": {k: list(v) for k, v in conv.input_perms.items()},
                  "output_layout_changes": output_layout_changes(handle, conv.output_perms)}
    if conv.tf_source is not None:
        count = min(config.parity_samples, evaluation.count)
        float_out = run_dataset(runner_for(conv.tflite), evaluation.take(np.arange(count)).arrays)
        parity = check_parity([r[:count] for r in reference], float_out, conv.converter)
        conversion["parity"] = parity.to_json()
    else:
        conversion["note"] = "; ".join(["input was already a float .tflite: no conversion",
                                        *handle.preparation])
    given = given_scheme(read_tflite(conv.tflite)) if conv.tf_source is None else None
    if given is not None:
        return _as_given(conv.tflite, scheme, given, runner_for(conv.tflite), conversion)
    progress(f"quantizing ({scheme}, ranges: {config.method})")
    arrays = permuted(calib.arrays, conv.input_perms)
    if config.method == "converter":
        content, method = _converter_tflite(conv, scheme, profile, arrays)
        return Artifact(content, "tflite", method, runner_for(content), conversion)
    # The held-out samples, as `edgeopt quantize` passes them: the core validates (and
    # searches a budget) on samples it did not calibrate on or choose its ranges with.
    held = permuted(evaluation.arrays, conv.input_perms)
    core_config = quant_config(config, scheme, profile, "tflite")

    def make(content: bytes, source: bool) -> Artifact:
        """The artifact from float graph `content`; `source`: the converted source itself
        (QAT trains only that one; a rewritten graph is re-quantized)."""
        if scheme == "float":
            return Artifact(content, "tflite", "none", runner_for(content), conversion,
                            float_model=content, remake=remake, runner_for=runner_for)
        result = quantize_tflite(content, arrays, core_config, held, evaluation.labels, progress)
        qat = None
        if source:
            result, qat = after_ptq(result, core_config, qat_settings(config), handle=handle,
                                    keras_model=keras_model, runtime_format="tflite",
                                    float_model=conv.tflite, calib_runtime=arrays, calib=calib,
                                    eval_runtime=held, eval_labels=evaluation.labels,
                                    workdir=workdir, progress=progress)
        return Artifact(result.model, "tflite", result.method, runner_for(result.model),
                        conversion, result, qat=qat, float_model=content, remake=remake,
                        runner_for=runner_for)

    def remake(content: bytes) -> Artifact:
        return make(content, source=False)

    return make(conv.tflite, source=True)


def qat_settings(config: BuildConfig) -> QatSettings:
    return QatSettings(enabled=config.qat, epochs=config.qat_epochs, seed=config.seed)


def _as_given(tflite: bytes, scheme: str, given: str, runner, conversion: dict) -> Artifact:
    """An already integer .tflite ships as it is: placed, estimated, validated against
    itself, bundled; asked for another scheme, the build says what to give instead."""
    if scheme != given:
        raise ConfigError(f"the .tflite is already quantized ({given}: integer weights and "
                          f"activations); edgeopt builds it as given with --scheme {given}, "
                          f"not '{scheme}'; give the float model for another scheme")
    note = str(conversion.get("note", "")).replace("already a float .tflite",
                                                   f"already a quantized .tflite ({given})")
    conversion["note"] = f"{note}; shipped as given, not requantized"
    return Artifact(tflite, "tflite", "none (quantized by the model's authors)", runner,
                    conversion, scheme=f"{given} (as given)")


def quant_config(config: BuildConfig, scheme: str, profile: DeviceProfile, fmt: str):
    """The calibration core's config: integer model IO only where the device takes it."""
    integer_io = fmt == "tflite" and scheme in ("w8a8", "w4a8")
    return QuantConfig(scheme=scheme, method=config.method,
                       recipe=load_recipe(config.recipe) if config.recipe else None,
                       accuracy_budget=config.accuracy_budget,
                       int16_search=int16_support(profile.delegate).runs,
                       rescue=not config.accept_collapsed,
                       float_tail=runs_float_ops(profile),
                       io_dtype=profile.io_dtype if integer_io else "float32", seed=config.seed)


def _converter_tflite(conv, scheme: str, profile: DeviceProfile, arrays: dict):
    """The converters' own quantization: the baseline the calibration core is measured by."""
    if scheme == "float":
        return conv.tflite, "none"
    if conv.tf_source is None:
        if scheme == "w8a8":
            return (tflite_aeq.full_integer(conv.tflite, arrays, profile.io_dtype),
                    "ai-edge-quantizer min-max (static, int8 per-channel weights)")
        raise ConversionError(f"--method converter cannot make scheme '{scheme}' from a "
                              ".tflite input; use the calibration core (--method auto)")
    if scheme == "w8a8":
        return (tflite_converter.full_integer(conv.tf_source, arrays, profile.io_dtype),
                "TFLite converter min-max (int8 per-channel weights, int8 activations)")
    if scheme == "fp16":
        return tflite_converter.float16(conv.tf_source), "TFLite converter float16 weights"
    if scheme == "dynamic":
        return tflite_converter.dynamic_range(conv.tf_source), "TFLite converter dynamic range"
    raise ConversionError(f"--method converter cannot make scheme '{scheme}'; use the "
                          "calibration core (--method auto)")


SOURCE_RUNTIMES = {"tflite": "LiteRT", "keras": "Keras", "saved_model": "TensorFlow"}


def _onnx_source(handle, config, calib, evaluation, reference, workdir, keras_model,
                 progress) -> tuple[ModelHandle, dict]:
    """The ONNX model the quantizer reads, and the conversion record: an .onnx as it is; a
    .tflite/Keras/SavedModel converted to float ONNX and checked against the source in its
    own runtime (LiteRT, Keras, TensorFlow) before anything is quantized."""
    if handle.format == "onnx":
        return handle, {"converter": "none (ONNX stays ONNX)",
                        "note": "ONNX target: no format conversion"}
    progress("converting to float ONNX")
    samples = {k: v[:config.parity_samples] for k, v in calib.arrays.items()}
    conv = to_float_onnx(handle, workdir, samples, keras_model)
    path = workdir / f"{handle.stem}_float.onnx"
    path.write_bytes(conv.onnx)
    count = min(config.parity_samples, evaluation.count)
    float_out = run_dataset(OnnxRunner(conv.onnx), evaluation.take(np.arange(count)).arrays)
    parity = check_parity([r[:count] for r in reference], float_out, conv.converter)
    conversion = {"converter": conv.converter, "float_tflite_bytes": conv.float_tflite_bytes,
                  "batch_fixed_to_1": conv.batch_fixed,
                  # the ONNX graph takes and gives the source's layout (tflite_onnx checks)
                  "input_layout_changes": {}, "output_layout_changes": {},
                  "parity": parity.to_json(),
                  "note": "; ".join([f"ONNX target: the {handle.format} model converted to "
                                     "float ONNX through its float .tflite, parity checked "
                                     "against the source in "
                                     f"{SOURCE_RUNTIMES.get(handle.format, handle.format)}",
                                     *conv.preparation])}
    return load_model(path), conversion


def _onnx_artifact(handle, config, scheme, profile, calib, evaluation, workdir,
                   progress, reference=(), keras_model=None) -> Artifact:
    handle, conversion = _onnx_source(handle, config, calib, evaluation, reference, workdir,
                                      keras_model, progress)
    progress(f"quantizing ({scheme}, ranges: {config.method}) for onnxruntime")
    if scheme == "float":
        content = handle.path.read_bytes()
        return Artifact(content, "onnx", "none", OnnxRunner(content), conversion)
    if config.method == "converter":
        content, method = _converter_onnx(handle, scheme, calib)
        return Artifact(content, "onnx", method, OnnxRunner(content), conversion)
    core_config = quant_config(config, scheme, profile, "onnx")
    folded = fold_control_flow(handle, calib.arrays)  # shape-decided If nodes
    if folded is not None:
        conversion["note"] = f"{conversion['note']}; {folded.note}"
    result = quantize_onnx(folded.content if folded else handle.path, calib.arrays,
                           core_config, evaluation.arrays,
                           evaluation.labels, progress)
    result, qat = after_ptq(result, core_config, qat_settings(config), handle=handle,
                            keras_model=None, runtime_format="onnx",
                            float_model=handle.path.read_bytes(), calib_runtime=calib.arrays,
                            calib=calib, eval_runtime=evaluation.arrays,
                            eval_labels=evaluation.labels, workdir=workdir, progress=progress)
    return Artifact(result.model, "onnx", result.method, OnnxRunner(result.model), conversion,
                    result, qat=qat)


def _converter_onnx(handle, scheme: str, calib: Dataset) -> tuple[bytes, str]:
    """onnxruntime.quantization's own calibration: the baseline."""
    import tempfile as _tempfile

    with _tempfile.TemporaryDirectory(prefix="edgeopt-ort-") as tmp:
        out = Path(tmp) / "artifact.onnx"
        if scheme == "w8a8":
            onnx_static.qdq_int8(handle.path, out, calib.arrays)
            method = "onnxruntime quantize_static MinMax (QDQ, int8 per-channel weights)"
        elif scheme == "dynamic":
            onnx_static.dynamic_int8(handle.path, out)
            method = "onnxruntime quantize_dynamic (int8 per-channel weights)"
        elif scheme == "fp16":
            onnx_static.float16(handle.path, out)
            method = "onnxruntime float16 conversion"
        else:
            raise ConversionError(f"--method converter cannot make scheme '{scheme}'; use the "
                                  "calibration core (--method auto)")
        return out.read_bytes(), method


ONNX_PLACEMENT_NOTE = ("placement covers .tflite artifacts (delegate rules) and .onnx "
                       "artifacts (onnxruntime's execution providers) only")


def place_artifact(artifact: Artifact, profile: DeviceProfile, require_full: bool):
    """Per-op placement of the artifact on the device's delegate (Vela for Ethos-U); an .onnx
    artifact on the onnxruntime execution provider that serves the device."""
    if artifact.format == "onnx":
        placement = place_onnx_for_device(artifact.content, profile)
    elif artifact.format != "tflite":
        if require_full:
            raise ConfigError("--require-full-delegation needs a .tflite or .onnx artifact")
        return None
    else:
        placement = place_for_device(artifact.content, profile)
    if require_full:
        placement.require_full_delegation()
    return placement


def _shipped(built: Artifact, config: BuildConfig, handle: ModelHandle,
             profile: DeviceProfile, calib: Dataset) -> Artifact:
    """A built artifact as it ships: the .pt2's export record, TFLite metadata."""
    if handle.torch is not None:  # the .pt2's export, checked against the program
        built = replace(built, conversion={**built.conversion,
                                           "torch_export": handle.torch.record(),
                                           **_litert_note(handle, built.conversion)})
    if built.format == "tflite":  # TFLite metadata: validated and shipped as one file
        built = with_build_metadata(built, config, handle, profile,
                                    _preprocessing(calib, built.conversion))
    return built


def _litert_note(handle: ModelHandle, conversion: dict) -> dict:
    """A .pt2 by the litert route: its float .tflite is litert-torch's, not the user's."""
    if handle.torch is None or handle.torch.route != "litert":
        return {}
    note = conversion.get("note", "")
    given = "input was already a float .tflite: no conversion"
    said = f"the .pt2 converted to a float .tflite by {handle.torch.exporter}"
    return {"note": note.replace(given, said) if given in note
            else "; ".join(filter(None, [said, note]))}


def _placed(placement, config: BuildConfig):
    """The rewrite step's placement of the artifact that ships, checked as the build's own."""
    if config.require_full_delegation:
        placement.require_full_delegation()
    return placement


def _rewrite_step(artifact: Artifact, config: BuildConfig, profile: DeviceProfile,
                  reference: list, evaluation: Dataset, handle: ModelHandle, progress,
                  finish: Callable[[Artifact], Artifact]):
    """The rewrite step (edgeopt.rewrite_step), on the held-out samples the build validates
    on, placing and validating the artifacts as `finish` makes them ship; None when it is
    off or does not apply."""
    if not config.rewrite or artifact.remake is None or artifact.runner_for is None:
        return None
    if artifact.qat and artifact.qat.get("ran"):  # the trained model is not re-quantized
        return None
    names = [o.name for o in handle.outputs]
    count = min(config.parity_samples, evaluation.count)
    probe = evaluation.take(np.arange(count)).arrays

    def float_outputs(content: bytes) -> list:
        return run_dataset(artifact.runner_for(content), probe)

    def validate(candidate: Artifact) -> Validation:
        return compare(reference, run_dataset(candidate.runner, evaluation.arrays),
                       evaluation.labels, names, config.task_spec(), output_ops(candidate))

    return improve(artifact, profile, float_outputs, validate, config.accuracy_budget, progress,
                   finish)


def output_ops(artifact: Artifact) -> list[str | None] | None:
    """The op computing each output, in the source model's output order (the runner pairs
    them as the converter reordered them); None when the calibration core did not write it."""
    ops = artifact.quant.output_ops if artifact.quant is not None else None
    if not ops:
        return None
    order = getattr(artifact.runner, "output_order", None) or list(range(len(ops)))
    return [ops[i] if i < len(ops) else None for i in order]


def _artifact_specs(artifact: Artifact, workdir: Path) -> ModelHandle:
    path = workdir / f"check.{artifact.format}"
    path.write_bytes(artifact.content)
    return load_model(path)


def _toolchain() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in TOOLCHAIN:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def _data_record(config: BuildConfig, calib: Dataset, evaluation: Dataset) -> dict:
    return {"calibration": calib.source, "calibration_samples": calib.count,
            "evaluation": evaluation.source if config.eval else f"held back from {calib.source}",
            "evaluation_samples": evaluation.count, "labels": evaluation.labels is not None,
            "representative": calib.representative,
            "layout_notes": list(dict.fromkeys(calib.notes + evaluation.notes))}


def _preprocessing(calib: Dataset, conversion: dict) -> dict:
    """What the app repeats, in the layout the artifact takes: onnx2tf makes an NCHW image
    input NHWC, so the app feeds the .tflite NHWC (`source_layout` keeps the source's)."""
    record = dict(calib.preprocessing)
    perms = [list(p) for p in (conversion.get("input_layout_changes") or {}).values()]
    if record.get("layout") == "NCHW" and perms == [list(NCHW_TO_NHWC)]:
        record["layout"], record["source_layout"] = "NHWC", "NCHW"
    return record


def _manifest(config, profile, handle, artifact, specs, validation: Validation,
              calib, evaluation, placement=None) -> dict:
    file_name = f"{handle.stem}.{artifact.format}"
    notes = []
    if not calib.representative:
        notes.append("calibrated on random data (--calib random): the accuracy figures are "
                     "not representative; rebuild with real samples before shipping")
    notes += list(dict.fromkeys(calib.warnings + evaluation.warnings))
    notes += _accuracy_notes(validation)
    if artifact.conversion.get("batch_fixed_to_1"):
        notes.append("edgeopt fixed the dynamic batch dimension to 1: mobile delegates (the "
                     "Edge TPU compiler among them) need static shapes")
    parity = artifact.conversion.get("parity")
    if parity and parity["warning"]:
        notes.append(f"float conversion differs from the source (cosine {parity['cosine']:.6f})")
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "model": {"file": file_name, "format": artifact.format,
                  "sha256": hashlib.sha256(artifact.content).hexdigest(),
                  "size_bytes": len(artifact.content)},
        "inputs": _io_records(specs.inputs, handle.inputs, _input_order(artifact, handle)),
        "outputs": _io_records(specs.outputs, handle.outputs,
                               getattr(artifact.runner, "output_order", None)),
        "device": {"name": profile.name, "kind": profile.kind, "delegate": profile.delegate,
                   "description": profile.description},
        "recipe": {"scheme": artifact.scheme or config.scheme, "method": artifact.method,
                   "io_dtype": _io_dtype(specs.inputs)},
        "accuracy": validation.accuracy_json(),
        "validation": _validation_record(validation, artifact, config),
        "placement": None, "estimate": None,  # filled, or explained, by the records below
        "conversion": artifact.conversion,
        "sizes": {"source_bytes": _source_record(handle)["size_bytes"], "float_tflite_bytes":
                  artifact.conversion.get("float_tflite_bytes"),
                  "artifact_bytes": len(artifact.content)},
        "source": {k: v for k, v in _source_record(handle).items() if k != "size_bytes"},
        "data": _data_record(config, calib, evaluation),
        "preprocessing": _preprocessing(calib, artifact.conversion),
        "notes": notes,
        "toolchain": _toolchain(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    labels = labels_record(config.labels, handle, specs.outputs, config.calib, config.eval)
    if labels is not None:
        manifest["labels"] = labels
    _placement_record(manifest, placement, handle.stem)
    _quantization_record(manifest, artifact.quant)
    return manifest


def _source_record(handle: ModelHandle) -> dict:
    """The file the user gave: a .pt2, not the ONNX edgeopt exported from it."""
    if handle.torch is not None:
        path = handle.torch.pt2
        return {"file": path.name, "format": "pt2", "size_bytes": path.stat().st_size}
    if handle.adaptation is not None:  # the user's .onnx, not the rewritten one
        return {"file": handle.path.name, "format": "onnx",
                "size_bytes": handle.adaptation["original_bytes"]}
    return {"file": handle.path.name, "format": handle.format, "size_bytes": handle.size_bytes}


def _reference_runner(handle: ModelHandle, keras_model):
    """What the artifact is validated against: the PyTorch program for a .pt2 input."""
    if handle.torch is not None:
        return ProgramRunner(handle.torch.program)
    return make_runner(handle, keras_model=keras_model)


LAYER_REPORT_ROWS = 50


def _quantization_record(manifest: dict, quant) -> None:
    """The calibration core's ranked layer report and per-layer precision, and its warnings."""
    if quant is None:
        return
    manifest["quantization"] = {
        "layer_report": list(quant.layer_report)[:LAYER_REPORT_ROWS],
        "precision_per_layer": dict(quant.precision_per_layer or {}),
        "search": quant.search}
    if quant.rescue is not None:
        manifest["quantization"]["rescue"] = quant.rescue
    manifest["notes"] += [w for w in quant.warnings if w not in manifest["notes"]]


def _writer(artifact: Artifact) -> str:
    if artifact.method.startswith("TFLite converter"):
        return "the TFLite converter"
    return WRITERS[artifact.format]


def artifact_float_ops(artifact: Artifact, config: BuildConfig) -> list[dict] | None:
    """Full-integer schemes: the ops the written file runs in float (None: not asked of a
    float/fp16/dynamic scheme); --require-full-integer fails on any."""
    if config.scheme not in FULL_INTEGER_SCHEMES:
        if config.require_full_integer:
            raise ConfigError(f"--require-full-integer needs scheme w8a8 or w4a8, got "
                              f"'{config.scheme}'")
        return None
    quant = artifact.quant
    ops = quant.float_ops if quant is not None and quant.float_ops is not None else \
        float_ops(artifact.content, artifact.format, _writer(artifact))
    if config.require_full_integer:
        require_full_integer(ops, config.scheme)
    return ops


def _float_ops_record(manifest: dict, ops: list[dict] | None, scheme: str,
                      profile: DeviceProfile) -> None:
    """quantization.float_ops, a note, and what an int8-only accelerator makes of them."""
    if ops is None:
        return
    record = manifest.setdefault("quantization", {"layer_report": [], "precision_per_layer": {},
                                                  "search": None})
    record["float_ops"] = ops
    if not ops:
        return
    note = float_ops_note(ops, scheme)
    if note not in manifest["notes"]:  # the calibration core's warnings may carry it
        manifest["notes"].append(note)
    if profile.precision == "int8" and profile.kind != "cpu":
        manifest["notes"].append(device_note(ops, profile.name, profile.kind))


ACCURACY_DROP = 0.01


def _validation_record(validation: Validation, artifact: Artifact, config: BuildConfig) -> dict:
    record = {**validation.to_json(), "runtime": _where(artifact)}
    if validation.collapsed:
        record["accepted_collapsed"] = bool(config.accept_collapsed)
    return record


def _accuracy_notes(validation: Validation) -> list[str]:
    """Say so when compression cost more than it should; never hide a collapse."""
    notes = [f"collapsed, built anyway (--accept-collapsed): {line}"
             for line in validation.collapsed]
    notes += [f"not validated: {line}" for line in validation.unjudged]
    for out in validation.outputs:
        if out.worst_sqnr_db < LOSSY_SQNR_DB and not out.collapse_lines():
            notes.append(f"output {out.name!r}: SQNR against the float model is "
                         f"{out.worst_sqnr_db:.1f} dB (below {LOSSY_SQNR_DB:.0f} dB"
                         f"{', worst channel group' if out.groups else ''}): it departs from "
                         "the float one; check it on your task before shipping")
    if not validation.outputs and validation.sqnr_db < LOSSY_SQNR_DB:
        notes.append(f"output SQNR against the float model is {validation.sqnr_db:.1f} dB "
                     f"(below {LOSSY_SQNR_DB:.0f} dB)")
    if not validation.pooled_is_honest:
        what = (f"{len(validation.outputs)} outputs" if len(validation.outputs) > 1 else
                "channel groups of different scales")
        notes.append(f"validation.sqnr_db ({validation.sqnr_db:.1f} dB) pools {what}: read "
                     "the per-output figures (validation.outputs)")
    if validation.delta is not None and validation.metric in ("top1_accuracy", "top1_agreement",
                                                              "detection_f1", "string_match") \
            and validation.delta < -ACCURACY_DROP:
        notes.append(f"{validation.metric} dropped by {-validation.delta:.3f} "
                     f"({validation.reference:.4f} -> {validation.value:.4f})")
    return notes


def _input_order(artifact: Artifact, handle: ModelHandle) -> list[int] | None:
    """The artifact's input index for each source input, as its runner pairs them by name."""
    names = list(getattr(artifact.runner, "input_names", None) or [])
    if sorted(names) != sorted(s.name for s in handle.inputs):
        return None
    return [names.index(s.name) for s in handle.inputs]


def _io_records(artifact_specs, source_specs, order: list[int] | None = None) -> list[dict]:
    """Artifact IO under the source model's names, with the runtime's own tensor names;
    `order` pairs each source output with its artifact output (the converter reorders)."""
    records = []
    order = order or list(range(len(source_specs)))
    for source, index in zip(source_specs, order):
        record = artifact_specs[index].to_json()
        records.append({"name": source.name, "tensor_name": record.pop("name"),
                        "index": index, **record})
    return records


def _compiled_files(manifest: dict, placement) -> dict[str, bytes]:
    compiled = manifest.get("compiled")
    return {compiled["file"]: placement.artifact} if compiled else {}


def _report_details(placement, estimate, quant) -> dict:
    chart = None
    if quant is not None and quant.layer_report:
        chart = render_layer_chart(list(quant.layer_report))
    return {"placement": placement.to_json() if placement is not None else None,
            "layer_chart": chart,
            "estimate": estimate.to_json() if estimate is not None else None}


def estimate_artifact(artifact: Artifact, profile: DeviceProfile, placement,
                      shapes: dict | None = None):
    """Latency and energy of one inference from the device profile (.tflite and .onnx; an
    .onnx artifact's dynamic inputs at ``shapes``, the build's input shapes)."""
    if artifact.format == "onnx":
        return estimate_onnx_model(artifact.content, profile, placement, shapes)
    if artifact.format != "tflite":
        return None
    return estimate(read_tflite(artifact.content), profile, placement, artifact.content)


def _estimate_record(manifest: dict, estimate) -> None:
    if estimate is None:
        manifest["estimate"], manifest["estimate_note"] = None, ONNX_ESTIMATE_NOTE
        return
    manifest["estimate"] = estimate.manifest_json()
    manifest["notes"] += [n for n in estimate.notes if n not in manifest["notes"]]


def _placement_record(manifest: dict, placement, stem: str) -> None:
    """Fill the manifest's placement (and Vela's compiled model) or say why it is empty."""
    if placement is None:
        manifest["placement"], manifest["placement_note"] = None, ONNX_PLACEMENT_NOTE
        return
    manifest["placement"] = placement.manifest_json()
    manifest["notes"] += list(placement.notes)
    if placement.artifact:
        name = f"{stem}_vela.tflite"
        manifest["compiled"] = {
            "file": name, "sha256": hashlib.sha256(placement.artifact).hexdigest(),
            "size_bytes": len(placement.artifact), "for": placement.delegate,
            "figures": dict(placement.compiler or {})}


def _io_dtype(inputs: tuple[TensorSpec, ...]) -> str:
    return inputs[0].dtype if inputs else "float32"


def _where(artifact: Artifact) -> str:
    return f"host {platform.machine()}, {artifact.runner.label}"


def _parity_reference(source, keras_model, evaluation: Dataset, config: BuildConfig,
                      reference: list, compression) -> list:
    """What the float conversion must reproduce: the compressed model, when there is one."""
    if compression is None:
        return reference
    count = min(config.parity_samples, evaluation.count)
    return run_dataset(make_runner(source, keras_model=keras_model),
                       evaluation.take(np.arange(count)).arrays)


REUSE_NOTES = {  # a sweep worker's build that took a stage's result from an earlier candidate
    "compress": "the compressed model (and its compression figures) come from an earlier "
                "candidate of this sweep with the same model, data and settings",
    "float_conversion": "the float conversion comes from an earlier candidate of this sweep "
                        "with the same model and samples"}


def compress_stage(handle: ModelHandle, keras_model, config: BuildConfig, calib: Dataset,
                   workdir: Path, progress: Progress):
    """Prune (and distill) before quantizing, when asked: (source, keras model, record).

    The reference outputs stay the original model's, so the validation figures include
    what pruning cost. The compressed model is written to the work folder and loaded like
    any input: Keras stays Keras, ONNX comes back as ONNX with its node names.
    """
    if config.prune is None and config.prune_recipe is None:
        return handle, keras_model, None
    settings = CompressSettings(prune=config.prune, criterion=config.prune_criterion,
                                recipe=config.prune_recipe, distill=config.distill,
                                epochs=config.distill_epochs, seed=config.seed,
                                channel_multiple=config.prune_channel_multiple)
    fmt = "onnx" if handle.format == "onnx" else "keras"
    path = workdir / f"{handle.stem}_compressed.{fmt}"
    memo_key = stage_memo.entry_key(handle.files, handle.inputs, handle.outputs, calib.arrays,
                                    calib.labels, settings)
    kept = stage_memo.recall("compress", memo_key)
    if kept is not None:  # a sweep's earlier candidate: same model, data and settings
        content, record = kept
        progress("reusing the compressed model of an earlier candidate (same model, data "
                 "and settings)")
        path.write_bytes(content)
        # a copy: the manifest this build writes must not reach into the kept record
        return (load_model(path), (load_keras(path) if fmt == "keras" else None),
                copy.deepcopy(record))
    compressed = compress_model(handle, calib, settings, workdir, progress)
    content = write_model(compressed, fmt, workdir)
    path.write_bytes(content)
    record = {**compressed.record, "size_bytes": {"before": handle.size_bytes,
                                                  "after": len(content)}}
    stage_memo.keep("compress", memo_key, (content, copy.deepcopy(record)), len(content))
    return load_model(path), (compressed.model if fmt == "keras" else None), record


def build(config: BuildConfig, progress: Progress = _quiet) -> BuildResult:
    """Run the pipeline and write the bundle; raises EdgeoptError for bad input."""
    profile = load_profile(primary_device(config.device))
    compared = compared_profiles(config.device, config.format)
    output = Path(config.output)
    check_destination(output)
    handle, pinned = held_inputs(with_input_shapes(load_model(config.model, config.torch_route),
                                                   config.input_shapes), config.input_values)
    config.task_spec().check_outputs([o.name for o in handle.outputs])
    check_path_length(output / f"{handle.stem}.{config.format}")  # the bundle's model file
    config = replace(config, scheme=resolve_scheme(config, profile))
    calib, evaluation = _build_data(config, handle)
    handle, calib, fixed = shapes_from_data(handle, calib)
    handle = adapt_onnx(handle, pinned, calib.arrays)  # --input-value, dynamic quantization
    for note in fixed + adaptation_notes(handle):
        progress(note)
    check_request(qat_settings(config), handle, calib, config.scheme)
    if config.qat and config.method == "converter":
        raise ConfigError("--qat writes with the calibration core's writers; drop "
                          "--method converter")
    if config.format == "tflite" and config.labels:  # a bad label file fails before the work
        check_labels_file(config.labels, handle)
    keras_model = None
    if handle.format == "keras":
        keras_model = load_keras(handle.path)
    progress(f"running the float {'PyTorch' if handle.torch else handle.format} model on "
             f"{evaluation.count} samples")
    reference = run_dataset(_reference_runner(handle, keras_model), evaluation.arrays)
    with stage_memo.hits() as reused, tempfile.TemporaryDirectory(prefix="edgeopt-build-") as tmp:
        workdir = Path(tmp)
        source, keras_model, compression = compress_stage(handle, keras_model, config, calib,
                                                          workdir, progress)
        if config.format == "tflite":
            artifact = _tflite_artifact(source, config, config.scheme, profile, calib,
                                        evaluation, _parity_reference(
                                            source, keras_model, evaluation, config, reference,
                                            compression), workdir, keras_model, progress)
        else:
            artifact = _onnx_artifact(source, config, config.scheme, profile, calib, evaluation,
                                      workdir, progress, _parity_reference(
                                          source, keras_model, evaluation, config, reference,
                                          compression), keras_model)
        finish = partial(_shipped, config=config, handle=handle, profile=profile, calib=calib)
        rewrite = _rewrite_step(artifact, config, profile, reference, evaluation, handle,
                                progress, finish)
        artifact = rewrite.artifact if rewrite is not None else finish(artifact)
        islands = artifact_float_ops(artifact, config)
        # the step validated what ships, on these samples, when it built a candidate
        validation = rewrite.validation if rewrite is not None else None
        if validation is None:
            progress(f"validating in {artifact.runner.label} on {evaluation.count} evaluation "
                     "samples")
            validation = compare(reference, run_dataset(artifact.runner, evaluation.arrays),
                                 evaluation.labels, [o.name for o in handle.outputs],
                                 config.task_spec(), output_ops(artifact))
        check_collapsed(validation, config.accept_collapsed)
        specs = _artifact_specs(artifact, workdir)
    progress(f"placing ops on {profile.delegate}")
    placement = (place_artifact(artifact, profile, config.require_full_delegation)
                 if rewrite is None else _placed(rewrite.placement, config))
    if placement is not None and placement.artifact:  # Vela keeps the metadata, not its files
        placement = replace(placement, artifact=with_packed_files(artifact.content,
                                                                  placement.artifact))
    progress(f"estimating latency and energy on {profile.name}")
    estimate = estimate_artifact(artifact, profile, placement,
                                 {spec.name: spec.shape for spec in handle.inputs})
    manifest = _manifest(config, profile, handle, artifact, specs, validation, calib,
                         evaluation, placement)
    _estimate_record(manifest, estimate)
    _float_ops_record(manifest, islands, config.scheme, profile)
    if rewrite is not None and rewrite.record is not None:
        manifest["rewrites"] = rewrite.record
    if handle.adaptation is not None:
        manifest["onnx_rewrite"] = handle.adaptation
        manifest["notes"][:0] = adaptation_notes(handle)
    scheme_note = int4_cpu_note(config.scheme, profile.kind)
    if scheme_note:
        manifest["notes"].insert(0, scheme_note)
    if compression is not None:
        manifest["compression"] = compression
    manifest["notes"].extend(REUSE_NOTES[stage] for stage in dict.fromkeys(reused))
    if artifact.qat is not None:
        manifest["qat"] = artifact.qat
    if compared:
        manifest["comparison"] = compare_devices(
            artifact.content, (profile, placement, estimate), compared, progress,
            artifact.format, {spec.name: spec.shape for spec in handle.inputs})
    files = {manifest["model"]["file"]: artifact.content,
             **_compiled_files(manifest, placement), MANIFEST: manifest_bytes(manifest),
             "report.html": render_report(
                 manifest, _report_details(placement, estimate, artifact.quant)).encode(),
             "edgeopt.toml": config.to_toml(output).encode(), **usage_snippets(manifest)}
    progress(f"writing {output}")
    write_bundle(output, files)
    return BuildResult(output, manifest)
