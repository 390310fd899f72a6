"""Where fer_emotion's int8 flips come from: the error of the logits, not only the flip count.

A flip happens where the int8 model's error in the float winner's lead (its logit minus
the runner-up's, read at the SOFTMAX input) exceeds the float margin. The flip count is a
lottery over near-ties (1 flip = 0.33 points); the lead error's spread `sigma` is the
steady figure behind it, and with the float margins it gives the expected flips
(sum over samples of Phi(-margin / sigma)).

    python benchmarks/qat_budget.py measure A.tflite [B.tflite ...]   # runtime figures
    python benchmarks/qat_budget.py budget ['{"s_equalize": false}']  # the QAT graph at
                                               # its start, per quantizer (qat_settings' overrides)
    python benchmarks/qat_budget.py floor      # sigma -> expected flips on these faces
    python benchmarks/qat_budget.py equalized-ptq   # PTQ of the model, separable halves
                                                    # equalized first (no training)

`measure` runs each artifact in LiteRT on the 300 held-out faces of `qat_settings.py`
(its workdir: run that first); `budget` builds the QAT training graph as
`edgeopt quantize --qat` does and, before any training, switches its fake quantizers on
one at a time (and all weights, all activations). One JSON line per figure is printed and
appended to `<workdir>/budget.jsonl`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

from edgeopt.runtime import dequantize_array, quantize_array  # noqa: E402

MODEL = Path.home() / ".cache" / "edgeopt-zoo" / "built" / "fer_emotion.keras"


def runtime_logits(path: Path, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pre-softmax logits, outputs) of a .tflite on `images`, dequantized, one at a time."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path), experimental_preserve_all_tensors=True,
                     num_threads=1)
    it.allocate_tensors()
    softmax = next(op for op in it._get_ops_details() if op["op_name"] == "SOFTMAX")
    logits = {d["index"]: d for d in it.get_tensor_details()}[softmax["inputs"][0]]
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    found, outputs = [], []
    for x in images:
        it.set_tensor(inp["index"], _to(inp, x[None]))
        it.invoke()
        found.append(_from(logits, it.get_tensor(logits["index"])).reshape(-1))
        outputs.append(_from(out, it.get_tensor(out["index"])).reshape(-1))
    return np.array(found), np.array(outputs)


def _to(detail: dict, x: np.ndarray) -> np.ndarray:
    if detail["dtype"] != np.int8:
        return x.astype(detail["dtype"])
    return quantize_array(x, np.int8, *detail["quantization"])


def _from(detail: dict, x: np.ndarray) -> np.ndarray:
    if detail["dtype"] != np.int8:
        return x.astype(np.float32)
    return dequantize_array(x, *detail["quantization"])


def lead_error(logits: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per sample: error of the reference winner's lead over the reference runner-up."""
    rows = np.arange(len(reference))
    order = np.argsort(reference, axis=-1)
    top, second = order[:, -1], order[:, -2]
    return ((logits[rows, top] - logits[rows, second])
            - (reference[rows, top] - reference[rows, second]))


def expected_flips(margins: np.ndarray, sigma: float) -> float:
    return float(sum(0.5 * math.erfc(m / (sigma * math.sqrt(2))) for m in margins))


def margins_of(reference: np.ndarray) -> np.ndarray:
    ordered = np.sort(reference, axis=-1)
    return ordered[:, -1] - ordered[:, -2]


def measure(paths: list[Path], work: Path) -> list[dict]:
    images = np.load(work / "eval.npz")["input_1"]
    reference, float_out = runtime_logits(work / "float.tflite", images)
    top, margins = float_out.argmax(-1), margins_of(reference)
    lines = []
    for path in paths:
        logits, out = runtime_logits(path, images)
        error = lead_error(logits, reference)
        flipped = out.argmax(-1) != top
        lines.append({"file": path.name, "flips": int(flipped.sum()),
                      "lead_error_sigma": round(float(error.std()), 4),
                      "lead_error_mean": round(float(error.mean()), 4),
                      "expected_flips": round(expected_flips(margins, float(error.std())), 2),
                      "flipped_margins": sorted(round(float(m), 4) for m in margins[flipped])})
    return lines


