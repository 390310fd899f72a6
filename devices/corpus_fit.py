"""`edgeopt devices fit`: fit device profiles to the published-latency corpus, with
leave-one-model-family-out cross validation.

Per profile (corpus_map.py says which rows): each row whose model has a Keras stand-in
(standins.py) becomes a `fit.Sample` of the stand-in's graph and the published latency.
Three models are fitted and cross-validated; the one with the lower held-out median
error is kept (the prior figures themselves when none beats them, marked "validated"):

* ``opclass``: `fit.fit_profile`, efficiencies per (unit, dtype, op kind), per-op and
  per-invoke overheads, bandwidths and synchronisation, non-negative least squares on
  relative errors with a pull towards the prior;
* ``scale``: one factor on every time figure of the prior (the prior's shape, the data's
  level), the median of log(measured / prior estimate);
* ``scaled-opclass``: the scale, then the op-class fit around the scaled prior with a
  strong pull towards it (`SHRINK`), so a value moves only where many rows ask for it.

Cross validation: for each model family, fit on the other families' rows and predict the
held-out family's rows. The profile stores its fit, the rows, the families, the CV median
|error| and the p10/p90 of the CV log-residuals (fitted.py), from which estimates get
their interval: the split-conformal p10/p90 of those held-out residuals, each model
family one unit (intervals.py says what the interval means; `fit_predictor` lets the
benchmark check it nested).

    >>> results = fit_corpus(load_corpus(), ["coral-usb"])            # doctest: +SKIP
    >>> results[0].chosen.cv_median_abs_error                         # doctest: +SKIP
    0.09
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from edgeopt.atomic import write_file_atomic
from edgeopt.devices.corpus import Measurement
from edgeopt.devices.corpus_map import PROFILE_ROWS, profile_rows
from edgeopt.devices.costing import estimate_assigned
from edgeopt.devices.estimator import resolve_assignment
from edgeopt.devices.fit import FitConfig, Sample, fit_profile
from edgeopt.devices.fitted import FIT_METHODS, FitBasis, apply_values, parse_fit, scale_times
from edgeopt.devices.intervals import FitPredict, family_bounds, lofo_predictions
from edgeopt.devices.kernel_fit import fit_kernel, free_value_count, with_kernel_fit
from edgeopt.devices.nnls import nnls
from edgeopt.devices.profile import DeviceProfile, _profile_files, parse_profile
from edgeopt.devices.standins import build, cached, standin_for
from edgeopt.errors import DeviceError
from edgeopt.graph import Graph
from edgeopt.tflite_reader import read_tflite

Progress = Callable[[str], None]
SHRINK = 0.3   # prior weight of scaled-opclass, per value, against 1 per row
ITERATIONS = 6  # re-classifications of compute- and memory-bound ops (fit.py's loop)
FIT_HEADER = "[fit]"


@dataclass(frozen=True)
class RowSample:
    """A corpus row with the stand-in graph it is estimated on."""

    row: Measurement
    sample: Sample


@dataclass(frozen=True)
class MethodResult:
    """One fitting method on one profile: the full fit and its cross validation."""

    method: str
    profile: DeviceProfile          # fitted on every row
    values: dict
    scale: float
    cv_predicted_s: tuple[float, ...]   # per row, from the fit without its family
    fitted_predicted_s: tuple[float, ...]


@dataclass(frozen=True)
class ProfileFit:
    name: str
    prior: DeviceProfile
    samples: tuple[RowSample, ...]
    skipped: int                    # rows of the profile without a built stand-in
    prior_predicted_s: tuple[float, ...]
    methods: dict[str, MethodResult]
    chosen: FitBasis

    @property
    def measured_s(self) -> tuple[float, ...]:
        return tuple(s.sample.measured_s for s in self.samples)

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(s.row.model_family for s in self.samples)


def prior_profile(name: str) -> DeviceProfile:
    """The shipped profile's prior figures (its ``[fit]`` table, if any, left out)."""
    files = _profile_files()
    if name not in files:
        raise DeviceError(f"no shipped device profile '{name}' (known: {', '.join(files)})")
    return parse_profile(files[name], fitted=False)


