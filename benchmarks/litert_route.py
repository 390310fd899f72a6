"""litert-torch's direct route, .pt2 -> .tflite, run in its own venv (issue 17, acceptance 2).

litert-torch does not install beside constraints.txt (BENCHMARKS.md, issue 17), so
benchmarks/torch_models.py runs this script with `--litert-python VENV/bin/python`, a venv
holding litert-torch and its pins. It loads the benchmark's own .pt2 (written by
torch_models.py, so torch.export.load is safe here), converts it with litert_torch.convert,
and checks the .tflite against the PyTorch program per output on the program's sample
and three seeded normal inputs, as edgeopt checks its ONNX export. Prints one JSON line.

    VENV/bin/python benchmarks/litert_route.py model.pt2 out.tflite
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

SAMPLES = 4


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denom) if denom else float(np.array_equal(a, b))


def _ops(tflite: bytes) -> dict[str, int]:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(model_content=tflite, experimental_op_resolver_type=(
        OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    counts: dict[str, int] = {}
    for op in interpreter._get_ops_details():
        counts[op["op_name"]] = counts.get(op["op_name"], 0) + 1
    return counts


def _parity(module, example, tflite: bytes) -> list[dict]:
    import torch
    from ai_edge_litert.interpreter import Interpreter

    rng = np.random.default_rng(0)
    inputs = [example] + [torch.from_numpy(rng.standard_normal(example.shape).astype(
        np.float32)) for _ in range(SAMPLES - 1)]
    interpreter = Interpreter(model_content=tflite)
    runner = interpreter.get_signature_runner()
    name = next(iter(runner.get_input_details()))
    rows: dict[int, list] = {}
    for x in inputs:
        with torch.no_grad():
            ref = module(x)
        ref = ref if isinstance(ref, (tuple, list)) else (ref,)
        got = list(runner(**{name: x.numpy()}).values())
        for i, r in enumerate(ref):
            r = r.numpy()
            match = next(g for g in got if g.shape == r.shape)  # our outputs' shapes differ
            got.remove(match)
            rows.setdefault(i, []).append((r, match))
    out = []
    for i, pairs in rows.items():
        r = np.concatenate([p[0].ravel() for p in pairs])
        g = np.concatenate([p[1].ravel() for p in pairs])
        out.append({"output": i, "samples": len(pairs), "cosine": _cosine(r, g),
                    "max_abs": float(np.max(np.abs(r - g)))})
    return out


def main() -> None:
    import litert_torch
    import torch

    pt2, out = Path(sys.argv[1]), Path(sys.argv[2])
    program = torch.export.load(pt2)  # the benchmark's own file, written by torch_models.py
    module = program.module()
    example = program.example_inputs[0][0]
    start = time.monotonic()
    edge = litert_torch.convert(module, (example,))
    edge.export(str(out))
    seconds = round(time.monotonic() - start, 1)
    tflite = out.read_bytes()
    print(json.dumps({"litert_torch": version("litert-torch"), "torch": torch.__version__,
                      "convert_s": seconds, "bytes": len(tflite), "ops": _ops(tflite),
                      "parity": _parity(module, example, tflite)}))


if __name__ == "__main__":
    main()
