"""ONNX -> TensorFlow SavedModel through onnx2tf, strictly offline.

onnx2tf downloads a sample image file for any 4-D image input to check its outputs; on an
offline build server that call hangs or fails. We replace its download hook with the
user's own calibration samples and make its HTTP client refuse, so no call leaves the
machine. onnx2tf turns NCHW image inputs and outputs into NHWC; the permutations are
returned so data in the ONNX layout can be fed to the converted model.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeopt.converters.onnx_pin import value_decided_ifs, value_if_message
from edgeopt.converters.onnx_tidy import tidy
from edgeopt.errors import ConversionError, first_line
from edgeopt.model import ModelHandle, batch_axis, external_locations
from edgeopt.tf_env import quiet_tensorflow

NCHW_TO_NHWC = (0, 2, 3, 1)
_SCOPE_UNSAFE = re.compile(r"[^A-Za-z0-9_.\\/>-]")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
NHWC_TO_NCHW = (0, 3, 1, 2)


@dataclass(frozen=True)
class OnnxToTF:
    saved_model_dir: Path
    input_perms: dict[str, tuple[int, ...]]
    output_perms: tuple[tuple[int, ...] | None, ...]
    log: str


class _NoNetwork(RuntimeError):
    pass


def _refuse(*_args, **_kwargs):
    raise _NoNetwork("edgeopt runs offline: onnx2tf tried to download a file")


@contextlib.contextmanager
def _offline_onnx2tf(samples_nhwc: np.ndarray | None):
    """Patch onnx2tf's sample-image download to return our own samples; refuse HTTP."""
    import onnx2tf.onnx2tf as main_module
    import onnx2tf.utils.common_functions as common

    def own_samples() -> np.ndarray:
        if samples_nhwc is None:
            raise _NoNetwork("onnx2tf asked for sample images and none were given")
        return samples_nhwc.astype(np.float32)

    saved = (main_module.download_test_image_data, common.download_test_image_data,
             common.requests.get)
    main_module.download_test_image_data = own_samples
    common.download_test_image_data = own_samples
    common.requests.get = _refuse
    try:
        yield
    finally:
        (main_module.download_test_image_data, common.download_test_image_data,
         common.requests.get) = saved


def _shape_hint(shape: tuple[int, ...]) -> str:
    """`1,3,?,?` for (-1, 3, -1, -1): what --input-shape must fill in."""
    axis = batch_axis(shape)
    return ",".join("1" if i == axis else (str(d) if d > 0 else "?")
                    for i, d in enumerate(shape))


def fixed_shapes(handle: ModelHandle) -> list[str]:
    """onnx2tf's overwrite_input_shape strings: a dynamic batch (on the input's batch
    axis: a recurrent state counts samples on axis 1) becomes 1; a scalar input is static
    and needs none."""
    shapes = []
    for spec in handle.inputs:
        dims = list(spec.shape)
        axis = batch_axis(spec.shape)
        if axis is None:
            continue
        if dims[axis] < 0:
            dims[axis] = 1
        if any(d < 0 for d in dims):
            raise ConversionError(
                f"input '{spec.name}' has dynamic dimensions {list(spec.shape)} beyond the batch; "
                "mobile runtimes need static shapes: fix them with --input-shape "
                f"{spec.name}:{_shape_hint(spec.shape)}")
        shapes.append(f"{spec.name}:{','.join(str(d) for d in dims)}")
    return shapes


