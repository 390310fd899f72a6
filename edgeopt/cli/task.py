"""The `--task` options of `build` and `quantize`: what the model's outputs mean."""

from __future__ import annotations

from collections.abc import Callable

import click

from edgeopt.task_spec import (
    BOX_FORMATS,
    DEFAULT_BLANK_INDEX,
    DEFAULT_SCORE_THRESHOLD,
    TASKS,
)

TASK_HELP = ("What the outputs are, for a task metric against the float model: classify "
             "(top-1 agreement), detect (detection F1 at IoU 0.5 after score threshold and "
             "NMS; needs --boxes and --scores), sequence (greedy CTC decoded-string match), "
             "regress (relative error). Without it each output is scored by its shape.")


def task_options(command: Callable) -> Callable:
    """--task, --task-output, --boxes, --scores, --box-format, --score-threshold,
    --blank-index and --accept-collapsed."""
    options = [
        click.option("--task", type=click.Choice(TASKS), default=None, help=TASK_HELP),
        click.option("--task-output", default=None, metavar="OUTPUT",
                     help="The output the classify/sequence/regress metric reads (default: "
                     "the first [N, classes] output for classify, [N, steps, classes] for "
                     "sequence, the first output for regress)."),
        click.option("--boxes", default=None, metavar="OUTPUT[:START:END]",
                     help="--task detect: where the boxes are, e.g. output0:0:4 (channels "
                     "0-3 of output0; channels run along the last axis, or axis 1 of an "
                     "[N, C, anchors] output with C < anchors, as YOLOv5/v8 export them)."),
        click.option("--scores", default=None, metavar="OUTPUT[:START:END]",
                     help="--task detect: where the class scores are, e.g. output0:4:84 "
                     "(one column per class; a box's score is its best class)."),
        click.option("--box-format", type=click.Choice(BOX_FORMATS), default="cxcywh",
                     show_default=True, help="--task detect: how the 4 box values are "
                     "ordered."),
        click.option("--score-threshold", type=click.FloatRange(0, 1),
                     default=DEFAULT_SCORE_THRESHOLD, show_default=True,
                     help="--task detect: detections below this score are dropped before "
                     "NMS (IoU 0.45, per class)."),
        click.option("--blank-index", type=click.IntRange(min=0), default=DEFAULT_BLANK_INDEX,
                     show_default=True, help="CTC blank class of sequence outputs (dropped "
                     "when decoding)."),
        click.option("--accept-collapsed", is_flag=True, help="Write the model even when an "
                     "output (or a channel group of one) collapsed: constant while the float "
                     "output varies, one class for every sample, or SQNR below 3 dB on "
                     "box/landmark/map values."),
    ]
    for option in reversed(options):
        command = option(command)
    return command
