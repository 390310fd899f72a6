"""Does the delegate compute what the CPU computes? The same inputs with and without it.

    >>> check = host_numerics(handle, threads=2, delegate=host_delegate("xnnpack"),
    ...                       arrays=numerics_inputs(handle, None, samples=32))
    >>> check["sqnr_db"], check["top1_agreement"]

The reference is the runtime's own CPU kernels: LiteRT without its default delegates
(benchmark_model `--use_xnnpack=false`), or onnxruntime with graph optimizations off. The
figures are edgeopt.validate's: SQNR and cosine over all outputs, max-abs difference, and
top-1 agreement when the first output is a classifier's. On a phone, benchmark_model feeds
raw input files (`--input_layer_value_files`) and writes every output tensor's bytes in
order (`--output_filepath`); `device_input_files` and `decode_outputs` do both ends.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from edgeopt.data import DataSpec, load_data
from edgeopt.devices.runners.delegates import HostDelegate
from edgeopt.devices.runners.sessions import LiteRTSession, OrtSession, random_inputs
from edgeopt.errors import DataError
from edgeopt.model import ModelHandle, TensorSpec
from edgeopt.runtime import dequantize_array, quantize_array, run_dataset
from edgeopt.validate import Validation, compare

REFERENCE = HostDelegate("LiteRT builtin kernels (no delegate)", default_delegates=False)


def numerics_inputs(handle: ModelHandle, spec: str | None, samples: int,
                    seed: int = 0) -> dict[str, np.ndarray]:
    """`samples` inputs from a data file (--inputs) or seeded random ones."""
    if spec and spec != "random":
        try:
            data = load_data(DataSpec(spec, calib_role="numerics"), handle.inputs,
                             hold_out=False)[0]
        except DataError:
            # Float data for a quantized input: the app quantizes it with the input's
            # scale, and so do device_input_files and the runners (quantize_array).
            floats = _float_specs(handle.inputs)
            if floats == handle.inputs:
                raise
            data = load_data(DataSpec(spec, calib_role="numerics"), floats, hold_out=False)[0]
        return {k: v[:samples] for k, v in data.arrays.items()}
    return random_inputs(handle.inputs, seed, count=samples)


def _float_specs(specs: tuple[TensorSpec, ...]) -> tuple[TensorSpec, ...]:
    return tuple(replace(s, dtype="float32") if s.quantization and np.dtype(s.dtype).kind in "iu"
                 else s for s in specs)


def _finite(value: float | None) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)


def numerics_record(reference: str, candidate: str, result: Validation) -> dict:
    """SQNR is null when the outputs are identical (infinite SQNR)."""
    return {"reference": reference, "candidate": candidate, "samples": result.samples,
            "sqnr_db": _finite(result.sqnr_db), "max_abs": float(result.max_abs),
            "top1_agreement": _finite(result.top1_agreement),
            "cosine": _finite(result.cosine)}


def host_numerics(handle: ModelHandle, threads: int | None, delegate: HostDelegate,
                  arrays: dict[str, np.ndarray]) -> dict:
    """Compare the delegate (LiteRT) or the optimized graph (onnxruntime) with the reference."""
    if handle.format == "onnx":
        reference, candidate = OrtSession(handle, threads, False), OrtSession(handle, threads)
    else:
        reference = LiteRTSession(handle, threads, REFERENCE)
        candidate = LiteRTSession(handle, threads, delegate)
    expected = run_dataset(reference.runner(), arrays)
    actual = run_dataset(candidate.runner(), arrays)
    return numerics_record(reference.label, candidate.label, compare(expected, actual))


def _concrete(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if d < 0 else d for d in shape)


def _tensor_bytes(value: np.ndarray, spec: TensorSpec) -> bytes:
    dtype = np.dtype(spec.dtype)
    if dtype.kind in "iu" and spec.quantization and value.dtype.kind == "f":
        value = quantize_array(value, dtype, *spec.quantization)
    return np.ascontiguousarray(value.astype(dtype, copy=False)).tobytes()


def device_input_files(handle: ModelHandle, arrays: dict[str, np.ndarray],
                       sample: int) -> list[bytes]:
    """One sample's inputs as the raw tensor bytes benchmark_model reads, in model order."""
    return [_tensor_bytes(arrays[spec.name][sample:sample + 1], spec) for spec in handle.inputs]


def input_flags(handle: ModelHandle, remote_files: list[str]) -> list[str]:
    """benchmark_model flags feeding these files. The layer names are placeholders (the tool
    goes by input order and only warns on other names), so names with ':' or ',' are safe."""
    names = [f"in{i}" for i in range(len(handle.inputs))]
    shapes = [",".join(map(str, _concrete(s.shape))) for s in handle.inputs]
    files = [f"{n}:{path}" for n, path in zip(names, remote_files)]
    return [f"--input_layer={','.join(names)}", f"--input_layer_shape={':'.join(shapes)}",
            f"--input_layer_value_files={','.join(files)}"]


def decode_outputs(handle: ModelHandle, raw: bytes) -> list[np.ndarray]:
    """Split `--output_filepath` bytes into the model's outputs, dequantized to float32."""
    outputs, offset = [], 0
    for spec in handle.outputs:
        dtype, shape = np.dtype(spec.dtype), _concrete(spec.shape)
        size = int(np.prod(shape)) * dtype.itemsize
        if offset + size > len(raw):
            raise ValueError(f"output file holds {len(raw)} bytes, fewer than the outputs need")
        value = np.frombuffer(raw, dtype, count=int(np.prod(shape)), offset=offset).reshape(shape)
        offset += size
        if dtype.kind in "iu" and spec.quantization:
            value = dequantize_array(value, *spec.quantization)
        outputs.append(value.astype(np.float32))
    return outputs


def compare_device_outputs(handle: ModelHandle, reference: list[bytes], candidate: list[bytes],
                           labels: tuple[str, str]) -> dict:
    """Stack per-sample output files and compare them as host_numerics does."""
    expected = [np.concatenate(o) for o in zip(*(decode_outputs(handle, r) for r in reference))]
    actual = [np.concatenate(o) for o in zip(*(decode_outputs(handle, c) for c in candidate))]
    return numerics_record(*labels, compare(expected, actual))