def _on_accelerator(profile: DeviceProfile) -> bool:
    """NPU and GPU rows ran every layer there (AI Hub's layer counts; the rows partly on
    the CPU are not mapped), and float runs in the unit's float16 (its fallback dtype)."""
    return profile.kind in ("npu", "gpu")


def row_samples(rows: Sequence[Measurement], profile: DeviceProfile, build_missing: bool,
                progress: Progress | None = None) -> tuple[list[RowSample], int]:
    """Samples of the rows that have a stand-in (built when ``build_missing``), and how
    many rows were skipped for want of one."""
    graphs: dict[Path, tuple[Graph, list[str]]] = {}
    samples, skipped = [], 0
    for number, row in enumerate(rows):
        spec = standin_for(row)
        path = spec and (build(spec) if build_missing else cached(spec))
        if not path:
            skipped += 1
            continue
        if path not in graphs:
            if progress:
                progress(f"{profile.name}: reading {path.name}")
            graphs[path] = _graph_and_units(path, profile)
        graph, units = graphs[path]
        label = f"{number}:{row.model}:{row.precision}:{row.runtime_detail}"
        samples.append(RowSample(row, Sample(label, graph, row.latency_ms / 1e3, units,
                                             path)))
    return samples, skipped


def _graph_and_units(path: Path, profile: DeviceProfile) -> tuple[Graph, list[str]]:
    """The graph and its per-op units, resolved once: the delegate's placement (the Edge
    TPU compiler's mapping for Coral), or every op on the accelerator."""
    graph = read_tflite(path)
    if _on_accelerator(profile):
        placement: list[str] | None = ["accelerator"] * len(graph.ops)
        return graph, list(resolve_assignment(graph, profile, placement).units)
    return graph, list(resolve_assignment(graph, profile, None, path).units)


def predict_s(samples: Sequence[Sample], profile: DeviceProfile) -> list[float]:
    """Estimated latency (s) of each sample on ``profile`` (one estimate per distinct graph:
    AI Hub lists one model under several runtimes)."""
    done: dict[int, float] = {}
    for s in samples:
        if id(s.graph) not in done:
            done[id(s.graph)] = estimate_assigned(s.graph, profile, resolve_assignment(
                s.graph, profile, s.placement, s.model)).latency_s
    return [done[id(s.graph)] for s in samples]


def merged(samples: Sequence[Sample]) -> list[Sample]:
    """One sample per distinct graph: the geometric mean of its measurements, weighted by
    their count (the same least-squares pull, one estimate instead of several)."""
    groups: dict[int, list[Sample]] = {}
    for s in samples:
        groups.setdefault(id(s.graph), []).append(s)
    return [replace(group[0], measured_s=float(np.exp(np.mean([np.log(s.measured_s)
                                                                 for s in group]))),
                    weight=float(sum(s.weight for s in group)))
            for group in groups.values()]


def fit_method(samples: Sequence[Sample], prior: DeviceProfile, method: str
               ) -> tuple[DeviceProfile, dict, float]:
    """(fitted profile, fitted values, scale) of one method on ``samples``."""
    if method == "affine":
        return fit_affine(samples, prior)
    if method == "kernel":
        values, _ = fit_kernel(merged(samples), prior)
        return with_kernel_fit(prior, values), values, 1.0
    if method in ("scale", "scaled-opclass"):
        ratios = [math.log(s.measured_s / p) for s, p in zip(samples, predict_s(samples, prior))]
        scale = float(math.exp(np.median(ratios)))
        scaled = replace(prior, hardware=scale_times(prior.tables(), scale, "fit"))
        if method == "scale":
            return scaled, {}, scale
        result = fit_profile(merged(samples), scaled, FitConfig(prior_weight=SHRINK,
                                                                iterations=ITERATIONS))
        return result.apply(scaled), dict(result.values), scale
    result = fit_profile(merged(samples), prior, FitConfig(iterations=ITERATIONS))
    return result.apply(prior), dict(result.values), 1.0


