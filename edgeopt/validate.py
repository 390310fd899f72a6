"""Compare a compressed model's outputs with the float model's on held-back samples.

    >>> record = compare(reference_outputs, artifact_outputs, labels, names=["logits"])
    >>> record.metric, record.value, record.outputs[0].sqnr_db
    ('top1_accuracy', 0.985, 31.2)

Every output gets its own SQNR, cosine and errors, and a metric picked by what it is:

- ``classes`` — a class distribution ([N, C] rows that are probabilities; or the only
  output of a model, or the first one when labels are given; or ``--task classify``):
  top-1 agreement;
- ``sequence`` — per-step class scores [N, T, C] (per-step probabilities, or ``--task
  sequence``): per-step agreement and the greedy CTC decoded-string match;
- ``values`` — anything else (boxes, landmarks, embeddings, maps): relative and absolute
  error. When one output mixes scales (box coordinates 0..320 next to scores 0..1 on one
  channel axis) each channel group gets its own figures too.

An output whose artifact values are constant while the float ones vary is *collapsed*;
so is a values output or channel group below ``COLLAPSE_SQNR_DB``, a class output that
gives every sample one class, a sequence whose decoded strings are all empty
(`collapse_reason`). `check_collapsed` fails the build on it unless the user accepts it.

A channel group whose float values are float32 round-off of the output they sit in (the
wrist's z in a hand landmark model, ~1e-6 beside coordinates of +-200: zero by
construction, what is left of a subtraction) is *not judged* (`unjudged_reason`): any
int8 grid that holds the output rounds it to 0, which is what the float model means. It
is named, kept out of the worst SQNR and not called a collapse. Class scores 0..1 next to
boxes 0..320 are 3e-3 of the output, far above round-off: their collapse still fails.
So is an output the held-out data does not exercise: one whose op fixes its int8 grid
(LOGISTIC and SOFTMAX write [0, 1] in steps of 1/256, TANH [-1, 1] in 1/128), whose float
values stay within one step and the artifact's within one step of them (a wake-word score
of 1e-5 on audio without the wake word reads 0). Those figures say nothing either way.
The pooled SQNR/cosine over all outputs is kept (``pooled_over`` says what it pools); it
is a quality figure only for a single output of one scale.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from edgeopt.errors import ConversionError
from edgeopt.task_metrics import ctc_greedy, detection_f1, step_agreement, string_match
from edgeopt.task_spec import DEFAULT_BLANK_INDEX, NO_TASK, ChannelSlice, TaskSpec

COLLAPSE_SQNR_DB = 3.0   # noise above half the signal power: the output no longer follows
LOSSY_SQNR_DB = 15.0     # below it build and compress warn that the output lost too much
SCALE_GAP = 10.0         # channel groups whose float magnitudes differ by >= 10x
MAX_GROUP_AXIS = 256     # only channel-like axes (not spatial or anchor axes) are split
MAX_RUNS = 4             # a real channel layout splits into few contiguous groups
PROBABILITY_TOL = 1e-3
ONE_CLASS_SAMPLES = 16   # below this, one class for every sample can be chance, not collapse
# float32 round-off: a part whose largest |value| is within a few float32 epsilons of the
# output's largest holds no value the float model computed (2**-21 ~ 4.8e-7 relative)
ROUNDOFF_RELATIVE = 4 * float(np.finfo(np.float32).eps)
# ops whose int8 output grid the op fixes (not calibration): (range, step)
FIXED_GRIDS = {"LOGISTIC": ("[0, 1]", 1 / 256), "SOFTMAX": ("[0, 1]", 1 / 256),
               "TANH": ("[-1, 1]", 1 / 128), "Sigmoid": ("[0, 1]", 1 / 256),
               "Softmax": ("[0, 1]", 1 / 256), "Tanh": ("[-1, 1]", 1 / 128)}


class CollapsedOutputError(ConversionError):
    """An output of the artifact no longer follows the float model."""


def sqnr_db(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio in dB; +inf when identical."""
    reference = reference.astype(np.float64)
    noise = float(np.sum((reference - candidate.astype(np.float64)) ** 2))
    signal = float(np.sum(reference ** 2))
    if noise == 0:
        return float("inf")
    if signal == 0:
        return float("-inf")
    return 10.0 * np.log10(signal / noise)


