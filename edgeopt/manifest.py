"""The bundle manifest as a typed model; `manifest.schema.json` is generated from it.

    >>> manifest = parse_manifest(json.loads(Path("dist/manifest.json").read_text()))
    >>> manifest.model.sha256, manifest.accuracy.delta                  # doctest: +SKIP

Every key the manifest carries is a field here, and nothing else is allowed: the writer
(`edgeopt.bundle.manifest_bytes`) checks each manifest against this model before it is
written, so a new key goes into a class below (and the schema is regenerated) or the build
fails its tests. Regenerate the schema with

    python -m edgeopt.manifest --write     # --check exits 1 if the file is stale

Records whose keys belong to a third-party tool or vary by algorithm (compiler figures,
the precision search) are typed as string-keyed maps, and say so.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from edgeopt.atomic import write_file_atomic
from edgeopt.typed_json import ContractError, dataclass, document_schema, field, parse

SCHEMA_VERSION = 1
SCHEMA_FILE = "manifest.schema.json"
SCHEMA_ID = "edgeopt-manifest-v1"
TITLE = "edgeopt bundle manifest, schema_version 1"
DeviceKind = Literal["cpu", "gpu", "npu", "tpu"]
Metric = Literal["top1_accuracy", "top1_agreement", "sqnr_db", "min_output_sqnr_db",
                 "detection_f1", "string_match", "relative_error"]
OutputKind = Literal["classes", "sequence", "values"]
Task = Literal["classify", "detect", "sequence", "regress"]
NON_NEGATIVE = {"minimum": 0}
SHA256 = {"pattern": "^[0-9a-f]{64}$"}
FILE_NAME = {"pattern": "^[^/\\\\]+$"}


def _opt(default: Any = None, **meta: Any) -> Any:
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class ModelFile:
    """The model file of the bundle, as the app loads it."""

    file: str = field(metadata=FILE_NAME)
    format: Literal["tflite", "onnx"]
    sha256: str = field(metadata=SHA256)
    size_bytes: int = field(metadata={"minimum": 1})


@dataclass(frozen=True)
class TensorQuantization:
    """real = scale * (q - zero_point)."""

    scale: float = field(metadata={"exclusiveMinimum": 0})
    zero_point: int


@dataclass(frozen=True)
class Tensor:
    """One model input or output: the source model's name, the runtime's tensor name."""

    name: str
    shape: list[int]
    dtype: str
    quantization: TensorQuantization | None
    tensor_name: str | None = None
    index: int | None = _opt(minimum=0)


@dataclass(frozen=True)
class Device:
    """The device profile the bundle was built for."""

    name: str
    kind: DeviceKind
    delegate: str
    description: str | None = None


@dataclass(frozen=True)
class Recipe:
    """The quantization scheme and how activation ranges were chosen."""

    scheme: str
    method: str
    io_dtype: str | None = None


@dataclass(frozen=True)
class Accuracy:
    """The task metric of the artifact against the float model on the evaluation samples."""

    metric: Metric
    reference: float | None
    value: float | None
    delta: float | None


@dataclass(frozen=True)
class ChannelGroupFigures:
    """Channels [start, end) of one output: a --boxes/--scores slice, or a group whose float
    magnitudes differ from the rest of the output by an order of magnitude or more."""

    axis: int
    start: int = field(metadata=NON_NEGATIVE)
    end: int = field(metadata={"minimum": 1})
    role: Literal["boxes", "scores"] | None
    float_min: float
    float_max: float
    sqnr_db: float | None
    cosine: float | None
    max_abs: float | None
    collapsed: str | None = _opt(description="why the artifact's values no longer follow the "
                                 "float ones (null: they do)")
    unjudged: str | None = _opt(description="why these figures cannot judge the artifact "
                                "(numerically zero in the float model); null: they can")


@dataclass(frozen=True)
class OutputFigures:
    """One output of the artifact against the float model's, on the validation samples."""

    name: str
    kind: OutputKind = field(metadata={"description": "classes: top-1 agreement; sequence: "
                                       "per-step agreement and greedy CTC string match; "
                                       "values: relative and absolute error"})
    samples: int = field(metadata={"minimum": 1})
    sqnr_db: float | None
    cosine: float | None
    max_abs: float | None
    mean_abs: float | None
    relative_error: float | None = _opt(description="mean |artifact - float| / mean |float|")
    top1_agreement: float | None = None
    step_agreement: float | None = None
    string_match: float | None = _opt(description="share of samples whose greedy CTC strings "
                                      "(argmax per step, repeats collapsed, blank_index "
                                      "dropped) are identical")
    blank_index: int | None = _opt(minimum=0)
    collapsed: str | None = _opt(description="why the artifact's values no longer follow the "
                                 "float ones (null: they do)")
    groups: list[ChannelGroupFigures] | None = None
    unjudged: str | None = _opt(description="why these figures cannot judge the artifact "
                                "(the held-out data does not exercise the output); null: "
                                "they can")


