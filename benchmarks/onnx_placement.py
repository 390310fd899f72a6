"""ONNX artifacts of the zoo on onnxruntime's mobile execution providers (issue 15, item 5).

    python benchmarks/real_models.py --workdir /work/zoo/h5 --steps onnx --only NAME ...
    python benchmarks/onnx_placement.py --workdir /work/zoo/h5

For every .onnx artifact `edgeopt build --format onnx` wrote under WORKDIR/real/*/onnx/:
its placement (edgeopt.delegates.onnx_placement) and estimate on host-cpu (XNNPACK EP),
pixel-npu (NNAPI EP, quantized nodes only on the Tensor TPU) and snapdragon-npu (QNN EP),
as built (dynamic inputs costed at the zoo's calibration shapes, as `edgeopt build` costs
them), and with those shapes fixed in the model the way onnxruntime's
`make_dynamic_shape_fixed` tool fixes them (the usability checker's second pass); and the
host-cpu estimate against onnxruntime's CPU EP measured on this host (one thread). Also whether
onnxruntime's own usability checker counts the same NNAPI partitions and supported nodes
as edgeopt on the model it analyses (`check_nnapi_partitions` on the basic-optimized model:
op types and fixed shapes only; edgeopt adds dtype, rank and QDQ checks). Prints tables and
writes benchmarks/results/onnx_placement.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402
from real_models import _as_declared, _first_sample  # noqa: E402

from edgeopt.delegates.onnx_placement import place_onnx, place_onnx_for_device  # noqa: E402
from edgeopt.delegates.onnx_shapes import with_fixed_inputs  # noqa: E402
from edgeopt.devices.estimator import estimate_onnx_model  # noqa: E402
from edgeopt.devices.profile import load_profile  # noqa: E402

DEVICES = ("host-cpu", "pixel-npu", "snapdragon-npu")


def first_sample(name: str, content: bytes, calib_dir: Path) -> dict[str, np.ndarray]:
    """The zoo's first calibration sample per input, in the layout the model declares."""
    import onnxruntime as ort

    with np.load(calib_dir / f"{name}.npz") as data:
        sample = _first_sample({k: data[k] for k in data.files})
    session = ort.InferenceSession(content, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in session.get_inputs():
        x = _as_declared(sample[i.name], i.shape)
        feeds[i.name] = x.astype(np.float32) if "float" in i.type else x
    return feeds


def measured_ms(content: bytes, feeds: dict[str, np.ndarray], runs: int = 30) -> float:
    """Median latency of onnxruntime's CPU EP on this host, one thread (host-cpu's)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(content, options, providers=["CPUExecutionProvider"])
    for _ in range(3):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def checker_vs_edgeopt(content: bytes) -> dict:
    """NNAPI on the model as onnxruntime's usability checker sees it (optimized at the basic
    level first, as its analyze_model does): its partitions and supported nodes, and
    edgeopt's on the same optimized model."""
    import tempfile

    import onnx
    from onnxruntime.tools.mobile_helpers.usability_checker import check_nnapi_partitions
    from onnxruntime.tools.onnx_model_utils import optimize_model

    with tempfile.TemporaryDirectory() as tmp:
        source, optimized = Path(tmp) / "in.onnx", Path(tmp) / "opt.onnx"
        source.write_bytes(content)
        optimize_model(source, optimized)
        model = onnx.shape_inference.infer_shapes(onnx.load(str(optimized)))
    info = check_nnapi_partitions(model, require_fixed_input_sizes=True)
    ours = place_onnx(model.SerializeToString(), "nnapi")
    return {"nodes": len(model.graph.node),
            "checker": {"partitions": info.num_partitions,
                        "supported": info.num_supported_nodes},
            "edgeopt": {"partitions": len(ours.partitions),
                        "supported": ours.delegated_ops}}