def fit_affine(samples: Sequence[Sample], prior: DeviceProfile
               ) -> tuple[DeviceProfile, dict, float]:
    """latency = a + b x (the prior's estimate), a and b >= 0 by least squares on relative
    errors: the prior's shape for the part that grows with the model, a fixed per-invoke
    cost for the rest (the main unit's invoke overhead, the one value it replaces)."""
    predicted = np.asarray(predict_s(samples, prior))
    measured = np.array([s.measured_s for s in samples])
    weight = np.sqrt([s.weight for s in samples])
    a_mat = np.column_stack([1.0 / measured, predicted / measured]) * weight[:, None]
    a, b = nnls(a_mat, weight * 1.0)
    b = float(b) if b > 0 else 1.0
    hw = prior.tables()
    unit = hw.main_unit
    values = {("invoke", unit): float(a) + b * hw.unit(unit).invoke_overhead.value}
    scaled = replace(prior, hardware=apply_values(scale_times(hw, b, "fit"), values, "fit"))
    return scaled, values, b


def free_values(method: str, values: dict, rows: int) -> int:
    """How many values ``method`` fitted (for the values-per-row the benchmark reports)."""
    if method == "kernel":
        return free_value_count(values, rows)
    return {"scale": 1, "affine": 2, "prior": 0}.get(method, len(values) + (
        method == "scaled-opclass"))


def cross_validate(samples: Sequence[RowSample], prior: DeviceProfile, method: str,
                   progress: Progress | None = None) -> list[float]:
    """Per sample, its latency estimated by a fit on the other families' rows only."""
    return lofo_predictions([s.row.model_family for s in samples],
                            fit_predictor(samples, prior, method, progress)).tolist()


def log_residuals(measured: Sequence[float], predicted: Sequence[float]) -> np.ndarray:
    """log(measured / estimated) per row."""
    return np.log(np.asarray(measured) / np.asarray(predicted))


def fit_predictor(samples: Sequence[RowSample], prior: DeviceProfile, method: str,
                  progress: Progress | None = None) -> FitPredict:
    """`intervals.FitPredict` of ``method``: fit on some rows, estimate others (the prior
    when no row is left to fit on)."""
    def fit_predict(train: np.ndarray, rows: np.ndarray) -> np.ndarray:
        if progress:
            progress(f"{prior.name} {method}: fit on {len(train)} rows, estimate {len(rows)}")
        fitted = fit_method([samples[i].sample for i in train], prior, method)[0] \
            if len(train) else prior
        return np.array(predict_s([samples[i].sample for i in rows], fitted))
    return fit_predict


def median_abs_error(measured: Sequence[float], predicted: Sequence[float]) -> float:
    """Median of |estimated / measured - 1|."""
    return float(np.median(np.abs(np.asarray(predicted) / np.asarray(measured) - 1.0)))


def fit_one(name: str, rows: Sequence[Measurement], build_missing: bool = True,
            methods: Sequence[str] = FIT_METHODS, progress: Progress | None = None
            ) -> ProfileFit:
    """Fit and cross-validate the profile ``name`` on its corpus rows."""
    prior = prior_profile(name)
    mine = profile_rows(rows, name)
    samples, skipped = row_samples(mine, prior, build_missing, progress)
    if not samples:
        raise DeviceError(f"{name}: none of its {len(mine)} corpus rows has a stand-in built "
                          "(python -m edgeopt.devices.standins --build --fitted)")
    return fit_samples(name, prior, samples, skipped, methods, progress)


