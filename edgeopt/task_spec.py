"""What the model's outputs mean (`--task`), so validation can score the task itself.

    >>> spec = TaskSpec.from_flags("detect", boxes="output0:0:4", scores="output0:4:22")
    >>> spec.boxes.output, spec.boxes.start, spec.boxes.end
    ('output0', 0, 4)

Without a task, validation picks a metric per output from what the output looks like
(edgeopt.validate); with one it also scores the task against the float model:

- ``classify``: top-1 agreement of the class output (``--task-output``, default the first
  ``[N, classes]`` output);
- ``detect``: detection F1 at IoU 0.5 between float and artifact detections, each after a
  score threshold and per-class non-maximum suppression; ``--boxes`` and ``--scores`` say
  where boxes and class scores are, as ``OUTPUT[:START:END]`` (channels START..END-1 of
  OUTPUT; the whole output without them);
- ``sequence``: greedy CTC decoded-string match (argmax per step, repeats collapsed, the
  blank index — ``--blank-index``, default 0 — dropped);
- ``regress``: relative error, mean |artifact - float| / mean |float|.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from edgeopt.errors import ConfigError

TASKS = ("classify", "detect", "sequence", "regress")
BOX_FORMATS = ("cxcywh", "xywh", "xyxy", "yxyx")
DEFAULT_SCORE_THRESHOLD = 0.25
DEFAULT_BLANK_INDEX = 0


@dataclass(frozen=True)
class ChannelSlice:
    """Channels [start, end) of one output (the whole channel axis when None)."""

    output: str
    start: int | None = None
    end: int | None = None

    @classmethod
    def parse(cls, text: str, flag: str) -> ChannelSlice:
        """`OUTPUT` or `OUTPUT:START:END` (the output name may itself hold colons)."""
        parts = text.rsplit(":", 2)
        if len(parts) == 3 and parts[1].strip().isdigit() and parts[2].strip().isdigit():
            start, end = int(parts[1]), int(parts[2])
            if not parts[0] or end <= start:
                raise ConfigError(f"{flag} {text!r}: give OUTPUT:START:END with START < END, "
                                  "e.g. output0:0:4")
            return cls(parts[0], start, end)
        if not text.strip():
            raise ConfigError(f"{flag} needs an output name, e.g. output0:0:4")
        return cls(text)

    def text(self) -> str:
        return self.output if self.start is None else f"{self.output}:{self.start}:{self.end}"


@dataclass(frozen=True)
class TaskSpec:
    """The task flags, checked; `task` None means "score each output by what it looks like"."""

    task: str | None = None
    output: str | None = None          # the task's output (classify, sequence, regress)
    boxes: ChannelSlice | None = None  # detect
    scores: ChannelSlice | None = None
    box_format: str = "cxcywh"
    score_threshold: float = DEFAULT_SCORE_THRESHOLD
    blank_index: int = DEFAULT_BLANK_INDEX
    accept_collapsed: bool = False

    @classmethod
    def from_flags(cls, task: str | None, output: str | None = None, boxes: str | None = None,
                   scores: str | None = None, box_format: str = "cxcywh",
                   score_threshold: float = DEFAULT_SCORE_THRESHOLD,
                   blank_index: int = DEFAULT_BLANK_INDEX,
                   accept_collapsed: bool = False) -> TaskSpec:
        """The flags as one spec; a contradiction is a ConfigError naming the flag."""
        if task is not None and task not in TASKS:
            raise ConfigError(f"--task must be one of {', '.join(TASKS)}, got {task!r}")
        if (boxes or scores) and task != "detect":
            raise ConfigError("--boxes/--scores describe a detector's outputs: add --task detect")
        if task == "detect" and not (boxes and scores):
            raise ConfigError("--task detect needs --boxes OUTPUT[:START:END] and --scores "
                              "OUTPUT[:START:END] (e.g. a YOLOv8 [1, 4+classes, anchors] output: "
                              "--boxes output0:0:4 --scores output0:4:84)")
        if output and task in (None, "detect"):
            raise ConfigError("--task-output names the output of --task classify, sequence or "
                              "regress")
        if box_format not in BOX_FORMATS:
            raise ConfigError(f"--box-format must be one of {', '.join(BOX_FORMATS)}")
        if not 0 <= score_threshold <= 1:
            raise ConfigError(f"--score-threshold must be in [0, 1], got {score_threshold}")
        if blank_index < 0:
            raise ConfigError(f"--blank-index must be >= 0, got {blank_index}")
        return cls(task, output or None,
                   ChannelSlice.parse(boxes, "--boxes") if boxes else None,
                   ChannelSlice.parse(scores, "--scores") if scores else None,
                   box_format, float(score_threshold), int(blank_index), bool(accept_collapsed))

    def check_outputs(self, names: list[str]) -> None:
        """Every output a flag names exists (before the long stages run)."""
        named = [("--task-output", self.output)]
        named += [(flag, s.output) for flag, s in (("--boxes", self.boxes),
                                                  ("--scores", self.scores)) if s]
        for flag, name in named:
            if name is not None and name not in names:
                raise ConfigError(f"{flag}: the model has no output {name!r} (its outputs: "
                                  f"{', '.join(names)})")

    def to_json(self) -> dict:
        record = asdict(self)
        record["boxes"] = self.boxes.text() if self.boxes else None
        record["scores"] = self.scores.text() if self.scores else None
        return record


NO_TASK = TaskSpec()