def is_classifier(output: np.ndarray) -> bool:
    """[N, C > 1]: shaped like class scores (see `output_kind` for the full rule)."""
    return output.ndim == 2 and output.shape[1] > 1


def is_probability(output: np.ndarray) -> bool:
    """Non-negative rows along the last axis that sum to 1 (a softmax)."""
    if output.shape[-1] < 2 or output.dtype.kind != "f" or output.size == 0:
        return False
    sums = output.astype(np.float64).sum(-1)
    return bool(output.min() >= -PROBABILITY_TOL and np.all(np.abs(sums - 1) < PROBABILITY_TOL))


def top1_agreement(reference: np.ndarray, candidate: np.ndarray) -> float | None:
    """Share of samples whose top class is the same; samples whose float output has no single
    top class (a tie, e.g. a constant softmax) are left out, and None when all are."""
    top2 = np.sort(reference, axis=1)[:, -2:]
    decided = top2[:, 1] > top2[:, 0]
    if not decided.any():
        return None
    same = reference.argmax(1) == candidate.argmax(1)
    return float(np.mean(same[decided]))


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of two arrays as flat vectors (1.0 for two zero arrays)."""
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    if norm == 0:
        return 1.0 if np.array_equal(a, b) else 0.0
    return float(np.dot(a, b) / norm)


def relative_error(reference: np.ndarray, candidate: np.ndarray) -> float | None:
    """mean |candidate - reference| / mean |reference| (None for an all-zero reference)."""
    ref = reference.astype(np.float64)
    scale = float(np.mean(np.abs(ref)))
    if scale == 0:
        return None
    return float(np.mean(np.abs(candidate.astype(np.float64) - ref)) / scale)


# --- what an output is -----------------------------------------------------------------

def output_kind(reference: np.ndarray, index: int, count: int, labelled: bool,
                task: TaskSpec = NO_TASK, task_index: int | None = None,
                name: str | None = None) -> str:
    """classes | sequence | values (see the module docstring): the task's own output as
    the task says, a detector's box/score outputs as values, the rest by their look."""
    if task_index == index:
        return {"classify": "classes", "sequence": "sequence"}.get(str(task.task), "values")
    detector = [s.output for s in (task.boxes, task.scores) if s is not None]
    if name is not None and name in detector:
        return "values"
    if is_classifier(reference) and (is_probability(reference) or count == 1
                                      or (labelled and index == 0)):
        return "classes"
    if reference.ndim == 3 and reference.shape[1] > 1 and is_probability(reference):
        return "sequence"
    return "values"


def task_output_index(reference: list[np.ndarray], names: list[str], task: TaskSpec) -> int | None:
    """The output the task is scored on: `--task-output`, else the first that fits."""
    if task.task in (None, "detect"):
        return None
    if task.output is not None:
        return names.index(task.output)
    wanted = {"classify": 2, "sequence": 3}.get(task.task)
    for i, ref in enumerate(reference):
        if wanted is None or (ref.ndim == wanted and ref.shape[-1] > 1):
            return i
    raise ConversionError(f"--task {task.task}: no output is shaped like "
                          f"{'[N, classes]' if wanted == 2 else '[N, steps, classes]'} "
                          f"(outputs: {', '.join(names)}); name one with --task-output")


# --- channel groups --------------------------------------------------------------------

def channel_axis(shape: tuple[int, ...]) -> int:
    """The axis a layout's START:END counts along: the last, except for [N, C, A] with C < A
    (the YOLOv5/v8 export layout, channels before anchors)."""
    if len(shape) == 3 and shape[1] < shape[2]:
        return 1
    return len(shape) - 1


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    edges = np.flatnonzero(np.diff(mask.astype(np.int8))) + 1
    bounds = [0, *edges.tolist(), len(mask)]
    return list(zip(bounds[:-1], bounds[1:]))


