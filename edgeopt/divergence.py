"""`edgeopt bench MODEL --find-divergence`: the first op where the delegate's result leaves
the reference, and the ops from there to the outputs.

    >>> report = find_divergence(DivergenceConfig(Path("dist/model.tflite")))
    >>> report["first_divergence"]["op"], report["path"]

On the host the candidate is LiteRT with its default delegate (XNNPACK) or `--delegate`,
the reference LiteRT's reference kernels (`BUILTIN_REF`, every tensor kept). Over adb both
runs are the phone's benchmark_model: `--use_xnnpack=false` (TFLite's CPU kernels) against
the device's delegate. The same inputs go through both; every op output is compared.

A delegate keeps a partition's inner tensors to itself. Two ways to see them (`--observe`):
`outputs` (the default, and the only one over adb) runs a copy of the model whose every op
output is a model output (edgeopt.tflite_expose), which the delegate must write back;
`preserve` runs the model as it is with LiteRT's `experimental_preserve_all_tensors` and
reads what the interpreter holds: the outputs of CPU ops and of delegate partitions, the
inner tensors of a partition are reported as unobservable.
"""

from __future__ import annotations

import posixpath
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from importlib import metadata
from pathlib import Path

import numpy as np

from edgeopt.bench import BenchConfig
from edgeopt.devices.profile import load_profile
from edgeopt.devices.runners import adb
from edgeopt.devices.runners.android_numerics import device_output_files
from edgeopt.devices.runners.delegates import HostDelegate, host_delegate
from edgeopt.devices.runners.measurement import ModelInfo
from edgeopt.devices.runners.numerics import device_input_files, numerics_inputs
from edgeopt.devices.runners.remote import RemoteBenchmark
from edgeopt.devices.runners.staging import probe, stage
from edgeopt.devices.runners.workspace import Workspace, cleanup
from edgeopt.divergence_compare import (
    OpCheck,
    TensorStats,
    added_error,
    first_divergence,
    largest_increase,
    op_checks,
    partition_ops,
    path_to_outputs,
)
from edgeopt.errors import ConfigError, DeviceError, ModelLoadError, first_line
from edgeopt.graph import Graph
from edgeopt.model import ModelHandle, load_model
from edgeopt.tflite_expose import expose_op_outputs
from edgeopt.tflite_reader import read_tflite

DEFAULT_THRESHOLD = 0.01
HOST_SAMPLES, ADB_SAMPLES = 4, 2


class ObserveMode(StrEnum):
    """How the delegate's inner tensors are read (see the module doc)."""

    OUTPUTS = "outputs"
    PRESERVE = "preserve"


OBSERVE_MODES = tuple(m.value for m in ObserveMode)


class ReferenceKernels(StrEnum):
    """The host's reference: LiteRT's reference kernels, or its optimized builtin ones (what
    benchmark_model --use_xnnpack=false runs on a phone). They disagree at times: on
    magika the reference int8 SUM is up to 67 steps off the exact sum, the builtin one 1."""

    REF = "ref"
    BUILTIN = "builtin"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class DivergenceConfig:
    model: Path
    threshold: float = DEFAULT_THRESHOLD      # relative error an op's output may reach
    samples: int | None = None                # None: 4 on the host, 2 over adb
    inputs: str | None = None                 # data file; None: seeded random inputs
    delegate: str | None = None               # None: XNNPACK (host), the profile's (adb)
    delegate_options: tuple[tuple[str, str], ...] = ()
    threads: int | None = None
    observe: str = "outputs"                  # outputs | preserve (host only)
    reference: str = "ref"                    # ref | builtin (host only)
    adb: str | None = None                    # None: the host; '': the only device; serial
    device: str | None = None                 # profile name, for the record
    runner: str = "auto"
    benchmark_binary: str | None = None
    timeout_s: float = 600.0

    @classmethod
    def from_bench(cls, config: BenchConfig, threshold: float, observe: str,
                   reference: str = "ref") -> DivergenceConfig:
        """`edgeopt bench` flags that also steer --find-divergence (one model, one device)."""
        if len(config.models) != 1 or config.ssh:
            raise ConfigError("--find-divergence takes one model, here or over --adb")
        delegate = config.delegate
        if delegate is None and config.device:
            profile = load_profile(config.device)
            delegate = None if profile.delegate == "xnnpack" else profile.delegate
        return cls(model=Path(config.models[0]), threshold=threshold,
                   samples=config.numerics_samples, inputs=config.inputs, delegate=delegate,
                   delegate_options=config.delegate_options, threads=config.threads,
                   observe=observe, reference=reference, adb=config.adb,
                   device=config.device,
                   runner=config.runner, benchmark_binary=config.benchmark_binary,
                   timeout_s=config.timeout_s)


