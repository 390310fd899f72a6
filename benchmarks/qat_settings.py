"""QAT settings on fer_emotion, one `edgeopt quantize --qat` per setting (issue 19 study).

Each run is `benchmarks/qat.py`'s label-free QAT on the same faces (calibration 300,
held out 300), with fields of `QatSettings` (`s_…`) or of the `DistillConfig` the step
builds (`d_…`) replaced; the figure is the written `.tflite`'s top-1 agreement with the
float `.tflite` in LiteRT on the 300 held-out faces. One JSON line per run is appended to
`<workdir>/settings.jsonl`.

    python benchmarks/qat_settings.py TAG '{"d_temperature": 1.0}' [--workdir DIR]
    python benchmarks/qat_settings.py ptq '{"qat": false}'      # PTQ alone, same harness
    python benchmarks/qat_settings.py old '{"s_activation_quantizer": "minmax_vars"}'
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


def logits_grid(content: bytes) -> dict | None:
    """The int8 scale and zero point of the SOFTMAX's input (fer_emotion's logits, the
    MEAN output) in a written `.tflite`: where the learned step matters most."""
    from edgeopt.model import tflite_interpreter

    interpreter = tflite_interpreter(content)
    details = {t["index"]: t for t in interpreter.get_tensor_details()}
    for op in interpreter._get_ops_details():
        if op["op_name"] == "SOFTMAX":
            q = details[int(op["inputs"][0])]["quantization_parameters"]
            if len(q["scales"]) == 1:
                scale, zero = float(q["scales"][0]), int(q["zero_points"][0])
                return {"scale": scale, "zero_point": zero,
                        "range": [scale * (-128 - zero), scale * (127 - zero)]}
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tag")
    parser.add_argument("settings", nargs="?", default="{}", help="JSON object")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/edgeopt-qat-settings"))
    parser.add_argument("--no-onednn", action="store_true",
                        help="TF_ENABLE_ONEDNN_OPTS=0 (on the Xeon with AMX of 2026-12-02, "
                             "TF 2.21's oneDNN kernels crashed fer_emotion's QAT training "
                             "step, both activation quantizers)")
    args = parser.parse_args(argv)
    if args.no_onednn:   # read once, when TensorFlow loads: before any import of it
        os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
    import qat as bench
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(2)
    settings = json.loads(args.settings)
    _override(settings)
    from edgeopt.quantize import QuantizeRequest, quantize_file

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    data = bench.fer_faces()
    bench.write_data(data, "input_1", work)
    model = bench.fer_model(None, 0, work)
    float_path = work / "float.tflite"
    if not float_path.exists():
        float_path.write_bytes(bench.baselines(model, "input_1", data["calib"][0],
                                               work / "convert")["float"])
    reference = bench.top1(float_path.read_bytes(), data["eval"][0])
    out = work / f"{args.tag}.tflite"
    started = time.monotonic()
    record = quantize_file(QuantizeRequest(
        str(model), str(work / "calib_unlabelled.npz"), str(out), eval=str(work / "eval.npz"),
        qat=settings.get("qat", True), qat_epochs=settings.get("epochs", 10)))
    picks = bench.top1(out.read_bytes(), data["eval"][0])
    qat = record.get("qat") or {}
    line = {"tag": args.tag, "settings": settings,
            "agreement_percent": round(float((picks == reference).mean() * 100), 2),
            "flips": int((picks != reference).sum()),
            "seconds": round(time.monotonic() - started, 1), "qat_seconds": qat.get("seconds"),
            "epochs_run": qat.get("epochs_run"), "best_epoch": qat.get("best_epoch"),
            "logits_grid": logits_grid(out.read_bytes()),
            "held_back": [(h.get("epoch"), h.get("val_loss"), h.get("agreement"))
                          for h in qat.get("history", [])],
            "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
            "utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "load_average": os.getloadavg()}
    print(json.dumps(line))
    with open(work / "settings.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