def _scale_split(reference: np.ndarray, axis: int) -> tuple[float, list[tuple[int, int]]]:
    """(gap, contiguous groups) when the float magnitudes per index along `axis` fall into
    two sets >= SCALE_GAP apart; (0, []) otherwise."""
    other = tuple(a for a in range(reference.ndim) if a != axis)
    scale = np.abs(reference.astype(np.float64)).max(axis=other)
    positive = np.sort(scale[scale > 0])
    if len(positive) < 2:
        return 0.0, []
    ratios = positive[1:] / positive[:-1]
    cut = int(np.argmax(ratios))
    if ratios[cut] < SCALE_GAP:
        return 0.0, []
    runs = _runs(scale >= positive[cut + 1])
    return (float(ratios[cut]), runs) if len(runs) <= MAX_RUNS else (0.0, [])


def mixed_scale_groups(reference: np.ndarray) -> tuple[int, list[tuple[int, int]]]:
    """Channel groups of an output that mixes scales: (axis, [(start, end), ...]), or
    (axis, []) when it does not. Only a channel-like axis is split: axis 1 or the last,
    at most MAX_GROUP_AXIS long, and for 4-D maps the shorter of the two."""
    if reference.ndim < 2:
        return -1, []
    axes = sorted({1, reference.ndim - 1})
    if reference.ndim == 4:
        axes = [min(axes, key=lambda a: reference.shape[a])]
    best: tuple[float, int, list[tuple[int, int]]] = (0.0, -1, [])
    for axis in axes:
        if 2 <= reference.shape[axis] <= MAX_GROUP_AXIS:
            gap, runs = _scale_split(reference, axis)
            if gap > best[0]:
                best = (gap, axis, runs)
    return best[1], best[2]


@dataclass(frozen=True)
class ChannelGroup:
    axis: int
    start: int
    end: int
    role: str | None       # boxes | scores (from --boxes/--scores), None when detected
    float_min: float
    float_max: float
    sqnr_db: float
    cosine: float
    max_abs: float
    collapsed: str | None
    unjudged: str | None = None   # why these figures cannot judge the artifact


def _take(array: np.ndarray, axis: int, start: int, end: int) -> np.ndarray:
    return np.take(array, np.arange(start, end), axis=axis)


def unjudged_reason(part: np.ndarray, whole: np.ndarray) -> str | None:
    """Why `part` of the float output `whole` cannot judge the artifact, or None: its
    largest |value| is float32 round-off of the output's largest (numerically zero)."""
    peak, scale = float(np.max(np.abs(part))), float(np.max(np.abs(whole)))
    if part.size == 0 or scale == 0 or peak > ROUNDOFF_RELATIVE * scale:
        return None
    return (f"numerically zero in the float model: its largest |value| {peak:.3g} is "
            f"{peak / scale:.2g} of the output's largest ({scale:.4g}), float32 round-off; "
            "not a collapse, and not validated")


def unexercised_reason(reference: np.ndarray, candidate: np.ndarray,
                       op: str | None) -> str | None:
    """Why an output of `op` cannot be judged on these samples, or None: the op fixes its
    int8 grid, the float values move less than one step of it, and the artifact stays
    within one step of them."""
    if op not in FIXED_GRIDS or reference.size == 0:
        return None
    span, step = FIXED_GRIDS[op]
    ref = reference.astype(np.float64)
    if np.ptp(ref) > step or _max_abs(ref, candidate) > step:
        return None
    return (f"not exercised by the held-out data: the float output stays in "
            f"[{ref.min():.3g}, {ref.max():.3g}], within one step ({step:.3g}) of the fixed "
            f"{span} int8 grid its {op} writes, and the artifact within one step of it; not "
            "a collapse, and not validated")


