"""One streaming pass over the calibration data, and the ranges it yields.

The format's capture runs the float model batch by batch; each batch updates the
activation observers and the layer-input statistics, then is dropped. Memory holds one
batch plus bounded state, whatever the number of samples.

    >>> stats = run_calibration(fmt, calib, hessian_layers=set())   # doctest: +SKIP
    >>> ranges, choices, notes = estimate_ranges(stats.observers, "auto")  # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import time
from dataclasses import dataclass

import numpy as np

from edgeopt.calibration.backend import QuantFormat
from edgeopt.calibration.estimators import EstimatorSettings, RangeChoice, choose_range
from edgeopt.calibration.layer_stats import LayerStatsCollector
from edgeopt.calibration.observers import ObserverSet


@dataclass
class CalibrationStats:
    observers: ObserverSet
    layers: LayerStatsCollector
    samples: int
    seconds: float


def run_calibration(fmt: QuantFormat, calib: dict[str, np.ndarray], hessian_layers: set[str],
                    batch_size: int = 8, seed: int = 0) -> CalibrationStats:
    """Stream the float model's activations into observers and layer statistics."""
    start = time.perf_counter()
    release_freed_memory()  # what the float conversion freed, before the largest stage
    graph = fmt.graph
    observers = ObserverSet()
    layers = LayerStatsCollector(graph, hessian_layers, seed=seed)
    wanted = set(graph.activations) | layers.tensors
    activations = set(graph.activations)
    count = 0
    for batch in fmt.capture().stream(calib, wanted, batch_size):
        observers.update({k: v for k, v in batch.items() if k in activations})
        layers.update(batch)
        count += len(next(iter(batch.values())))
        del batch  # else it stays alive while the next batch is read (twice the memory)
    release_freed_memory()  # the batches' activations, before the candidates are written
    return CalibrationStats(observers, layers, count, time.perf_counter() - start)


def release_freed_memory() -> None:
    """Hand memory that Python and the libraries freed back to the system.

    glibc keeps freed blocks of a few megabytes in its heap (its mmap threshold grows as
    large arrays are freed), so a detector's activation batches, once dropped, still
    counted in the process's resident memory and every later stage stacked on top of
    them. ``malloc_trim`` returns them; it changes no result.
    """
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None (musl, macOS, Windows: nothing to trim). Looked
    up once: ``find_library`` runs ``ldconfig``."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None


def estimate_ranges(observers: ObserverSet, method: str,
                    settings: EstimatorSettings | None = None):
    """(ranges, choices, warnings): one range per observed tensor by `method`."""
    ranges: dict[str, tuple[float, float]] = {}
    choices: dict[str, RangeChoice] = {}
    warnings = []
    for name, observer in observers.items():
        if observer.nonfinite:
            warnings.append(f"tensor '{name}' produced {observer.nonfinite} NaN/Inf values "
                            "on the calibration data; its range ignores them")
        if observer.count == 0:
            warnings.append(f"tensor '{name}' never held a finite value; left unquantized")
            continue
        choice = _choose(observer, method, settings)
        choices[name] = choice
        ranges[name] = (choice.lo, choice.hi)
    return ranges, choices, warnings


def _choose(observer, method: str, settings) -> RangeChoice:
    if observer.constant:
        value = observer.min
        return RangeChoice(min(value, 0.0), max(value, 0.0), "constant", 0.0)
    return choose_range(observer.histogram(), method, settings)


def method_summary(choices: dict[str, RangeChoice]) -> dict[str, int]:
    """How many tensors each estimator won (for `auto`'s report)."""
    summary: dict[str, int] = {}
    for choice in choices.values():
        summary[choice.method] = summary.get(choice.method, 0) + 1
    return dict(sorted(summary.items(), key=lambda kv: -kv[1]))