@dataclass(frozen=True)
class TaskFigure:
    """--task: the task metric of the artifact against the float model."""

    task: Task
    metric: Literal["top1_agreement", "detection_f1", "string_match", "relative_error"]
    value: float | None
    samples: int = field(metadata={"minimum": 1})
    outputs: list[str]
    details: dict[str, Any] = field(metadata={"description": "how it was measured (thresholds, "
                                              "detection counts, decoder; keys vary by task)"})


@dataclass(frozen=True)
class Validation:
    """All validation figures of the artifact in its real runtime against the float model."""

    samples: int = field(metadata={"minimum": 1})
    metric: Metric
    reference: float | None
    value: float | None
    delta: float | None
    top1_agreement: float | None
    sqnr_db: float | None = field(metadata={"description": "pooled over every output in "
                                            "pooled_over: a quality figure only for one output "
                                            "of one scale (see outputs)"})
    cosine: float | None
    max_abs: float | None
    runtime: str = field(metadata={"description": "where it ran: host and runtime"})
    pooled_over: list[str] | None = None
    outputs: list[OutputFigures] | None = None
    task: TaskFigure | None = None
    collapsed: list[str] | None = _opt(description="collapsed outputs and channel groups")
    unjudged: list[str] | None = _opt(description="outputs and channel groups the held-out "
                                      "figures cannot judge, and why: not collapses, not "
                                      "validated either")
    accepted_collapsed: bool | None = _opt(description="--accept-collapsed: built anyway")


@dataclass(frozen=True)
class Placement:
    """Which ops the device's delegate takes; for an .onnx artifact, which nodes the
    onnxruntime execution provider for the device takes (`execution_provider`)."""

    delegate: str
    delegated_ops: int = field(metadata=NON_NEGATIVE)
    cpu_ops: int = field(metadata=NON_NEGATIVE)
    partitions: list[list[int]] = field(
        metadata={"description": "op indices of each delegated partition"})
    execution_provider: str | None = _opt(
        description="the onnxruntime execution provider of an .onnx artifact "
                    "(QNNExecutionProvider, NnapiExecutionProvider, ...)")


@dataclass(frozen=True)
class Estimate:
    """Latency and energy of one inference from the device profile."""

    latency_ms: float = field(metadata=NON_NEGATIVE)
    energy_mj: float | None = field(metadata=NON_NEGATIVE)
    interval_ms: list[float] | None = field(default=None, metadata={
        "description": "p10-p90 of the latency from the profile's cross-validated fit "
                       "residuals; null when the profile was not fitted"})
    basis: str = field(default="prior: unvalidated", metadata={
        "description": "what latency_ms rests on: 'fitted: N rows ..., CV median error X%' "
                       "or 'prior: unvalidated'"})
    energy_basis: str | None = field(default=None, metadata={
        "description": "what energy_mj is (a model, with its method)"})
    energy_interval_mj: list[float] | None = field(default=None, metadata={
        "description": "the stated range of energy_mj (a factor of the model, not measured)"})


@dataclass(frozen=True)
class Parity:
    """The float conversion checked against its source on sample inputs."""

    samples: int = field(metadata=NON_NEGATIVE)
    max_abs: float | None
    cosine: float | None
    warning: bool


@dataclass(frozen=True)
class TorchOutputParity:
    """One output of a .pt2's ONNX export (or litert-torch .tflite) against the PyTorch
    program."""

    name: str
    samples: int = field(metadata=NON_NEGATIVE)
    max_abs: float
    cosine: float