def _group(ref: np.ndarray, cand: np.ndarray, axis: int, span: tuple[int, int],
           role: str | None) -> ChannelGroup:
    r, c = _take(ref, axis, *span), _take(cand, axis, *span)
    unjudged = unjudged_reason(r, ref)
    return ChannelGroup(axis, span[0], span[1], role, float(r.min()), float(r.max()),
                        sqnr_db(r, c), cosine_similarity(r, c), _max_abs(r, c),
                        None if unjudged else collapse_reason(r, c), unjudged)


def _layout_groups(name: str, ref: np.ndarray, cand: np.ndarray,
                   task: TaskSpec) -> list[ChannelGroup]:
    groups = []
    for role, part in (("boxes", task.boxes), ("scores", task.scores)):
        if part is not None and part.output == name and part.start is not None \
                and part.end is not None:
            axis = channel_axis(ref.shape)
            groups.append(_group(ref, cand, axis, (part.start, part.end), role))
    return groups


def channel_groups(name: str, ref: np.ndarray, cand: np.ndarray,
                   task: TaskSpec = NO_TASK) -> list[ChannelGroup]:
    """The --boxes/--scores slices of this output, else its mixed-scale groups."""
    groups = _layout_groups(name, ref, cand, task)
    if groups:
        return groups
    axis, spans = mixed_scale_groups(ref)
    return [_group(ref, cand, axis, span, None) for span in spans]


# --- collapse --------------------------------------------------------------------------

def collapse_reason(reference: np.ndarray, candidate: np.ndarray, kind: str = "values",
                    blank: int = DEFAULT_BLANK_INDEX) -> str | None:
    """Why the artifact's values no longer follow the float ones, or None.

    Constant values while the float ones vary is a collapse for every kind. Values (boxes,
    landmarks, maps) also collapse below COLLAPSE_SQNR_DB; class scores only when every
    sample gets one class the float model does not always give (a softmax can lose SQNR and
    keep its top-1), CTC steps when every decoded string is empty while the float's are not.
    """
    ref = reference.astype(np.float64)
    if np.ptp(ref) == 0:
        return None  # a constant float output has nothing to follow
    if np.ptp(candidate) == 0:
        return (f"every value is {float(candidate.flat[0]):.4g} while the float output "
                f"varies over [{ref.min():.4g}, {ref.max():.4g}]")
    if kind == "classes":
        return _one_class(ref, candidate)
    if kind == "sequence":
        return _empty_strings(ref, candidate, blank)
    sqnr = sqnr_db(ref, candidate)
    if sqnr < COLLAPSE_SQNR_DB:
        return f"SQNR {sqnr:.1f} dB is below the {COLLAPSE_SQNR_DB:.0f} dB collapse floor"
    return None


def _one_class(reference: np.ndarray, candidate: np.ndarray) -> str | None:
    top = candidate.argmax(-1).ravel()
    if len(top) >= ONE_CLASS_SAMPLES and len(set(top.tolist())) == 1 and \
            len(set(reference.argmax(-1).ravel().tolist())) > 1:
        return (f"every sample gets class {int(top[0])} while the float model gives "
                f"{len(set(reference.argmax(-1).ravel().tolist()))} different classes")
    return None


def _empty_strings(reference: np.ndarray, candidate: np.ndarray, blank: int) -> str | None:
    if candidate.ndim != 3:
        return None
    if all(not s for s in ctc_greedy(candidate, blank)) and \
            any(ctc_greedy(reference, blank)):
        return f"every decoded string is empty (blank {blank}) while the float's are not"
    return None


def _max_abs(ref: np.ndarray, cand: np.ndarray) -> float:
    if ref.size == 0:
        return 0.0
    return float(np.max(np.abs(ref.astype(np.float64) - cand)))


# --- per output ------------------------------------------------------------------------