def on_grid(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """`values` rounded to the int8 grid of [lo, hi] (widened to hold 0), as LiteRT does."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255
    zero = np.round(-128 - lo / scale)
    return (np.clip(np.round(values / scale) + zero, -128, 127) - zero) * scale


def floor(work: Path) -> list[dict]:
    """sigma -> expected flips; and the flips of the float logits rounded to int8 grids."""
    images = np.load(work / "eval.npz")["input_1"]
    reference = runtime_logits(work / "float.tflite", images)[0]
    calib = np.sort(runtime_logits(work / "float.tflite",
                                   np.load(work / "calib_unlabelled.npz")["input_1"])[0], -1)
    margins = margins_of(reference)
    quantiles = {f"margin_q{q}": round(float(np.quantile(margins, q / 100)), 4)
                 for q in (1, 2, 5, 10)}
    lines = [{"sigma": s, "expected_flips": round(expected_flips(margins, s), 2), **quantiles}
             for s in (0.15, 0.1, 0.05, 0.034, 0.02, 0.014, 0.01, 0.005)]
    grids = {"calibration min/max": (calib.min(), calib.max()),
             "low end: largest logit - ln 256": ((calib[:, -1] - math.log(256)).min(),
                                                 calib.max()),
             "low end: runner-up's least": (calib[:, -2].min(), calib.max()),
             "-6..8": (-6.0, 8.0), "0..8": (0.0, 8.0)}
    for name, (lo, hi) in grids.items():
        rounded = on_grid(reference, float(lo), float(hi))
        lines.append({"float logits on the grid of": name, "range": [round(float(lo), 3),
                      round(float(hi), 3)], "step": round(float(max(hi, 0) - min(lo, 0)) / 255, 4),
                      "flips": int((rounded.argmax(-1) != reference.argmax(-1)).sum())})
    return lines


def budget(work: Path, settings: dict) -> list[dict]:
    """The QAT graph at its start: lead error with fake quantizers switched on selectively."""
    from qat_settings import _override

    import edgeopt.qat_step as step
    from edgeopt.quantize import QuantizeRequest, quantize_file

    _override(settings)

    images = np.load(work / "eval.npz")["input_1"]
    reference = runtime_logits(work / "float.tflite", images)[0]
    lines: list[dict] = []

    class Done(Exception):
        pass

    def train(_job, view, _settings, _progress):
        lines.extend({"settings": settings, **line}
                     for line in _switch_quantizers(view, images, reference))
        raise Done

    step.train = train
    try:
        quantize_file(QuantizeRequest(str(MODEL), str(work / "calib_unlabelled.npz"),
                                      str(work / "budget.tflite"), eval=str(work / "eval.npz"),
                                      qat=True, qat_epochs=1))
    except Done:
        pass
    return lines


def _quantizers(view) -> tuple[list, list]:
    from edgeopt.calibration.fakequant import qat_layers

    layers, acts, weights = qat_layers(), [], []
    for layer in view.layers:
        if isinstance(layer, layers.ActivationQuantizer):
            acts.append(layer)
        for inner in getattr(layer, "layers", []):
            if isinstance(inner, layers.Quantized):
                acts += [inner.output_quantizer] if inner.output_quantizer else []
                weights += [inner] if inner.axes is not None else []
    return acts, weights


def _switch_quantizers(view, images: np.ndarray, reference: np.ndarray) -> list[dict]:
    acts, weights = _quantizers(view)
    calls, axes = {a.name: a.call for a in acts}, {w.name: w.axes for w in weights}
    margins = margins_of(reference)

    def figure(what: str, on_acts: set, on_weights: bool) -> dict:
        for a in acts:
            a.call = calls[a.name] if a.name in on_acts else (lambda x: x)
        for w in weights:
            w.axes = axes[w.name] if on_weights else None
        logits = np.concatenate([np.asarray(view(images[k:k + 100], training=False))
                                 for k in range(0, len(images), 100)])   # log-probs
        sigma = float(lead_error(logits, reference).std())
        return {"quantized": what, "flips": int((logits.argmax(-1) != reference.argmax(-1)).sum()),
                "lead_error_sigma": round(sigma, 4),
                "expected_flips": round(expected_flips(margins, sigma), 2)}

    names = {a.name for a in acts}
    lines = [figure("all", names, True), figure("weights only", set(), True),
             figure("activations only", names, False)]
    for a in acts:
        lo, hi = a.range()
        lines.append(figure(f"{a.name} [{lo:.2f}, {hi:.2f}] alone", {a.name}, False))
    figure("all", names, True)
    return lines


def equalized_ptq(work: Path) -> list[dict]:
    """Plain `edgeopt quantize` (PTQ, no QAT) of fer_emotion with its separable halves
    equalized first, as QAT's graph does: what the calibration core would gain."""
    import keras
    import tensorflow as tf

    from edgeopt.calibration.qat import equalize_separable, merge_separable, split_separable
    from edgeopt.quantize import QuantizeRequest, quantize_file

    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(2)
    model = keras.models.load_model(MODEL, compile=False)
    split = split_separable(model)
    equalize_separable(split, np.load(work / "calib_unlabelled.npz")["input_1"])
    source, out = work / "fer_emotion_equalized.keras", work / "ptq_equalized.tflite"
    merge_separable(model, split).save(source)
    quantize_file(QuantizeRequest(str(source), str(work / "calib_unlabelled.npz"), str(out),
                                  eval=str(work / "eval.npz")))
    return measure([out], work)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("measure", "budget", "floor", "equalized-ptq"))
    parser.add_argument("files", nargs="*", help="measure: .tflite files; budget: the "
                        "settings as JSON (qat_settings.py's s_/d_ overrides)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/edgeopt-qat-settings"))
    args = parser.parse_args(argv)
    if args.what == "measure":
        lines = measure([Path(f) for f in args.files], args.workdir)
    elif args.what == "equalized-ptq":
        lines = equalized_ptq(args.workdir)
    elif args.what == "budget":
        lines = budget(args.workdir, json.loads(args.files[0]) if args.files else {})
    else:
        lines = floor(args.workdir)
    with open(args.workdir / "budget.jsonl", "a") as f:
        for line in lines:
            print(json.dumps(line))
            f.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