@dataclass(frozen=True)
class TorchExport:
    """A PyTorch .pt2 program exported by edgeopt before the build: to ONNX (route onnx) or
    by litert-torch to a float .tflite (route litert)."""

    exporter: str = field(metadata={"description": "the converter and its version"})
    torch_version: str = field(metadata={"description": "the torch that exported it"})
    parity: Parity
    outputs: list[TorchOutputParity]
    named_layers: int = field(metadata={
        "description": "ONNX nodes (route litert: .tflite tensors) named by their PyTorch "
                       "module path (features.3.conv.0)"})
    route: str | None = _opt(description="--torch-route: onnx or litert")
    layout: str | None = _opt(description="the layout the converted model takes and gives")


@dataclass(frozen=True)
class Conversion:
    """How the source became the artifact's format."""

    converter: str
    float_tflite_bytes: int | None = _opt(minimum=0)
    batch_fixed_to_1: bool | None = None
    input_layout_changes: dict[str, list[int]] | None = _opt(
        description="input name -> the transpose from the source layout (NCHW -> NHWC)")
    output_layout_changes: dict[str, list[int]] | None = _opt(
        description="output name -> the transpose from the source's layout to the artifact's "
                    "(np.argsort of it moves an artifact output back)")
    parity: Parity | None = None
    note: str | None = None
    torch_export: TorchExport | None = None


@dataclass(frozen=True)
class Sizes:
    """Bytes of the source, of the float .tflite (null for .onnx) and of the artifact."""

    source_bytes: int = field(metadata=NON_NEGATIVE)
    float_tflite_bytes: int | None = field(metadata=NON_NEGATIVE)
    artifact_bytes: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class Source:
    """The model the user gave (its file name only)."""

    file: str
    format: str


@dataclass(frozen=True)
class DataRecord:
    """Where the calibration and evaluation samples came from."""

    calibration: str
    calibration_samples: int = field(metadata=NON_NEGATIVE)
    evaluation: str
    evaluation_samples: int = field(metadata=NON_NEGATIVE)
    labels: bool
    representative: bool = field(
        metadata={"description": "false for --calib random: the figures are not representative"})
    layout_notes: list[str]


@dataclass(frozen=True)
class Normalization:
    """`(x - mean) / std` per channel."""

    mean: list[float]
    std: list[float]


@dataclass(frozen=True)
class Preprocessing:
    """What the app must repeat before calling the model."""

    source: Literal["images", "arrays", "random"]
    resize: list[int] | None = _opt(description="[height, width]")
    resize_mode: str | None = _opt(description="how images of another aspect ratio are "
                                   "fitted, e.g. 'cover, centre crop'")
    color: Literal["grayscale", "rgb"] | None = None
    layout: str | None = _opt(description="the layout the artifact's input takes")
    source_layout: str | None = _opt(description="the source model's input layout, when the "
                                     "conversion changed it")
    mean: list[float] | None = None
    std: list[float] | None = None
    pixel_range: list[int] | None = None
    app_normalization: Normalization | None = None


@dataclass(frozen=True)
class Labels:
    """Class names in output order: label i names output index i."""

    names: list[str]
    source: str | None = _opt(description="where the names came from: a --labels file, the "
                       ".tflite's own label file, or the image folder's class subfolders")


@dataclass(frozen=True)
class LayerError:
    """One layer of the ranked quantization-error report (worst first)."""

    layer: str
    op: str
    kind: str
    precision: str
    weight_method: str | None
    weight_sqnr_db: float | None
    output_range: list[float] | None
    sqnr_db: float | None
    cosine: float | None
    alone_output_sqnr_db: float | None = field(
        metadata={"description": "output SQNR with only this layer quantized (the worst few "
                                 "layers)"})
    rank: int | None = _opt(minimum=1)


@dataclass(frozen=True)
class FloatOp:
    """An op a full-integer (w8a8, w4a8) artifact still runs in float, and why."""

    op: str
    node: str = field(metadata={"description": "the op's output tensor (.tflite) or node "
                                               "name (.onnx)"})
    reason: str


@dataclass(frozen=True)
class Rescue:
    """Outputs that collapsed (or nearly) in int8 and what the build changed to rescue them:
    int16 activations where the device runs 16x8, else a float tail (calibration/rescue)."""

    precision: Literal["int16", "float"]
    outputs: list[str] = field(metadata={"description": "the outputs rescued"})
    ops: list[str] = field(metadata={"description": "output tensors of the ops changed"})
    collapsed_before: int = field(metadata=NON_NEGATIVE)
    collapsed_after: int = field(metadata=NON_NEGATIVE)
    sqnr_db_before: float | None = _opt(description="worst SQNR of those outputs on the "
                                        "check samples, before")
    sqnr_db_after: float | None = _opt(description="the same, after")
    nodes: list[str] | None = _opt(description="the same ops as quantization.float_ops names "
                                   "them (.onnx: node names; .tflite: the output tensors)")


