"""`edgeopt build` of a real YOLO-class detector against the TFLite converter: wall and RSS.

Model: NudeNet's 320n.onnx (YOLOv8n-class detector, ~3 M parameters, shipped in the
`nudenet` wheel); calibration data /work/zoo/calib/nudenet_320n.npz (the package's own
preprocessing, made by benchmarks/zoo.py). In one run, one after the other, each as a
subprocess whose process tree's RSS is polled every 50 ms:

1. edgeopt: `edgeopt build 320n.onnx --device pixel-npu --input-shape images:1,3,320,320
   --calib CALIB -o OUT`;
2. baseline: onnx2tf (the options edgeopt's converter passes, the same fixed input shape)
   to a SavedModel, then
   `tf.lite.TFLiteConverter` full-integer quantization (int8 weights and activations,
   `representative_dataset` over the same calibration samples, int8 IO as pixel-npu).

Ratios edgeopt / baseline of wall time and peak RSS; targets <= 3x and <= 1.5x (issue 20
class 7).

    python benchmarks/detector_speed.py [--name detector_speed]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"

from _common import ForeignLoad, edgeopt_command, print_table, verdict, write_results
from build_mobilenetv2 import run_measured

NAME = "detector_speed"
MODEL = Path("/work/venv/lib/python3.11/site-packages/nudenet/320n.onnx")
CALIB = Path("/work/zoo/calib/nudenet_320n.npz")
SHAPE_FLAG = "images:1,3,320,320"  # the wheel's model has dynamic H, W
MAX_WALL_RATIO = 3.0
MAX_RSS_RATIO = 1.5


def baseline(model: Path, calib: Path, out: Path) -> None:
    """onnx2tf + TFLite converter full-integer quantization (runs in the child). onnx2tf
    is driven through edgeopt's converter call (it fixes the dynamic input shape in the
    ONNX file first, as `--input-shape` does: onnx2tf's own shape override fails on this
    model), so both sides convert alike and differ in the quantizer."""
    import numpy as np
    import tensorflow as tf

    from edgeopt.converters.onnx_to_tf import onnx_to_saved_model
    from edgeopt.model import load_model, with_input_shapes

    handle = with_input_shapes(load_model(model), (SHAPE_FLAG,))
    images = next(iter(np.load(calib).values())).transpose(0, 2, 3, 1)  # onnx2tf: NHWC
    converted = onnx_to_saved_model(handle, out, images[:8])

    def representative():
        for image in images:
            yield [image[None].astype(np.float32)]

    converter = tf.lite.TFLiteConverter.from_saved_model(str(converted.saved_model_dir))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    (out / "baseline.tflite").write_bytes(converter.convert())


def measure(label: str, command: list[str], workdir: Path) -> dict:
    start = time.perf_counter()
    stats = run_measured(command, workdir, workdir / f"{label}.out", workdir / f"{label}.err",
                         0.05)
    if stats.exit_code != 0:
        tail = (workdir / f"{label}.err").read_text()[-1500:]
        raise SystemExit(f"{label} exited {stats.exit_code}: {tail}")
    return {"wall_s": round(time.perf_counter() - start, 2),
            "cpu_s": round(stats.cpu_seconds, 2),
            "peak_rss_gib": round(stats.peak_rss_bytes / 1024 ** 3, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default=NAME)
    parser.add_argument("--baseline-into", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.baseline_into:
        baseline(MODEL, CALIB, args.baseline_into)
        return 0
    with tempfile.TemporaryDirectory(prefix="edgeopt-det-") as tmp, ForeignLoad() as load:
        workdir = Path(tmp)
        ours = measure("edgeopt", [*edgeopt_command(), "build", str(MODEL), "--device",
                                   "pixel-npu", "--input-shape", SHAPE_FLAG, "--calib", str(CALIB),
                                   "--eval", str(CALIB),
                                   "-o", "out"], workdir)
        theirs = measure("baseline", [sys.executable, __file__, "--baseline-into",
                                      str(workdir)], workdir)
    wall, rss = ours["wall_s"] / theirs["wall_s"], ours["peak_rss_gib"] / theirs["peak_rss_gib"]
    checks = [{"target": f"wall time <= {MAX_WALL_RATIO}x the converter's",
               "detail": f"{wall:.2f}x", "ok": wall <= MAX_WALL_RATIO},
              {"target": f"peak RSS <= {MAX_RSS_RATIO}x the converter's",
               "detail": f"{rss:.2f}x", "ok": rss <= MAX_RSS_RATIO}]
    print_table(("run", "wall s", "CPU s", "peak RSS GiB"),
                [("edgeopt build", *ours.values()), ("onnx2tf + TFLite converter",
                                                     *theirs.values())])
    print_table(("target", "detail", ""), [(c["target"], c["detail"], verdict(c["ok"]))
                                           for c in checks])
    results = {"model": str(MODEL), "calibration": str(CALIB), "edgeopt": ours,
               "baseline": theirs, "wall_ratio": round(wall, 2), "rss_ratio": round(rss, 2),
               "targets": checks, "foreign_load": load.result()}
    print(f"\nwrote {write_results(args.name, results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