def fit_samples(name: str, prior: DeviceProfile, samples: Sequence[RowSample],
                skipped: int = 0, methods: Sequence[str] = FIT_METHODS,
                progress: Progress | None = None) -> ProfileFit:
    """Fit every method on ``samples``, cross-validate it, keep the better one."""
    plain = [s.sample for s in samples]
    results = {}
    for method in methods:
        fitted, values, scale = fit_method(plain, prior, method)
        cv = cross_validate(samples, prior, method, progress)
        results[method] = MethodResult(method, fitted, values, scale, tuple(cv),
                                       tuple(predict_s(plain, fitted)))
    prior_s = tuple(predict_s(plain, prior))
    # the prior was fitted to none of the rows: its errors are held-out errors already
    # (first, so that a tie - one family, nothing to cross-validate on - keeps the prior)
    candidates = [MethodResult("prior", prior, {}, 1.0, prior_s, prior_s), *results.values()]
    best = min(candidates, key=lambda m: median_abs_error(
        [s.measured_s for s in plain], m.cv_predicted_s))
    return ProfileFit(name, prior, tuple(samples), skipped, prior_s, results,
                      _basis(name, samples, best))


def _basis(name: str, samples: Sequence[RowSample], best: MethodResult) -> FitBasis:
    measured = [s.sample.measured_s for s in samples]
    residuals = log_residuals(measured, best.cv_predicted_s)
    families = tuple(sorted({s.row.model_family for s in samples}))
    devices = tuple(sorted({s.row.device for s in samples}))
    p10, p90 = family_bounds(residuals, [s.row.model_family for s in samples])
    rows_of = PROFILE_ROWS[name].describes if name in PROFILE_ROWS else name
    source = (f"fitted by `edgeopt devices fit` ({best.method}) to {len(samples)} published "
              f"rows of {rows_of} (devices/measurements), leave-one-family-out CV")
    return FitBasis(best.method, len(samples), families, devices, len(samples),
                    median_abs_error(measured, best.cv_predicted_s), p10, p90, best.scale,
                    best.values, source)


def fit_corpus(rows: Sequence[Measurement], names: Sequence[str] | None = None,
               build_missing: bool = True, progress: Progress | None = None
               ) -> list[ProfileFit]:
    """`fit_one` for every profile the corpus covers (or the named ones)."""
    wanted = list(names) if names else list(PROFILE_ROWS)
    unknown = [n for n in wanted if n not in PROFILE_ROWS]
    if unknown:
        raise DeviceError(f"no corpus rows are mapped to {', '.join(unknown)}; profiles with "
                          f"rows: {', '.join(PROFILE_ROWS)}")
    return [fit_one(name, rows, build_missing, progress=progress) for name in wanted]


def prior_text(path: Path) -> str:
    """A profile file's text without the ``[fit]`` table `write_fit` appended at its end."""
    text = Path(path).read_text("utf-8")
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.strip() == FIT_HEADER:
            return "".join(lines[:i]).rstrip("\n") + "\n"
    return text


def fit_toml(basis: FitBasis) -> str:
    """The ``[fit]`` table as TOML text."""
    import tomli_w

    return tomli_w.dumps({"fit": basis.to_toml()})


def write_fit(result: ProfileFit, folder: Path) -> Path:
    """``folder``/NAME.toml: the shipped profile's prior text plus the ``[fit]`` table;
    read back before it is kept, so a bad table never lands."""
    path = Path(folder) / f"{result.name}.toml"
    text = prior_text(Path(result.prior.path)) + "\n" + fit_toml(result.chosen)
    parse_fit(path, tomllib.loads(text))   # checked before anything is written
    written = write_file_atomic(path, text, make_parents=True)
    parse_profile(written)
    return written


def fit_report(result: ProfileFit) -> dict:
    """The JSON summary of one profile's fit (what `devices fit --json` prints)."""
    measured = result.measured_s
    return {"profile": result.name, "basis": result.chosen.basis,
            "method": result.chosen.method, "rows": len(result.samples),
            "rows_without_standin": result.skipped, "families": list(result.chosen.families),
            "prior_median_abs_error": round(median_abs_error(measured,
                                                             result.prior_predicted_s), 4),
            "cv_median_abs_error": {m: round(median_abs_error(measured, r.cv_predicted_s), 4)
                                    for m, r in result.methods.items()},
            "cv_log_residual_p10": round(result.chosen.cv_log_residual_p10, 4),
            "cv_log_residual_p90": round(result.chosen.cv_log_residual_p90, 4)}