def graph_nodes(graph):
    """Every node, inside If/Loop/Scan bodies too (onnx2tf converts those as well)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for body in [attr.g] if attr.HasField("g") else list(attr.graphs):
                yield from graph_nodes(body)


def onnx2tf_supports(op_type: str) -> bool:
    """onnx2tf converts an op with its module onnx2tf/ops/<OpType>.py; no module, no op."""
    import importlib.util

    if not op_type.isidentifier() or op_type.startswith("_"):
        return False
    try:
        return importlib.util.find_spec(f"onnx2tf.ops.{op_type}") is not None
    except (ImportError, ValueError):
        return False


def _options(op_type: str) -> str:
    options = ["build with --format onnx to keep the model in onnxruntime"]
    if op_type.startswith("DynamicQuantize") or op_type.endswith("Integer"):
        options.append("re-export the model without dynamic quantization (from its float "
                       "weights) and let edgeopt quantize it")
    else:
        options.append(f"re-export the model with {op_type} written in standard ONNX ops")
    return "; ".join(options)


def check_convertible(path: Path) -> None:
    """Every op onnx2tf is about to meet has a converter, before onnx2tf starts: its own
    failure is a bare `No module named 'onnx2tf.ops.DynamicQuantizeLSTM'`."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    found = value_decided_ifs(model)  # onnx2tf fails inside the branches, with no reason
    if found:
        raise ConversionError(value_if_message(found))
    for node in graph_nodes(model.graph):
        if not onnx2tf_supports(node.op_type):
            raise ConversionError(
                f"op {node.op_type} (node {node.name or '?'}) is not supported by the "
                f"ONNX->TFLite converter (onnx2tf); options: {_options(node.op_type)}")


def _failed_node(exc: BaseException, log: str, path: Path) -> str:
    """`node NAME (OpType)` onnx2tf was converting when it failed, when it says."""
    name = getattr(exc, "onnx_op_name", None)
    if not name:
        found = re.findall(r"(?:Error occurred at ONNX operation|onnx_op_name):\s*(\S+)",
                           _ANSI.sub("", log))
        name = found[-1] if found else None
    if not name:
        return ""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    op_types = {n.name: n.op_type for n in graph_nodes(model.graph)}
    op_type = op_types.get(name)
    return f"ONNX node {name} ({op_type})" if op_type else f"ONNX node {name}"


def _reason(exc: BaseException, log: str) -> str:
    """The exception's own words; for a bare sys.exit, onnx2tf's first ERROR line."""
    if isinstance(exc, KeyError):  # onnx2tf's tensor table lacks a tensor a node reads
        return f"onnx2tf lost track of tensor {exc} (its graph bookkeeping failed there)"
    if not isinstance(exc, SystemExit):
        text = first_line(exc)
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        if text.startswith("Exception encountered when calling layer") and len(lines) > 1:
            # Keras's first line names only the layer type; the next one says what failed
            text = f"{text} {re.sub(r' for .{{node [^}]*}}.*?(?= with|$)', '', lines[1])}"
    else:
        errors = [ln for ln in _ANSI.sub("", log).splitlines() if "ERROR" in ln]
        text = errors[0] if errors else "onnx2tf stopped"
    return _ANSI.sub("", text).strip()[:400]


def _perm_for(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    return NCHW_TO_NHWC if len(shape) == 4 else None


def private_copy(path: Path, workdir: Path) -> Path:
    """A copy of the ONNX file and its external-data files in a fresh folder of `workdir`.

    Third-party tools get this copy, never the user's path: onnx2tf saves its
    shape-inferred graph over the file it is given (an opset-1 model's sha256 changed
    after `edgeopt estimate`). The external-data locations were confined to the model's
    folder when it was loaded (model.check_external_data) and keep their relative paths.
    """
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    folder = Path(tempfile.mkdtemp(prefix="source-", dir=workdir))
    for location in external_locations(model):
        (folder / location).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path.parent / location, folder / location)
    copy = folder / path.name
    shutil.copyfile(path, copy)
    return copy