@dataclass(frozen=True)
class OutputFigures:
    name: str
    kind: str              # classes | sequence | values
    samples: int
    sqnr_db: float
    cosine: float
    max_abs: float
    mean_abs: float
    relative_error: float | None
    top1_agreement: float | None = None   # classes
    step_agreement: float | None = None   # sequence
    string_match: float | None = None     # sequence: greedy CTC, blank_index dropped
    blank_index: int | None = None
    collapsed: str | None = None
    groups: tuple[ChannelGroup, ...] = ()
    unjudged: str | None = None   # why these figures cannot judge the artifact

    def collapse_lines(self) -> list[str]:
        """One phrase per collapsed part: the output itself, or a channel group of it."""
        lines = [f"output {self.name!r}: {self.collapsed}"] if self.collapsed else []
        lines += [f"output {self.name!r} channels {g.start}:{g.end}"
                  f"{f' ({g.role})' if g.role else ''}: {g.collapsed}"
                  for g in self.groups if g.collapsed]
        return lines

    def unjudged_lines(self) -> list[str]:
        """One phrase per part whose figures cannot judge the artifact."""
        lines = [f"output {self.name!r}: {self.unjudged}"] if self.unjudged else []
        return lines + [f"output {self.name!r} channels {g.start}:{g.end}: {g.unjudged}"
                        for g in self.groups if g.unjudged]

    @property
    def worst_sqnr_db(self) -> float:
        """The lowest SQNR of the output and its judged channel groups (+inf when the
        output itself is not judged)."""
        if self.unjudged:
            return float("inf")
        return min([self.sqnr_db, *(g.sqnr_db for g in self.groups if not g.unjudged)])


def output_figures(name: str, ref: np.ndarray, cand: np.ndarray, kind: str,
                   task: TaskSpec = NO_TASK, op: str | None = None) -> OutputFigures:
    """Every figure of one output (see the module docstring for the metric by kind);
    `op`: the op that computes it, when known (FIXED_GRIDS)."""
    ref64, cand = ref.astype(np.float64), cand.astype(np.float64)
    extra: dict = {}
    if kind == "classes":
        extra["top1_agreement"] = top1_agreement(ref64, cand)
    elif kind == "sequence":
        extra.update(step_agreement=step_agreement(ref64, cand), blank_index=task.blank_index,
                     string_match=string_match(ref64, cand, task.blank_index))
    groups = tuple(channel_groups(name, ref64, cand, task)) if kind == "values" else ()
    mean_abs = float(np.mean(np.abs(ref64 - cand))) if ref.size else 0.0
    unjudged = unexercised_reason(ref64, cand, op)
    return OutputFigures(name, kind, len(ref), sqnr_db(ref64, cand),
                         cosine_similarity(ref64, cand), _max_abs(ref64, cand), mean_abs,
                         relative_error(ref64, cand),
                         collapsed=None if unjudged else collapse_reason(
                             ref64, cand, kind, task.blank_index),
                         groups=groups, unjudged=unjudged, **extra)


# --- the task metric -------------------------------------------------------------------

@dataclass(frozen=True)
class TaskFigure:
    task: str
    metric: str            # top1_agreement | detection_f1 | string_match | relative_error
    value: float | None
    samples: int
    outputs: tuple[str, ...]
    details: dict


def _slice(outputs: dict[str, np.ndarray], part: ChannelSlice, size: int | None) -> np.ndarray:
    """Per-sample [A, channels] arrays of a --boxes/--scores slice. A whole output (no
    START:END) takes its channels along the axis whose length is `size` (4 for boxes; for
    scores, the axis that is not the box count) when that is unambiguous."""
    array = outputs[part.output]
    axis = channel_axis(array.shape)
    if part.start is not None and part.end is not None:
        array = _take(array, axis, part.start, part.end)
    elif array.ndim == 3 and size is not None:
        fits = [a for a in (2, 1) if array.shape[a] == size]
        axis = fits[0] if fits else axis
    array = np.moveaxis(array, axis, -1)
    return array.reshape(len(array), -1, array.shape[-1])