@dataclass(frozen=True)
class Quantization:
    """The calibration core's layer report, per-layer precision and accuracy-budget search."""

    layer_report: list[LayerError]
    precision_per_layer: dict[str, str]
    search: dict[str, Any] | None = field(
        metadata={"description": "--accuracy-budget: the budget, whether it was met and the "
                                 "mixes tried (keys vary with the outcome)"})
    float_ops: list[FloatOp] | None = _opt(description="full-integer schemes: every op the "
                                           "written file runs in float (empty: none)")
    rescue: Rescue | None = _opt(description="an output collapsed in int8 and the build "
                                 "rescued it (absent: none did)")


@dataclass(frozen=True)
class Compiled:
    """A compiled model the device needs as well (Vela's for Ethos-U)."""

    file: str = field(metadata=FILE_NAME)
    sha256: str = field(metadata=SHA256)
    size_bytes: int = field(metadata={"minimum": 1})
    for_: str = field(metadata={"description": "the delegate it was compiled for"})
    figures: dict[str, str | int | float | None] = field(
        metadata={"description": "the compiler's own figures (cycles, SRAM, ...), named as the "
                                 "compiler names them"})


@dataclass(frozen=True)
class ComparisonRow:
    """The artifact estimated on one device; null figures and a note when it cannot run."""

    device: str
    primary: bool
    latency_ms: float | None = field(metadata=NON_NEGATIVE)
    energy_mj: float | None = field(metadata=NON_NEGATIVE)
    delegated_ops: int | None = field(metadata=NON_NEGATIVE)
    cpu_ops: int | None = field(metadata=NON_NEGATIVE)
    delegated_share: float | None = field(metadata={"minimum": 0, "maximum": 1})
    note: str | None
    kind: DeviceKind | None = None
    delegate: str | None = None
    partitions: int | None = _opt(minimum=0)
    interval_ms: list[float] | None = _opt(description="p10-p90 of latency_ms (fitted "
                                           "profiles only)")
    basis: str | None = _opt(description="what latency_ms rests on (fitted or prior)")
    energy_basis: str | None = _opt(description="what energy_mj is")
    energy_interval_mj: list[float] | None = _opt(description="the stated range of "
                                                  "energy_mj (not measured)")


@dataclass(frozen=True)
class BeforeAfter:
    """A count before and after compression."""

    before: int = field(metadata=NON_NEGATIVE)
    after: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class LayerChannels:
    """Output channels of one Conv2D/DepthwiseConv2D/Dense before and after pruning."""

    layer: str
    before: int = field(metadata={"minimum": 1})
    after: int = field(metadata={"minimum": 1})


@dataclass(frozen=True)
class Epoch:
    """One distillation epoch (epoch 0: before training)."""

    epoch: float
    agreement: float = field(metadata={"minimum": 0, "maximum": 1})
    val_loss: float
    loss: float | None = None
    accuracy: float | None = _opt(minimum=0, maximum=1,
                                  description="held-back top-1 accuracy (labels given)")


@dataclass(frozen=True)
class Distillation:
    """Distillation from the original model."""

    epochs_run: int = field(metadata=NON_NEGATIVE)
    best_epoch: int = field(metadata=NON_NEGATIVE)
    labels: bool
    samples: int = field(metadata={"minimum": 1})
    history: list[Epoch] = field(metadata={"minItems": 1})


@dataclass(frozen=True)
class Compression:
    """--prune / --prune-recipe: structured pruning before quantization (channels removed
    for real) and, with --distill, distillation from the original model. The accuracy and
    validation figures compare the final artifact with the unpruned source."""

    pattern: Literal["structured"]
    criterion: Literal["l1", "l2", "bn_scale", "activation", "taylor"]
    macs: BeforeAfter
    layers: list[LayerChannels]
    size_bytes: BeforeAfter
    target: float | None = _opt(exclusiveMinimum=0, exclusiveMaximum=1,
                                description="share of MACs asked to be removed")
    recipe: str | None = None
    channel_multiple: int | None = _opt(minimum=1)
    bn_recalibrated: bool | None = None
    parameters: BeforeAfter | None = None
    group_ratios: dict[str, float] | None = None
    distillation: Distillation | None = None


