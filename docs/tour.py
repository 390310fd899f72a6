"""The README's tour, produced by the tool itself.

Every `$ edgeopt …` block in README.md that sits between `<!-- tour:NAME -->` and
`<!-- /tour -->` is the output of the step NAME below, run on the bundled sample in a
scratch copy of `samples/`. `python docs/tour.py --write` runs the steps and rewrites
those blocks; `python docs/tour.py --check` runs them and exits 1 with a diff where the
README and the tool disagree (tests/test_readme_tour.py runs that).

Measured figures (wall times, host latencies) change from run to run; a step names them
in `volatile` and both sides have those numbers masked before they are compared, so the
check still catches a changed field, label, count or estimate.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SHOWN_HOME = "~/project"  # the scratch folder's path as the README shows it
INDENT = "    "
ELIDED = "..."

SAMPLE = "samples/digits_cnn"
DATA = "--calib samples/digits_calib.npz --eval samples/digits_eval.npz"

# Numbers that are measurements of this machine, not properties of the tool.
SECONDS = r"\d+(\.\d+)?s\b"
ANY_NUMBER = r"\d+(\.\d+)?(e[-+]?\d+)?"
# Figures of float arithmetic that differ in their last digits between CPUs (the kernels
# onnxruntime and LiteRT pick by instruction set): the parity error and the 2-decimal SQNR.
FLOAT_NOISE = (r"(?<=max abs )[-+.e\d]+", r"(?<=output SQNR )\d+\.\d+")


@dataclass(frozen=True)
class Step:
    """One command of the tour and which of its output lines the README shows."""

    name: str
    command: str
    head: int | None = None  # show the first N lines, then "..."
    grep: str | None = None  # show only lines matching (with "..." for gaps)
    tail_from: str | None = None  # show from the first line matching this on
    volatile: tuple[str, ...] = ()  # regexes of line parts masked before comparing
    files: dict[str, str] = field(default_factory=dict)  # written before the command


CONFIG_EXAMPLE = """\
[build]
model = "samples/digits_cnn.onnx"
device = "pixel-npu"
calib = "samples/digits_calib.npz"
eval = "samples/digits_eval.npz"

[bench]
runs = 100
"""

STEPS: tuple[Step, ...] = (
    Step("build", f"edgeopt build {SAMPLE}.onnx --device pixel-npu {DATA} -o dist/",
         volatile=(SECONDS,)),
    Step("build-all", f"edgeopt build {SAMPLE}.onnx --device pixel-npu,all {DATA} -o dist/",
         tail_from=r"^this artifact on each device", volatile=(SECONDS,)),
    Step("dry-run", "edgeopt build --scheme w8a8 --dry-run", head=10,
         files={"edgeopt.toml": CONFIG_EXAMPLE}),
    Step("inspect-onnx", f"edgeopt inspect {SAMPLE}.onnx"),
    Step("inspect-tflite", "edgeopt inspect dist/digits_cnn.tflite"),
    Step("convert", f"edgeopt convert {SAMPLE}.keras -o digits_float.tflite "
         "--calib samples/digits_calib.npz", volatile=(SECONDS, *FLOAT_NOISE)),
    Step("devices", "edgeopt devices"),
    Step("inspect-all", "edgeopt inspect dist/digits_cnn.tflite --device all",
         tail_from=r"placement per device"),
    Step("estimate", "edgeopt estimate dist/digits_cnn.tflite --device pixel-npu", head=8),
    Step("bench", "edgeopt bench dist/digits_cnn.tflite --runs 200", grep=r"^(?!• )",
         volatile=(r"(?<=runs     )\d+", r"(?<=sha256 )[0-9a-f]+",
                   r"(?<=latency  ).*", r"(?<=init     ).*", r"(?<=memory   ).*")),
    Step("quantize", f"edgeopt quantize {SAMPLE}.onnx {DATA} --scheme w4a8 "
         "-o digits_w4a8.onnx", volatile=(SECONDS, *FLOAT_NOISE)),
    Step("compress", f"edgeopt compress {SAMPLE}.onnx --prune 0.5 --distill "
         "--data samples/digits_calib.npz --eval samples/digits_eval.npz --epochs 10 "
         "-o digits_small.tflite",
         grep=r"^(?!• held-back agreement)", volatile=(
             SECONDS, r"(?<=host latency)\s.*")),
)


def run_step(step: Step, workdir: Path) -> list[str]:
    """The lines the README shows for `step`, run in `workdir` (paths shown relative)."""
    for name, text in step.files.items():
        (workdir / name).write_text(text)
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    # `edgeopt` as this interpreter's module: the tour runs the checkout it documents
    argv = [sys.executable, "-m", "edgeopt", *shlex.split(step.command)[1:]]
    done = subprocess.run(argv, cwd=workdir, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"tour step {step.name!r} failed ({done.returncode}):\n"
                         f"$ {step.command}\n{done.stdout[-3000:]}")
    for name in step.files:
        (workdir / name).unlink()
    text = done.stdout.replace(str(workdir), SHOWN_HOME)
    return [f"$ {step.command}", *select(step, text.rstrip("\n").splitlines())]


def select(step: Step, lines: list[str]) -> list[str]:
    """The part of a command's output that the README shows."""
    if step.tail_from is not None:
        start = next((i for i, line in enumerate(lines) if re.search(step.tail_from, line)),
                     len(lines))
        lines = ([ELIDED] if start else []) + lines[start:]
    if step.grep is not None:
        kept: list[str] = []
        for line in lines:
            if re.search(step.grep, line):
                kept.append(line)
            elif not kept or kept[-1] != ELIDED:
                kept.append(ELIDED)
        lines = kept
    if step.head is not None and len(lines) > step.head:
        lines = lines[:step.head] + [ELIDED]
    return lines