def _score_channels(array: np.ndarray, part: ChannelSlice, anchors: int) -> int | None:
    """The channel count of a whole scores output whose other axis is the box count."""
    if part.start is not None or array.ndim != 3:
        return None
    other = {1: array.shape[2], 2: array.shape[1]}
    return next((other[a] for a in (2, 1) if array.shape[a] == anchors), None)


def _detect_figure(ref: dict, cand: dict, task: TaskSpec, samples: int) -> TaskFigure:
    assert task.boxes is not None and task.scores is not None
    rb, cb = _slice(ref, task.boxes, 4), _slice(cand, task.boxes, 4)
    size = _score_channels(ref[task.scores.output], task.scores, rb.shape[1])
    rs, cs = _slice(ref, task.scores, size), _slice(cand, task.scores, size)
    if rs.shape[1] == 1 and rs.shape[-1] == rb.shape[1]:  # [N, A] scores: one class
        rs, cs = rs.transpose(0, 2, 1), cs.transpose(0, 2, 1)
    if rb.shape[-1] != 4 or rb.shape[1] != rs.shape[1]:
        raise ConversionError(f"--boxes {task.boxes.text()} gives {rb.shape[-1]} values for "
                              f"{rb.shape[1]} boxes and --scores {task.scores.text()} "
                              f"{rs.shape[1]} rows: boxes need 4 values each, one row of "
                              "scores per box")
    record = detection_f1(list(rb), list(rs), list(cb), list(cs), task.score_threshold,
                          task.box_format)
    details = {**record, "score_threshold": task.score_threshold, "box_format": task.box_format}
    value = details.pop("f1")
    return TaskFigure("detect", "detection_f1", value, samples,
                      tuple(dict.fromkeys([task.boxes.output, task.scores.output])), details)


def task_figure(reference: list[np.ndarray], candidate: list[np.ndarray], names: list[str],
                task: TaskSpec, figures: list[OutputFigures]) -> TaskFigure | None:
    """The task metric against the float model (None without --task)."""
    if task.task is None:
        return None
    samples = len(reference[0])
    if task.task == "detect":
        return _detect_figure(dict(zip(names, reference)), dict(zip(names, candidate)), task,
                              samples)
    index = task_output_index(reference, names, task)
    assert index is not None
    out = figures[index]
    if task.task == "classify":
        return TaskFigure("classify", "top1_agreement", out.top1_agreement, samples,
                          (out.name,), {})
    if task.task == "sequence":
        return TaskFigure("sequence", "string_match", out.string_match, samples, (out.name,),
                          {"decoder": "greedy CTC", "blank_index": task.blank_index,
                           "step_agreement": out.step_agreement})
    return TaskFigure("regress", "relative_error", out.relative_error, samples, (out.name,),
                      {"definition": "mean |artifact - float| / mean |float|"})


# --- the record ------------------------------------------------------------------------

@dataclass(frozen=True)
class Validation:
    samples: int
    metric: str            # top1_accuracy | top1_agreement | sqnr_db | min_output_sqnr_db | task's
    reference: float | None
    value: float | None
    delta: float | None
    top1_agreement: float | None
    sqnr_db: float         # pooled over `pooled_over`: honest only for one output of one scale
    cosine: float
    max_abs: float
    pooled_over: tuple[str, ...] = ()
    outputs: tuple[OutputFigures, ...] = ()
    task: TaskFigure | None = None

    @property
    def collapsed(self) -> list[str]:
        return [line for out in self.outputs for line in out.collapse_lines()]

    @property
    def unjudged(self) -> list[str]:
        return [line for out in self.outputs for line in out.unjudged_lines()]

    @property
    def pooled_is_honest(self) -> bool:
        """One output and no channel groups: the pooled figures describe the output."""
        return len(self.outputs) <= 1 and not any(o.groups for o in self.outputs)

    @property
    def worst_sqnr_db(self) -> float:
        judged = [o.worst_sqnr_db for o in self.outputs if not o.unjudged]
        return min(judged or [self.sqnr_db])

    def accuracy_json(self) -> dict:
        return {"metric": self.metric, "reference": _finite(self.reference),
                "value": _finite(self.value), "delta": _finite(self.delta)}

    def to_json(self) -> dict:
        record = _clean(asdict(self))
        record["collapsed"] = self.collapsed
        record["unjudged"] = self.unjudged
        return record