@dataclass(frozen=True)
class Delegation:
    """How much of the model the device's delegate runs."""

    delegated_ops: int = field(metadata=NON_NEGATIVE)
    ops: int = field(metadata=NON_NEGATIVE)
    share: float = field(metadata={"minimum": 0, "maximum": 1})
    partitions: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class RewriteApplied:
    """One graph rewrite, checked alone on the float graph in LiteRT."""

    name: str
    changed: int = field(metadata={"description": "ops (or tensors) it rewrote",
                                   "minimum": 1})
    message: str
    float_max_rel_error: float = field(metadata={
        "description": "largest |difference| over the largest |output|, float graph before "
                       "and after, on held-out samples"})
    kept: bool = field(metadata={"description": "within the float tolerance (used)"})
    static_shapes_fixed: int | None = field(default=None, metadata={
        "description": "tensors whose dynamic dimensions were fixed first so the rewrite "
                       "fits (op rewrites need fixed shapes)", "minimum": 1})


@dataclass(frozen=True)
class RewriteAccuracy:
    before_worst_sqnr_db: float | None
    after_worst_sqnr_db: float | None


@dataclass(frozen=True)
class Rewrites:
    """The rewrite step: the rewrites the placement's fallbacks asked for, the delegation
    before and after, and whether the rewritten artifact was kept (and why)."""

    tried: list[str]
    kept: bool
    reason: str
    before: Delegation
    after: Delegation | None
    applied: list[RewriteApplied]
    accuracy: RewriteAccuracy | None = None


@dataclass(frozen=True)
class QatFigures:
    """One quantized model's figures on the held-out samples, in its real runtime."""

    metric: str | None = None
    reference: float | None = None
    value: float | None = None
    sqnr_db: float | None = None
    top1_agreement: float | None = None
    samples: int | None = _opt(minimum=0)
    layers_above_int8: int | None = _opt(
        minimum=0, description="layers the precision search kept in fp16/float")


@dataclass(frozen=True)
class Qat:
    """--qat: quantization-aware training after post-training quantization, the two
    results side by side on the same held-out samples (the runtime's figures)."""

    ran: bool
    reason: str
    ptq: QatFigures
    qat: QatFigures | None = None
    shipped: Literal["qat", "ptq"] | None = None
    note: str | None = None
    epochs_run: int | None = _opt(minimum=0)
    best_epoch: int | None = _opt(minimum=0)
    epochs_max: int | None = _opt(minimum=1)
    labels: bool | None = None
    samples: int | None = _opt(minimum=1)
    quantized_layers: int | None = _opt(minimum=1)
    learned_ranges: int | None = _opt(
        minimum=0, description="activation ranges written as QAT learned them")
    seconds: float | None = _opt(minimum=0, description="wall time of the QAT step")
    phase_seconds: dict[str, float] | None = _opt(
        description="wall seconds per part of the step (graph, train, export, match, write, "
                    "validate)")
    history: list[Epoch] | None = None


@dataclass(frozen=True)
class RewriteParity:
    """The rewritten .onnx against the user's file in onnxruntime, on the same samples."""

    samples: int = field(metadata=NON_NEGATIVE)
    max_abs: float | None
    cosine: float | None
    warning: bool
    data: str = field(metadata={"description": "the calibration samples, or seeded random "
                                "inputs"})


@dataclass(frozen=True)
class OnnxRewrite:
    """The .onnx rewritten before the build: inputs pinned (--input-value), dynamic
    quantization undone (int8 weights dequantized into the float model edgeopt quantizes),
    fast variances E[x²] − E[x]² computed in two passes, E[(x − E[x])²]."""

    original_file: str
    original_bytes: int = field(metadata=NON_NEGATIVE)
    notes: list[str]
    parity: RewriteParity | None
    pinned_inputs: dict[str, Any] | None = _opt(description=(
        "input name -> the value it is pinned to: the artifact has no such input and the "
        "app must not feed it"))
    dequantized_ops: dict[str, int] | None = _opt(
        description="dynamic-quantization op -> how many were rewritten to float ops")
    two_pass_variances: int | None = _opt(
        description="how many variances written E[x²] − E[x]² were rewritten as "
                    "E[(x − E[x])²] (the same value; no cancellation on an int8 grid)")


