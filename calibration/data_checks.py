"""Checks on calibration data before anything runs: clear errors, or warnings that say
which tensor and why.

    >>> check_calibration({"x": np.zeros((4, 3), np.float32)}, "minmax")[0][:40]
    "input 'x' is constant (every value 0) ac"
"""

from __future__ import annotations

import numpy as np

from edgeopt.errors import DataError

# Samples below which a method's statistics are not worth having (error), and below
# which they are shaky (warning). Histogram methods estimate tails; GPTQ a Hessian.
MIN_SAMPLES = {"minmax": (1, 8), "percentile": (8, 32), "mse": (4, 16),
               "entropy": (8, 32), "auto": (8, 32)}


def check_calibration(calib: dict[str, np.ndarray], method: str) -> list[str]:
    """Raise DataError for unusable data; return warnings for doubtful data."""
    if not calib:
        raise DataError("no calibration arrays given")
    counts = {name: len(values) for name, values in calib.items()}
    if len(set(counts.values())) > 1:
        raise DataError(f"calibration inputs have different sample counts: {counts}")
    warnings = []
    for name, values in calib.items():
        _check_values(name, np.asarray(values))
        problem = _constant(np.asarray(values))
        if problem:
            warnings.append(f"input '{name}' {problem} across the {len(values)} calibration "
                            "samples: ranges fitted to it will clip real inputs")
    count = next(iter(counts.values()))
    hard, soft = MIN_SAMPLES.get(method, (1, 8))
    if count < hard:
        raise DataError(f"{count} calibration sample(s) are too few for --method {method} "
                        f"(needs at least {hard}, better {soft}+); give more data or use "
                        "--method minmax")
    if count < soft:
        warnings.append(f"only {count} calibration samples for --method {method}; "
                        f"{soft}+ give steadier ranges")
    return warnings


def _check_values(name: str, values: np.ndarray) -> None:
    if values.dtype.kind != "f":
        return
    finite = np.isfinite(values)
    if not finite.all():
        bad = values[~finite]
        nans, infs = int(np.isnan(bad).sum()), int(np.isinf(bad).sum())
        first = np.argwhere(~finite)[0]
        raise DataError(f"calibration input '{name}' has {nans} NaN and {infs} Inf values "
                        f"(first at sample {first[0]}); clean the data before calibrating")


def _constant(values: np.ndarray) -> str:
    flat = values.reshape(len(values), -1)
    if not flat.size:
        return ""
    if np.all(flat == flat.flat[0]):
        return f"is constant (every value {flat.flat[0]:g})"
    if len(flat) > 1 and np.all(flat == flat[0]):
        return "holds the same sample every time"
    return ""