def one(content: bytes, device: str, shapes: dict) -> dict:
    placement = place_onnx_for_device(content, device)
    est = estimate_onnx_model(content, load_profile(device), placement, shapes)
    return {"execution_provider": placement.execution_provider, "nodes": len(placement.ops),
            "delegated": placement.delegated_ops, "partitions": len(placement.partitions),
            "top_fallback": (placement.top_reasons(1) or [("", 0)])[0][0],
            "latency_ms": round(est.latency_ms, 4), "precision": est.precision,
            "basis": est.basis}


def model_rows(path: Path, calib_dir: Path) -> dict:
    name, content = path.parent.parent.name, path.read_bytes()
    feeds = first_sample(name, content, calib_dir)
    shapes = {k: v.shape for k, v in feeds.items()}
    fixed = with_fixed_inputs(content, shapes)
    record = {"model": name, "artifact": str(path), "shapes": {k: list(v) for k, v in
                                                               shapes.items()},
              "as_built": {d: one(content, d, shapes) for d in DEVICES},
              "fixed_shapes": {d: one(fixed, d, shapes) for d in DEVICES},
              "host_measured_ms": round(measured_ms(content, feeds), 4),
              "build_manifest": _built(path.parent / "manifest.json")}
    try:
        record["checker_nnapi"] = checker_vs_edgeopt(content)
    except Exception as exc:  # the checker's own limits (e.g. no shape info) are reported
        record["checker_nnapi"] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    return record


def _built(manifest: Path) -> dict:
    """What `edgeopt build --format onnx` itself recorded: placement and estimate."""
    m = json.loads(manifest.read_text())
    placement = m.get("placement") or {}
    return {"device": m.get("device", {}).get("name") if isinstance(m.get("device"), dict)
            else m.get("device"),
            "execution_provider": placement.get("execution_provider"),
            "delegated_ops": placement.get("delegated_ops"), "cpu_ops": placement.get("cpu_ops"),
            "partitions": len(placement.get("partitions", [])), "estimate": m.get("estimate")}


def table(records: list[dict]) -> str:
    lines = ["| model | device | EP | as built: on EP | partitions | est. ms | fixed shapes: "
             "on EP | partitions | est. ms | precision | basis |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        for d in DEVICES:
            a, f = r["as_built"][d], r["fixed_shapes"][d]
            lines.append(f"| {r['model']} | {d} | {a['execution_provider']} | "
                         f"{a['delegated']}/{a['nodes']} | {a['partitions']} | "
                         f"{a['latency_ms']:.3g} | {f['delegated']}/{f['nodes']} | "
                         f"{f['partitions']} | {f['latency_ms']:.3g} | {f['precision']} | "
                         f"{f['basis']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/zoo"))
    args = parser.parse_args()
    records = [model_rows(p, args.workdir / "calib")
               for p in sorted(args.workdir.glob("real/*/onnx/*.onnx"))]
    print(table(records))
    print("\n| model | input shapes | host-cpu estimate ms | measured ms (onnxruntime CPU EP, "
          "1 thread) | estimate / measured |\n|---|---|---|---|---|")
    for r in records:
        est = r["as_built"]["host-cpu"]["latency_ms"]
        print(f"| {r['model']} | {r['shapes']} | {est:.3g} | {r['host_measured_ms']:.3g} | "
              f"{est / r['host_measured_ms']:.2f} |")
    print("\n| model | optimized nodes | checker NNAPI partitions / supported | edgeopt NNAPI "
          "partitions / supported |\n|---|---|---|---|")
    for r in records:
        c = r["checker_nnapi"]
        if "error" in c:
            print(f"| {r['model']} | - | {c['error']} | - |")
            continue
        print(f"| {r['model']} | {c['nodes']} | {c['checker']['partitions']} / "
              f"{c['checker']['supported']} | {c['edgeopt']['partitions']} / "
              f"{c['edgeopt']['supported']} |")
    path = write_results("onnx_placement", {
        "commands": [f"python benchmarks/onnx_placement.py --workdir {args.workdir}"],
        "models": records})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