@dataclass(frozen=True)
class Manifest:
    """What app code reads from an edgeopt bundle's manifest.json. Fields may be added in
    later versions of schema 1; none listed here is removed or changes meaning."""

    schema_version: int = field(metadata={"const": SCHEMA_VERSION})
    model: ModelFile
    inputs: list[Tensor] = field(metadata={"minItems": 1})
    outputs: list[Tensor] = field(metadata={"minItems": 1})
    device: Device
    recipe: Recipe
    accuracy: Accuracy
    placement: Placement | None
    estimate: Estimate | None
    toolchain: dict[str, str] = field(
        metadata={"description": "package -> version that built the bundle"})
    created: str = field(metadata={"format": "date-time"})
    validation: Validation | None = None
    conversion: Conversion | None = None
    sizes: Sizes | None = None
    source: Source | None = None
    data: DataRecord | None = None
    preprocessing: Preprocessing | None = None
    notes: list[str] | None = None
    labels: Labels | None = None
    placement_note: str | None = _opt(description="why placement is null")
    estimate_note: str | None = _opt(description="why estimate is null")
    quantization: Quantization | None = None
    compiled: Compiled | None = None
    comparison: list[ComparisonRow] | None = _opt(
        minItems=2, description="--device all or a comma list: the built artifact estimated "
        "on each device named, the build target first (primary)")
    compression: Compression | None = None
    rewrites: Rewrites | None = _opt(description="graph rewrites for the delegate (edgeopt "
                                     "build --rewrite, the default)")
    qat: Qat | None = None
    onnx_rewrite: OnnxRewrite | None = _opt(description="the .onnx was rewritten before the "
                                            "build (edgeopt.converters.onnx_adapt)")


# `for` is a Python keyword: the JSON key is `for`, the field `for_`.
_RENAMED = {"for": "for_"}


def _python_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {_RENAMED.get(k, k): _python_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_python_keys(v) for v in value]
    return value


def _json_keys(schema: Any) -> Any:
    back = {v: k for k, v in _RENAMED.items()}
    if isinstance(schema, dict):
        out = {back.get(k, k): _json_keys(v) for k, v in schema.items()}
        if isinstance(out.get("required"), list):
            out["required"] = [back.get(k, k) for k in out["required"]]
        return out
    if isinstance(schema, list):
        return [_json_keys(v) for v in schema]
    return schema


def parse_manifest(value: Any) -> Manifest:
    """A manifest dict (parsed JSON) as a `Manifest`; ContractError names the first key that
    does not fit (`manifest.model.sha256: ...`)."""
    return parse(Manifest, _python_keys(value), "manifest")


def manifest_schema() -> dict[str, Any]:
    """The JSON Schema of `Manifest` (the content of edgeopt/manifest.schema.json)."""
    return _json_keys(document_schema(Manifest, SCHEMA_ID, TITLE))


def schema_text() -> str:
    return json.dumps(manifest_schema(), indent=2) + "\n"


def schema_path() -> Path:
    return Path(str(resources.files("edgeopt").joinpath(SCHEMA_FILE)))


def main(argv: list[str] | None = None) -> int:
    """`python -m edgeopt.manifest --schema | --write | --check`."""
    parser = argparse.ArgumentParser(prog="python -m edgeopt.manifest",
                                     description="Print, write or check manifest.schema.json.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--schema", action="store_true", help="print the schema (default)")
    mode.add_argument("--write", action="store_true", help="write edgeopt/" + SCHEMA_FILE)
    mode.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    path = schema_path()
    if args.check:
        stale = path.read_text(encoding="utf-8") != schema_text()
        print(f"{path}: {'stale, run python -m edgeopt.manifest --write' if stale else 'ok'}")
        return 1 if stale else 0
    if args.write:
        write_file_atomic(path, schema_text())
        print(f"wrote {path}")
        return 0
    sys.stdout.write(schema_text())
    return 0


__all__ = ["Manifest", "ContractError", "parse_manifest", "manifest_schema", "SCHEMA_VERSION"]

if __name__ == "__main__":
    raise SystemExit(main())