def _clean(value):
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float):
        return _finite(value)
    return value


def _finite(value):
    if value is None or not np.isfinite(value):
        return None
    return round(float(value), 6)


def _headline(figures: list[OutputFigures], task: TaskFigure | None, labels,
              reference: list[np.ndarray], candidate: list[np.ndarray], pooled: float):
    """(metric, reference, value, delta, top-1 agreement) for the accuracy record."""
    classes = [i for i, f in enumerate(figures) if f.kind == "classes"]
    agreement = figures[classes[0]].top1_agreement if classes else None
    if labels is not None and agreement is not None and (task is None or
                                                         task.task == "classify"):
        ref0, cand0 = reference[classes[0]], candidate[classes[0]]
        ref_acc = float(np.mean(ref0.argmax(1) == labels))
        acc = float(np.mean(cand0.argmax(1) == labels))
        return "top1_accuracy", ref_acc, acc, acc - ref_acc, agreement
    if task is not None:
        ideal = 0.0 if task.metric == "relative_error" else 1.0
        delta = None if task.value is None else task.value - ideal
        return task.metric, ideal, task.value, delta, agreement
    if agreement is not None:
        return "top1_agreement", 1.0, agreement, agreement - 1.0, agreement
    if len(figures) > 1 or any(f.groups for f in figures):
        judged = [f.worst_sqnr_db for f in figures if not f.unjudged] or [pooled]
        return "min_output_sqnr_db", None, min(judged), None, None
    return "sqnr_db", None, pooled, None, None


def compare(reference: list[np.ndarray], candidate: list[np.ndarray],
            labels: np.ndarray | None = None, names: list[str] | None = None,
            task: TaskSpec = NO_TASK, ops: list[str | None] | None = None) -> Validation:
    """Per-output figures (in source output order), the task metric and the pooled SQNR;
    `ops`: the op computing each output, when known (an output of a fixed-grid op the
    samples do not exercise is not judged)."""
    names = list(names) if names else [f"output_{i}" for i in range(len(reference))]
    task.check_outputs(names)
    task_index = task_output_index(reference, names, task)
    kinds = [output_kind(r, i, len(reference), labels is not None, task, task_index, n)
             for i, (n, r) in enumerate(zip(names, reference))]
    ops = list(ops) if ops else [None] * len(reference)
    figures = [output_figures(n, r, c, k, task, op)
               for n, r, c, k, op in zip(names, reference, candidate, kinds, ops)]
    ref_all = np.concatenate([r.astype(np.float64).ravel() for r in reference])
    cand_all = np.concatenate([c.astype(np.float64).ravel() for c in candidate])
    pooled = sqnr_db(ref_all, cand_all)
    figure = task_figure(reference, candidate, names, task, figures)
    metric, ref_value, value, delta, agreement = _headline(figures, figure, labels, reference,
                                                           candidate, pooled)
    return Validation(len(reference[0]), metric, ref_value, value, delta, agreement, pooled,
                      cosine_similarity(ref_all, cand_all), _max_abs(ref_all, cand_all),
                      tuple(names), tuple(figures), figure)


def check_collapsed(validation: Validation, accept: bool = False) -> None:
    """A collapsed output fails the build (one line naming it), unless `accept`."""
    lines = validation.collapsed
    if lines and not accept:
        more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
        grouped = any(g.collapsed for out in validation.outputs for g in out.groups)
        why = (" (one int8 scale spans channels of very different ranges: the small ones "
               "round to a few steps)") if grouped else ""
        raise CollapsedOutputError(
            f"{lines[0]}{more} on {validation.samples} held-out samples: the quantized model "
            f"no longer follows the float one there{why}; try another --method or --scheme, "
            "or pass --accept-collapsed to write it anyway")