def static_onnx(handle: ModelHandle, workdir: Path, shapes: list[str], log,
                source: Path | None = None, skip_fusions: tuple[str, ...] = ()) -> Path | None:
    """Fix the input shapes and propagate them with onnxslim, in-process.

    onnx2tf needs static shapes on every tensor; it would call the `onnxsim` program for
    that, which may not exist. None when onnxslim cannot simplify this graph. onnxslim
    reads `source`, a private copy of the model (made here when not given);
    `skip_fusions` names onnxslim fusion patterns not to apply (e.g. "FusionGemm").
    """
    import onnx
    import onnxslim

    source = source or private_copy(handle.path, workdir)
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            model = onnxslim.slim(str(source), input_shapes=shapes,
                                  skip_fusion_patterns=list(skip_fusions) or None)
    except Exception as exc:  # onnxslim raises anything from its graph passes
        log.write(f"onnxslim could not simplify the model: {exc}\n")
        return None
    for node in model.graph.node:  # onnxslim's names ('Softmax@0') are not TF scope names
        node.name = _SCOPE_UNSAFE.sub("_", node.name)
    for note in tidy(model):
        log.write(f"edgeopt: {note}\n")
    path = workdir / "static.onnx"
    onnx.save(model, str(path))
    return path


def stand_in_images(shapes: list[str]) -> np.ndarray:
    """Seeded random NHWC images of the first input's fixed shape, for onnx2tf's own
    output check when no samples were given (`inspect --device`): onnx2tf only runs them
    through both graphs, the conversion does not depend on their values."""
    dims = [int(d) for d in shapes[0].rpartition(":")[2].split(",")]
    if len(dims) == 4 and dims[1] in (1, 3, 4) and dims[-1] not in (1, 3, 4):
        dims = [dims[0], dims[2], dims[3], dims[1]]
    return np.random.default_rng(0).random(dims, dtype=np.float32)


def _kept(handle: ModelHandle) -> list[str]:
    """Inputs onnx2tf must not transpose as if channels-first: a recurrent state counting
    samples on axis 1 ([2, N, 128]) became [2, 128, N], and its LSTM refused the state."""
    return [s.name for s in handle.inputs if len(s.shape) > 1 and batch_axis(s.shape)]


def onnx_to_saved_model(handle: ModelHandle, workdir: Path,
                        samples_nhwc: np.ndarray | None) -> OnnxToTF:
    """Convert with onnx2tf into `workdir/saved_model`; raise ConversionError on failure."""
    quiet_tensorflow()
    import onnx2tf

    out = workdir / "saved_model"
    log = io.StringIO()
    shapes = fixed_shapes(handle)
    if samples_nhwc is None and shapes:
        samples_nhwc = stand_in_images(shapes)
    private = private_copy(handle.path, workdir)
    static = static_onnx(handle, workdir, shapes, log, private)
    check_convertible(static or private)
    try:
        with _offline_onnx2tf(samples_nhwc), contextlib.redirect_stdout(log), \
                contextlib.redirect_stderr(log):
            onnx2tf.convert(
                input_onnx_file_path=str(static or private), output_folder_path=str(out),
                overwrite_input_shape=None if static else shapes, output_signaturedefs=True,
                copy_onnx_input_output_names_to_tflite=True, non_verbose=True,
                not_use_onnxsim=True, keep_shape_absolutely_input_names=_kept(handle) or None,
                enable_rnn_unroll=static is not None)
    except ConversionError:
        raise
    except (Exception, SystemExit) as exc:  # onnx2tf raises anything, and sys.exit()s
        node = _failed_node(exc, log.getvalue(), static or private)
        where = f" at {node}" if node else ""
        raise ConversionError(
            f"onnx2tf could not convert {handle.path.name}{where}: "
            f"{_reason(exc, log.getvalue())}; options: build with --format onnx to keep the "
            "model in onnxruntime, or re-export it with that node written in simpler ops"
        ) from exc
    if not (out / "saved_model.pb").is_file():
        raise ConversionError(f"onnx2tf wrote no SavedModel for {handle.path.name}")
    input_perms = {s.name: p for s in handle.inputs if (p := _perm_for(s.shape))}
    output_perms = tuple(NHWC_TO_NCHW if len(s.shape) == 4 else None for s in handle.outputs)
    return OnnxToTF(out, input_perms, output_perms, log.getvalue())
