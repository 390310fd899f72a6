"""edgeopt's runner for Linux boards with Python (Raspberry Pi, Coral Dev Board): it takes
TFLite benchmark_model's flags and prints its output format, so one parser reads both.

    python3 remote_bench.py --graph=model.tflite --num_runs=50 --num_threads=4

`edgeopt bench --runner python` pushes this one file to the device; it needs numpy and one
of ai_edge_litert, tflite_runtime or tensorflow there, and imports nothing from edgeopt.
Besides benchmark_model's figures its stat line carries p90= and p99=.
Flags: --graph --num_runs --warmup_runs --min_secs --warmup_min_secs --max_secs
--num_threads --use_xnnpack --external_delegate_path --external_delegate_options
--input_layer --input_layer_shape --input_layer_value_files --output_filepath.
"""

from __future__ import annotations

import importlib
import sys
import time


def parse_flags(argv: list[str]) -> dict[str, str]:
    """benchmark_model-style `--key=value` arguments as a dict."""
    flags = {}
    for arg in argv:
        key, _, value = arg.lstrip("-").partition("=")
        flags[key] = value
    return flags


def _runtime():
    """(Interpreter, load_delegate, OpResolverType or None) from the first runtime found."""
    for name in ("ai_edge_litert.interpreter", "tflite_runtime.interpreter"):
        try:
            module = importlib.import_module(name)
            return module.Interpreter, module.load_delegate, getattr(module, "OpResolverType",
                                                                      None)
        except ImportError:
            continue
    import tensorflow as tf

    return (tf.lite.Interpreter, tf.lite.experimental.load_delegate,
            getattr(tf.lite.experimental, "OpResolverType", None))


def _rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def _interpreter(flags: dict[str, str]):
    interpreter_cls, load_delegate, resolvers = _runtime()
    kwargs = {"model_path": flags["graph"]}
    threads = int(flags.get("num_threads", "-1"))
    if threads > 0:
        kwargs["num_threads"] = threads
    if flags.get("external_delegate_path"):
        options = dict(item.split(":", 1) for item in
                       flags.get("external_delegate_options", "").split(";") if ":" in item)
        kwargs["experimental_delegates"] = [load_delegate(flags["external_delegate_path"],
                                                          options)]
    if flags.get("use_xnnpack") == "false" and resolvers is not None:
        kwargs["experimental_op_resolver_type"] = resolvers.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    interpreter = interpreter_cls(**kwargs)
    interpreter.allocate_tensors()
    return interpreter


def _set_inputs(interpreter, flags: dict[str, str]) -> None:
    import numpy as np

    files = [item.split(":", 1)[1] for item in
             flags.get("input_layer_value_files", "").split(",") if ":" in item]
    rng = np.random.default_rng()
    for i, detail in enumerate(interpreter.get_input_details()):
        dtype, shape = np.dtype(detail["dtype"]), detail["shape"]
        if i < len(files):
            value = np.fromfile(files[i], dtype).reshape(shape)
        elif dtype.kind == "f":
            value = rng.uniform(-0.5, 0.5, shape).astype(dtype)
        else:
            value = rng.integers(0, 100, shape).astype(dtype)
        interpreter.set_tensor(detail["index"], value)


def _runs(interpreter, count: int, min_secs: float, max_secs: float) -> list[float]:
    times, start = [], time.perf_counter()
    while (len(times) < count or time.perf_counter() - start < min_secs) \
            and time.perf_counter() - start < max_secs:
        begin = time.perf_counter()
        interpreter.invoke()
        times.append((time.perf_counter() - begin) * 1e6)
    return times


def _stat(times: list[float]) -> str:
    import numpy as np

    t = np.asarray(times)
    p5, p50, p90, p95, p99 = np.percentile(t, [5, 50, 90, 95, 99])
    return (f"count={len(t)} first={t[0]:.0f} curr={t[-1]:.0f} min={t.min():.0f} "
            f"max={t.max():.0f} avg={t.mean():g} std={t.std():.0f} p5={p5:.0f} "
            f"median={p50:.0f} p90={p90:.0f} p95={p95:.0f} p99={p99:.0f}")


def _header(count: int, min_secs: float, max_secs: float) -> str:
    return (f"Running benchmark for at least {count} iterations and at least {min_secs:g} "
            f"seconds but terminate if exceeding {max_secs:g} seconds.")


def _save_outputs(interpreter, path: str) -> None:
    with open(path, "wb") as f:
        for detail in interpreter.get_output_details():
            f.write(interpreter.get_tensor(detail["index"]).tobytes())


def main(argv: list[str]) -> int:
    flags = parse_flags(argv)
    print(f"STARTING!\nGraph: [{flags.get('graph', '')}]", flush=True)
    rss0, start = _rss_mb(), time.perf_counter()
    try:
        interpreter = _interpreter(flags)
        _set_inputs(interpreter, flags)
    except ImportError as exc:
        print(f"ERROR: remote_bench.py needs numpy and one of ai_edge_litert, tflite_runtime "
              f"or tensorflow on the device ({exc})\nBenchmarking failed.", flush=True)
        return 1
    except (ValueError, RuntimeError, OSError, KeyError) as exc:
        print(f"ERROR: {exc}\nBenchmarking failed.", flush=True)
        return 1
    init_us, rss_init = (time.perf_counter() - start) * 1e6, _rss_mb()
    print(f"Loaded model {flags['graph']}\nInitialized session in {init_us / 1000:.3f}ms.")
    max_secs = float(flags.get("max_secs", "150"))
    warm_n, warm_s = int(flags.get("warmup_runs", "1")), float(flags.get("warmup_min_secs", "0.5"))
    print(_header(warm_n, warm_s, max_secs), flush=True)
    warm = _runs(interpreter, max(warm_n, 1), warm_s, max_secs)
    print(f"count={len(warm)} curr={warm[-1]:.0f}\n", flush=True)
    runs_n, runs_s = int(flags.get("num_runs", "50")), float(flags.get("min_secs", "1"))
    print(_header(runs_n, runs_s, max_secs), flush=True)
    steady = _runs(interpreter, max(runs_n, 1), runs_s, max_secs)
    print(_stat(steady) + "\n", flush=True)
    if flags.get("output_filepath"):
        _save_outputs(interpreter, flags["output_filepath"])
    print(f"Inference timings in us: Init: {init_us:.0f}, First inference: {warm[0]:.0f}, "
          f"Warmup (avg): {sum(warm) / len(warm):g}, Inference (avg): "
          f"{sum(steady) / len(steady):g}")
    print(f"Memory footprint delta from the start of the tool (MB): init={rss_init - rss0:g} "
          f"overall={_rss_mb() - rss0:g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
