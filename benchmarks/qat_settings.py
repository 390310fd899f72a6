"""QAT settings on fer_emotion, one `edgeopt quantize --qat` per setting (issue 19 study).

Each run is `benchmarks/qat.py`'s label-free QAT on the same faces (calibration 300,
held out 300), with fields of `QatSettings` (`s_…`) or of the `DistillConfig` the step
builds (`d_…`) replaced; the figure is the written `.tflite`'s top-1 agreement with the
float `.tflite` in LiteRT on the 300 held-out faces. One JSON line per run is appended to
`<workdir>/settings.jsonl`, with the range the tensor feeding the softmax started and
ended training with (`logits_ranges`).

    python benchmarks/qat_settings.py TAG '{"d_temperature": 1.0}' [--workdir DIR]
    python benchmarks/qat_settings.py ptq '{"qat": false}'      # PTQ alone, same harness
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _override(settings: dict) -> None:
    """Replace defaults in the QAT step for this process (the study's only change)."""
    import edgeopt.qat_step as step
    import edgeopt.quantize as quantize

    distill = {k[2:]: tuple(v) if isinstance(v, list) else v
               for k, v in settings.items() if k.startswith("d_")}
    qat = {k[2:]: v for k, v in settings.items() if k.startswith("s_")}
    config, qat_settings = step.DistillConfig, step.QatSettings
    step.DistillConfig = lambda **kw: config(**{**kw, **distill})
    quantize.QatSettings = lambda *a, **kw: dataclasses.replace(qat_settings(*a, **kw), **qat)


def _watch_logits(captured: dict) -> None:
    """Keep the QAT step's graph and its quantizers' start ranges (to report afterwards
    where the pre-softmax tensor's range went)."""
    import edgeopt.qat_step as step
    from edgeopt.calibration.qat import learned_ranges

    graph = step.training_graph

    def training_graph(*args):
        folded, student = graph(*args)
        captured.update(folded=folded, student=student, start=learned_ranges(student))
        return folded, student

    step.training_graph = training_graph


def _logits_ranges(captured: dict) -> dict:
    """Each tensor feeding a softmax output: its range at the start and end of training."""
    from edgeopt.calibration.qat import learned_ranges, producers, softmax_outputs

    if not captured:
        return {}
    folded, end = captured["folded"], learned_ranges(captured["student"])
    names = {p for n in softmax_outputs(folded) for p in producers(folded.get_layer(n))}
    return {n: {"start": [round(v, 4) for v in captured["start"][n]],
                "learned": [round(v, 4) for v in end[n]]}
            for n in sorted(names) if n in end}


def main(argv: list[str] | None = None) -> int:
    import qat as bench
    import tensorflow as tf

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tag")
    parser.add_argument("settings", nargs="?", default="{}", help="JSON object")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/edgeopt-qat-settings"))
    args = parser.parse_args(argv)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(2)
    settings = json.loads(args.settings)
    _override(settings)
    captured: dict = {}
    _watch_logits(captured)
    from edgeopt.quantize import QuantizeRequest, quantize_file

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    data = bench.fer_faces()
    bench.write_data(data, "input_1", work)
    model = bench.fer_model(None, 0, work)
    float_path = work / "float.tflite"
    if not float_path.exists():
        float_path.write_bytes(bench.baselines(model, "input_1", data["calib"][0],
                                               work / "convert")[0]["float"])
    reference = bench.predict(float_path.read_bytes(), data["eval"][0], None)
    out = work / f"{args.tag}.tflite"
    started = time.monotonic()
    record = quantize_file(QuantizeRequest(
        str(model), str(work / "calib_unlabelled.npz"), str(out), eval=str(work / "eval.npz"),
        qat=settings.get("qat", True), qat_epochs=settings.get("epochs", 10)))
    picks = bench.predict(out.read_bytes(), data["eval"][0], None)
    qat = record.get("qat") or {}
    line = {"tag": args.tag, "settings": settings,
            "agreement_percent": round(float((picks == reference).mean() * 100), 2),
            "flips": int((picks != reference).sum()),
            "seconds": round(time.monotonic() - started, 1), "qat_seconds": qat.get("seconds"),
            "logits_ranges": _logits_ranges(captured),
            "epochs_run": qat.get("epochs_run"), "best_epoch": qat.get("best_epoch"),
            "held_back": [(h.get("epoch"), h.get("val_loss"), h.get("agreement"))
                          for h in qat.get("history", [])],
            "utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "load_average": os.getloadavg()}
    print(json.dumps(line))
    with open(work / "settings.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
