"""ONNX artifacts of the zoo on onnxruntime's mobile execution providers (issue 15, item 5).

    python benchmarks/real_models.py --workdir /work/zoo/h5 --steps onnx --only NAME ...
    python benchmarks/onnx_placement.py --workdir /work/zoo/h5

For every .onnx artifact `edgeopt build --format onnx` wrote under WORKDIR/real/*/onnx/:
its placement (edgeopt.delegates.onnx_placement) and estimate on host-cpu (XNNPACK EP),
pixel-npu (NNAPI EP, quantized nodes only on the Tensor TPU) and snapdragon-npu (QNN EP),
as built, and with its dynamic input dimensions fixed to 1 the way onnxruntime's
`make_dynamic_shape_fixed` tool does (the usability checker's second pass). Also whether
onnxruntime's own usability checker counts the same NNAPI partitions and supported nodes
as edgeopt on the model it analyses (`check_nnapi_partitions` on the basic-optimized model:
op types and fixed shapes only; edgeopt adds dtype, rank and QDQ checks). Prints tables and
writes benchmarks/results/onnx_placement.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402

from edgeopt.delegates.onnx_placement import place_onnx, place_onnx_for_device  # noqa: E402
from edgeopt.devices.estimator import estimate  # noqa: E402
from edgeopt.devices.profile import load_profile  # noqa: E402
from edgeopt.onnx_reader import read_onnx  # noqa: E402

DEVICES = ("host-cpu", "pixel-npu", "snapdragon-npu")


def fixed_shapes(path: Path) -> bytes:
    """The model with every dynamic input dimension set to 1 (onnxruntime's tool)."""
    import onnx
    from onnxruntime.tools.onnx_model_utils import fix_output_shapes, make_dim_param_fixed

    model = onnx.load(str(path))
    for value in model.graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param"):
                make_dim_param_fixed(model.graph, dim.dim_param, 1)
            elif not dim.HasField("dim_value") or dim.dim_value < 1:
                dim.dim_value = 1
    del model.graph.value_info[:]
    fix_output_shapes(model)
    return model.SerializeToString()


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


def one(content: bytes, device: str) -> dict:
    graph = read_onnx(content)
    placement = place_onnx_for_device(graph, device)
    est = estimate(graph, load_profile(device), placement)
    return {"execution_provider": placement.execution_provider, "nodes": len(placement.ops),
            "delegated": placement.delegated_ops, "partitions": len(placement.partitions),
            "top_fallback": (placement.top_reasons(1) or [("", 0)])[0][0],
            "latency_ms": round(est.latency_ms, 4), "precision": est.precision,
            "basis": est.basis}


def model_rows(path: Path) -> dict:
    content, fixed = path.read_bytes(), fixed_shapes(path)
    record = {"model": path.parent.parent.name, "artifact": str(path),
              "as_built": {d: one(content, d) for d in DEVICES},
              "fixed_shapes": {d: one(fixed, d) for d in DEVICES}}
    try:
        record["checker_nnapi"] = checker_vs_edgeopt(content)
    except Exception as exc:  # the checker's own limits (e.g. no shape info) are reported
        record["checker_nnapi"] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    return record


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
    records = [model_rows(p) for p in sorted(args.workdir.glob("real/*/onnx/*.onnx"))]
    print(table(records))
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
