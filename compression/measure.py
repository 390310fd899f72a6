"""What a compressed ``.tflite`` really costs: its size in bytes and its LiteRT latency here.

Sparsity only pays where the runtime exploits it, so the figures are measured, never
inferred from the share of zeros. LiteRT runs the model with XNNPACK, its default CPU
delegate. XNNPACK's sparse path needs the weights stored sparsely (the converter's
``EXPERIMENTAL_SPARSITY``: the delegate then hints sparse inference), applies only to a
subgraph from a 3x3 stride-2 conv on 3 channels to a spatial mean, made of 1x1 convs with at
least 2/3 zeros and 3x3/5x5 depthwise convs with symmetric padding, and only on CPUs where
XNNPACK has sparse kernels: ARM, and x86 without AVX (XNNPACK turns it off on AVX machines,
where its dense kernels are faster). Elsewhere the sparse weights are densified when the
model loads and the latency is the dense one; the file is still smaller.

    >>> report = measure_sparse(model, SparsityConfig(sparsity=0.8))  # doctest: +SKIP
    >>> report.sparse.size_bytes, report.sparse.latency.median
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeopt.compression.sparsity import SparsityConfig, SparsityResult, sparsify
from edgeopt.compression.tflite_sparse import convert_float, write_sparse_tflite
from edgeopt.devices.runners.host import HostBenchmark, run_host
from edgeopt.errors import ConfigError


@dataclass(frozen=True)
class MeasureConfig:
    """How latency is timed: with ``threads=1`` the ``cpu`` clock leaves out the time other
    work on a shared machine takes from the run (see ``edgeopt bench --clock``)."""

    runs: int = 200
    min_secs: float = 1.0
    warmup: int = 10
    threads: int = 1
    clock: str = "cpu"


@dataclass(frozen=True)
class TfliteMeasurement:
    """Bytes of the ``.tflite`` and its steady-state latency (``Latency``, milliseconds)."""

    size_bytes: int
    latency: Any
    runs: int
    tool: str
    clock: str
    threads: int

    def to_json(self) -> dict:
        return {"size_bytes": self.size_bytes, "latency_ms": self.latency.to_json(),
                "runs": self.runs, "tool": self.tool, "clock": self.clock,
                "threads": self.threads}


def measure_tflite(content: bytes, config: MeasureConfig | None = None) -> TfliteMeasurement:
    """Size and measured LiteRT (XNNPACK) latency of one ``.tflite`` on this machine."""
    config = config or MeasureConfig()
    if config.clock not in ("cpu", "wall") or (config.clock == "cpu" and config.threads != 1):
        raise ConfigError("latency clock must be 'wall', or 'cpu' with one thread (it times "
                          "the calling thread)")
    with tempfile.TemporaryDirectory(prefix="edgeopt-measure-") as folder:
        path = Path(folder) / "model.tflite"
        path.write_bytes(content)
        job = HostBenchmark(model=path, runs=config.runs, min_secs=config.min_secs,
                            warmup=config.warmup, threads=config.threads, clock=config.clock)
        measured = run_host(job)
    return TfliteMeasurement(len(content), measured.latency, measured.runs, measured.tool,
                             config.clock, config.threads)


@dataclass
class SparseReport:
    """The sparsified model, and the dense and sparse encodings of it measured side by side.

    ``baseline`` is the unsparsified model's float ``.tflite``; ``dense`` the sparsified
    weights stored densely; ``sparse`` stored in TFLite's sparse format (``None`` when the
    converter wrote nothing smaller). ``written`` is the file to ship: the smaller one.
    """

    result: SparsityResult
    baseline: TfliteMeasurement
    dense: TfliteMeasurement
    sparse: TfliteMeasurement | None
    written: bytes = field(repr=False, default=b"")

    def to_json(self) -> dict:
        return {"density": self.result.density, "skipped": self.result.skipped,
                "baseline": self.baseline.to_json(), "dense": self.dense.to_json(),
                "sparse": None if self.sparse is None else self.sparse.to_json(),
                "sparse_format": self.sparse is not None}


def measure_sparse(model: Any, sparsity: SparsityConfig,
                   config: MeasureConfig | None = None) -> SparseReport:
    """Sparsify ``model``, write it densely and sparsely, and measure all three files."""
    result = sparsify(model, sparsity)
    written = write_sparse_tflite(result.model)
    baseline = measure_tflite(convert_float(model), config)
    sparse = measure_tflite(written.content, config) if written.sparse_format else None
    return SparseReport(result, baseline, measure_tflite(written.dense_content, config), sparse,
                        written.content)