def _version() -> str:
    try:
        return metadata.version("ai-edge-litert")
    except metadata.PackageNotFoundError:
        return "?"


# --- host ---------------------------------------------------------------------------------

def _interpreter(content: bytes, threads: int | None, *, reference: str | None = None,
                 delegate: HostDelegate | None = None, preserve: bool = False):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    loaded = delegate.load() if delegate else None
    resolver = (OpResolverType.BUILTIN_REF if reference == ReferenceKernels.REF
                else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES if reference
                else OpResolverType.AUTO if delegate.default_delegates
                else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    try:
        interpreter = Interpreter(model_content=content, num_threads=threads,
                                  experimental_delegates=[loaded] if loaded else None,
                                  experimental_op_resolver_type=resolver,
                                  experimental_preserve_all_tensors=preserve)
        interpreter.allocate_tensors()
    except (ValueError, RuntimeError) as exc:
        raise ModelLoadError(f"LiteRT cannot run the model: {first_line(exc)}") from exc
    return interpreter


def delegate_nodes(interpreter, graph: Graph) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(inputs, outputs) of each delegate node LiteRT put in place of original ops."""
    first = len(graph.ops_in_subgraph(0))
    nodes = []
    for node in range(first, interpreter._interpreter.NumNodes()):
        nodes.append((tuple(int(t) for t in interpreter._interpreter.NodeInputs(node)),
                      tuple(int(t) for t in interpreter._interpreter.NodeOutputs(node))))
    return nodes


def _partitions(interpreter, graph: Graph) -> list[tuple[int, ...]]:
    return [partition_ops(graph, ins, outs) for ins, outs in delegate_nodes(interpreter, graph)]


def _sample_feed(handle: ModelHandle, arrays: dict, sample: int) -> list[np.ndarray]:
    """One sample in the model's own dtypes (quantized as the device files are)."""
    feed = []
    for spec, raw in zip(handle.inputs, device_input_files(handle, arrays, sample)):
        shape = tuple(1 if d < 0 else d for d in spec.shape)
        feed.append(np.frombuffer(raw, np.dtype(spec.dtype)).reshape(shape))
    return feed


def _count(arrays: dict[str, np.ndarray]) -> int:
    """Samples on hand: a data file may hold fewer than asked for."""
    return min(len(value) for value in arrays.values())


def _invoke(interpreter, feed: list[np.ndarray], label: str) -> None:
    for detail, value in zip(interpreter.get_input_details(), feed):
        interpreter.set_tensor(detail["index"], value)
    try:
        interpreter.invoke()
    except RuntimeError as exc:  # a kernel that refuses its data (a zero int8 divisor, ...)
        raise DeviceError(f"{label} failed to run the model: {first_line(exc)}") from exc


def _readable(interpreter, tensor: int) -> np.ndarray | None:
    try:
        return interpreter.get_tensor(tensor)
    except ValueError:  # string and resource tensors have no numpy view
        return None


NOT_ARRAYS = frozenset({"string", "resource", "variant"})


def _op_outputs(graph: Graph) -> list[int]:
    """Op results that are arrays (reading a resource tensor crashes LiteRT)."""
    return [t for op in graph.ops_in_subgraph(0) for t in op.outputs
            if t >= 0 and graph.tensor(t).dtype not in NOT_ARRAYS]


def _preserve_observable(graph: Graph, partitions, nodes) -> set[int]:
    """Tensors LiteRT holds after a run: outputs of CPU ops and of delegate nodes."""
    inside = {op for members in partitions for op in members}
    cpu = {t for op in graph.ops_in_subgraph(0) if op.index not in inside
           for t in op.outputs if t >= 0}
    return cpu | {t for _, outs in nodes for t in outs}


def _host_candidate(config: DivergenceConfig, content: bytes, graph: Graph,
                    delegate: HostDelegate):
    """(interpreter, observed tensors, partitions) of the candidate in the chosen mode."""
    if config.observe == "outputs":
        exposed = expose_op_outputs(content)
        interpreter = _interpreter(exposed.content, config.threads, delegate=delegate)
        partitions = _partitions(interpreter, graph)
        return interpreter, set(_op_outputs(graph)), partitions
    interpreter = _interpreter(content, config.threads, delegate=delegate, preserve=True)
    nodes = delegate_nodes(interpreter, graph)
    partitions = [partition_ops(graph, ins, outs) for ins, outs in nodes]
    return interpreter, _preserve_observable(graph, partitions, nodes), partitions


def host_divergence(config: DivergenceConfig, progress: Progress) -> dict:
    handle, graph, content = _load(config.model)
    delegate = host_delegate(config.delegate, config.delegate_options)
    arrays = numerics_inputs(handle, config.inputs, config.samples or HOST_SAMPLES)
    samples = _count(arrays)
    progress(f"{config.model.name}: preparing the reference and {delegate.label}")
    reference = _interpreter(content, config.threads, reference=config.reference,
                             preserve=True)
    candidate, observed, partitions = _host_candidate(config, content, graph, delegate)
    as_shipped = _partitions(_interpreter(content, config.threads, delegate=delegate), graph)
    observed &= set(_op_outputs(graph))
    stats = {t: TensorStats(graph.tensor(t).quantization) for t in sorted(observed)}
    kernels = ("reference kernels (BUILTIN_REF)" if config.reference == ReferenceKernels.REF
               else "builtin kernels (BUILTIN_WITHOUT_DEFAULT_DELEGATES)")
    labels = (f"LiteRT {_version()} {kernels}", f"LiteRT {_version()}, {delegate.label}")
    for i in range(samples):
        progress(f"{config.model.name}: comparing every tensor ({i + 1}/{samples})")
        feed = _sample_feed(handle, arrays, i)
        _invoke(reference, feed, labels[0])
        _invoke(candidate, feed, labels[1])
        for t in list(stats):
            ref, cand = _readable(reference, t), _readable(candidate, t)
            if ref is None or cand is None:
                del stats[t]
            else:
                stats[t].add(ref, cand)
    facts = {"transport": "host", "observe": config.observe, "partitions": len(partitions),
             "partitions_as_shipped": len(as_shipped), "notes": _notes(graph)}
    return _report(config, handle, graph, stats, partitions, labels, samples, facts)


def _notes(graph: Graph) -> list[str]:
    if graph.subgraph_count <= 1:
        return []
    return [f"only the main subgraph's ops are compared, not those of its "
            f"{graph.subgraph_count - 1} other subgraph(s) (bodies of WHILE, IF, CALL_ONCE)"]


def _load(model: Path) -> tuple[ModelHandle, Graph, bytes]:
    handle = load_model(model)
    if handle.format != "tflite":
        raise ModelLoadError(f"--find-divergence compares LiteRT runs of a .tflite; {model} "
                             f"is {handle.format}")
    content = Path(model).read_bytes()
    return handle, read_tflite(content), content


# --- adb ----------------------------------------------------------------------------------

def _split_outputs(graph: Graph, tensors: tuple[int, ...], raw: bytes) -> dict[int, np.ndarray]:
    """benchmark_model's `--output_filepath` bytes: each output tensor's bytes in order."""
    values, offset = {}, 0
    for t in tensors:
        spec = graph.tensor(t)
        dtype, shape = np.dtype(spec.dtype), tuple(1 if d < 0 else d for d in spec.shape)
        count = int(np.prod(shape))
        if offset + count * dtype.itemsize > len(raw):
            raise DeviceError(f"the device's output file holds {len(raw)} bytes, fewer than "
                              "the exposed model's outputs need")
        values[t] = np.frombuffer(raw, dtype, count=count, offset=offset).reshape(shape)
        offset += count * dtype.itemsize
    return values


def _serial(config: DivergenceConfig) -> str:
    if config.adb == "all":
        raise ConfigError("--find-divergence compares runs on one device: give --adb SERIAL")
    return adb.resolve_serials(config.adb or "", adb.AdbClient(binary=adb.adb_binary()))[0]


def _device_files(config: DivergenceConfig, serial: str, exposed_path: Path, samples: int):
    """Push the exposed model, run it with and without the delegate, pull every output."""
    job = RemoteBenchmark(model=exposed_path, target=serial, threads=config.threads,
                          delegate=config.delegate, delegate_options=config.delegate_options,
                          runner=config.runner, benchmark_binary=config.benchmark_binary,
                          timeout_s=config.timeout_s, measure_power=False,
                          numerics_samples=samples, numerics_inputs=config.inputs)
    client = adb.AdbClient(serial=serial, binary=adb.adb_binary())
    space = Workspace(client, posixpath.join(job.remote_root, f"edgeopt-{secrets.token_hex(4)}"))
    handle = load_model(exposed_path)
    note = None
    try:
        staged = stage(space, job, probe(space, job), handle)
        files = device_output_files(space, job, handle, staged)
    finally:
        note = cleanup(space)
    return (*files, note)


def adb_divergence(config: DivergenceConfig, progress: Progress) -> dict:
    handle, graph, content = _load(config.model)
    # --inputs is read and checked here, before anything is pushed; it may hold fewer
    samples = _count(numerics_inputs(handle, config.inputs, config.samples or ADB_SAMPLES))
    serial = _serial(config)
    exposed = expose_op_outputs(content)
    with tempfile.TemporaryDirectory(prefix="edgeopt-divergence-") as tmp:
        exposed_path = Path(tmp) / f"{config.model.stem}.exposed.tflite"
        exposed_path.write_bytes(exposed.content)
        progress(f"{serial}: running {config.model.name} with and without the delegate "
                 f"({samples} inputs)")
        reference, candidate, labels, note = _device_files(config, serial, exposed_path,
                                                           samples)
    stats = {t: TensorStats(graph.tensor(t).quantization) for t in exposed.tensors}
    for ref_raw, cand_raw in zip(reference, candidate):
        ref = _split_outputs(graph, exposed.tensors, ref_raw)
        cand = _split_outputs(graph, exposed.tensors, cand_raw)
        for t in exposed.tensors:
            stats[t].add(ref[t], cand[t])
    facts = {"transport": "adb", "serial": serial, "observe": "outputs", "partitions": None,
             "partitions_as_shipped": None,
             "notes": _notes(graph) + ([note] if note else [])}
    return _report(config, handle, graph, stats, [], labels, samples, facts)


# --- the record ---------------------------------------------------------------------------

def _tensor_json(graph: Graph, t: int) -> dict:
    tensor = graph.tensor(t)
    q = tensor.quantization
    quant = None if q is None or not q.scale else {
        "scale": list(q.scale) if len(q.scale) > 1 else q.scale[0],
        "zero_point": list(q.zero_point) if len(q.zero_point) > 1 else q.zero_point[0],
        **({"axis": q.axis} if len(q.scale) > 1 else {})}
    return {"index": t, "name": tensor.name, "dtype": tensor.dtype, "shape": list(tensor.shape),
            "quantization": quant}


def _op_json(graph: Graph, check: OpCheck) -> dict:
    worst = check.worst()
    record = {"index": check.index, "op": check.op, "unit": check.unit,
              "observed": check.observed, "input_rel_error": check.input_error}
    if worst is not None:
        record["tensor"] = _tensor_json(graph, worst[0])
        record["error"] = worst[1].to_json()
    return record


def _increase_json(graph: Graph, check: OpCheck | None) -> dict | None:
    if check is None:
        return None
    return {**_op_json(graph, check), "added_rel_error": _finite_or_str(added_error(check))}


def _finite_or_str(value: float) -> float | str:
    return value if np.isfinite(value) else "inf"


def _report(config: DivergenceConfig, handle: ModelHandle, graph: Graph, stats: dict,
            partitions, labels: tuple[str, str], samples: int, facts: dict) -> dict:
    checks = op_checks(graph, stats, partitions, set(_op_outputs(graph)))
    first = first_divergence(checks, config.threshold)
    by_index = {c.index: c for c in checks}
    path = path_to_outputs(graph, first.index) if first else []
    unobservable = [{"index": c.index, "op": c.op, "unit": c.unit} for c in checks
                    if not c.observed]
    outputs = [{**_tensor_json(graph, t), "error": stats[t].to_json()}
               for t in graph.outputs if t in stats]
    return {
        "model": ModelInfo.of(handle.path, handle.format).to_json(),
        "device": {"transport": facts.pop("transport"), "serial": facts.pop("serial", None),
                   "name": config.device},
        "reference": labels[0], "candidate": labels[1], "samples": samples,
        "threshold": config.threshold, **facts,
        "ops_observed": len(checks) - len(unobservable), "ops": len(checks),
        "unobservable": unobservable,
        "first_divergence": _op_json(graph, first) if first else None,
        "largest_increase": _increase_json(graph, largest_increase(checks)),
        "path": [_op_json(graph, by_index[i]) for i in path],
        "outputs": outputs,
        "per_op": [_op_json(graph, c) for c in checks],
    }


def find_divergence(config: DivergenceConfig, progress: Progress | None = None) -> dict:
    """Run the model with and without the delegate and locate the first departing op."""
    _check(config)
    progress = progress or (lambda _m: None)
    if config.adb is not None:
        return adb_divergence(config, progress)
    return host_divergence(config, progress)


def _check(config: DivergenceConfig) -> None:
    if not Path(config.model).exists():
        raise ModelLoadError(f"model not found: {config.model}")
    if config.observe not in OBSERVE_MODES:
        raise ConfigError(f"--observe is one of {', '.join(OBSERVE_MODES)}")
    if config.adb is not None and config.observe != "outputs":
        raise ConfigError("over adb every tensor is read as a model output: --observe "
                          "preserve works on the host only")
    if config.reference not in tuple(ReferenceKernels):
        raise ConfigError(f"--reference is one of {', '.join(ReferenceKernels)}")
    if config.adb is not None and config.reference != ReferenceKernels.REF:
        raise ConfigError("over adb the reference is the phone's CPU kernels (benchmark_model "
                          "--use_xnnpack=false): --reference works on the host only")
    if not config.threshold > 0:
        raise ConfigError("--threshold is a relative error above 0, e.g. 0.01")