def readme_blocks(text: str) -> dict[str, tuple[int, int]]:
    """Start and end character offsets of each `<!-- tour:NAME -->` block's body."""
    blocks = {}
    for match in re.finditer(r"<!-- tour:(?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /tour -->",
                             text, re.S):
        blocks[match["name"]] = (match.start("body"), match.end("body"))
    return blocks


def render(lines: list[str]) -> str:
    return "\n" + "\n".join((INDENT + line).rstrip() for line in lines) + "\n\n"


def masked(step: Step, body: str) -> str:
    for pattern in step.volatile:
        body = re.sub(pattern, "#", body)
    return body


def tour(steps: tuple[Step, ...]) -> dict[str, list[str]]:
    """Run every step in one scratch copy of samples/, in order (later steps read dist/)."""
    with tempfile.TemporaryDirectory(prefix="edgeopt-tour-") as tmp:
        workdir = Path(tmp) / "project"
        workdir.mkdir()
        shutil.copytree(ROOT / "samples", workdir / "samples")
        return {step.name: run_step(step, workdir) for step in steps}


def compare(text: str, outputs: dict[str, list[str]]) -> list[str]:
    """Differences between the README's blocks and the tool's output, as diff lines."""
    blocks = readme_blocks(text)
    problems: list[str] = []
    shown_config = "\n".join((INDENT + line).rstrip() for line in
                             ["# edgeopt.toml", *CONFIG_EXAMPLE.splitlines()])
    if shown_config not in text:
        problems.append("README.md does not show the edgeopt.toml that the dry-run step uses")
    for step in STEPS:
        if step.name not in outputs:
            continue
        if step.name not in blocks:
            problems.append(f"README.md has no <!-- tour:{step.name} --> block")
            continue
        start, end = blocks[step.name]
        ours, theirs = masked(step, text[start:end]), masked(step, render(outputs[step.name]))
        if ours != theirs:
            problems += difflib.unified_diff(ours.splitlines(), theirs.splitlines(),
                                             f"README.md:{step.name}", "edgeopt", lineterm="")
    return problems


def rewrite(text: str, outputs: dict[str, list[str]]) -> str:
    for name, (start, end) in sorted(readme_blocks(text).items(), key=lambda kv: -kv[1][0]):
        if name in outputs:
            text = text[:start] + render(outputs[name]) + text[end:]
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite README.md's tour blocks")
    mode.add_argument("--check", action="store_true", help="exit 1 when README disagrees")
    parser.add_argument("--only", nargs="*", help="run only these steps (with --write)")
    args = parser.parse_args(argv)
    steps = tuple(s for s in STEPS if not args.only or s.name in args.only)
    outputs = tour(steps)
    text = README.read_text()
    if args.write:
        README.write_text(rewrite(text, outputs))
        print(f"rewrote {len(outputs)} tour block(s) in {README}")
        return 0
    problems = compare(text, outputs)
    print("\n".join(problems) or f"README.md agrees with edgeopt on {len(outputs)} steps")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
