"""Benchmark `edgeopt build` on MobileNetV2 (224x224x3, 3.5M parameters): time, memory, latency.

Steps:

1. In a child process (so that this process never holds TensorFlow, which would
   inflate the memory figures of the processes it starts), create
   `keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3))` with a fixed
   seed, save it as model.keras, and write calib.npz (100 images) and eval.npz (20
   images, unlabelled: with random weights there are no true labels, so edgeopt scores
   int8-vs-float top-1 agreement). Images are 224x224 crops of scikit-image's bundled
   photographs when scikit-image is installed, else seeded uniform noise; scaled to
   [-1, 1] as MobileNetV2 expects. The JSON says which.
   Untrained MobileNetV2 (BatchNorm with unit statistics) loses its activations block by
   block: the plain model outputs a constant 1/1000 for every class, so edgeopt's
   validation figures say nothing about it. `--bn-stats` re-estimates the BatchNorm
   statistics on the calibration images first (weights otherwise unchanged), which gives
   live activations and meaningful int8-vs-float figures.
2. Run `edgeopt build model.keras --device pixel-npu --calib calib.npz --eval eval.npz
   -o out --json` as a subprocess; measure its wall time and its peak RSS by polling
   the process tree with psutil (sum of RSS over the process and its children) every
   50 ms, and report `getrusage(RUSAGE_CHILDREN).ru_maxrss` before and after, plus the
   build process's own ru_maxrss from wait4. Targets: <= 60 s wall, <= 3 GiB peak RSS.
3. Convert the same model to a float .tflite with `edgeopt convert`, and time the float
   .tflite and the bundle's int8 .tflite on this host with ai_edge_litert's
   Interpreter(num_threads=2): 10 warm-up invokes each, then 50 timed invokes each,
   taken in interleaved blocks of 10 (float, int8, float, ...) so that load from other
   processes falls on both alike; median.
   Target: int8 median <= 0.6x float median. The int8 model takes int8 input (pixel-npu);
   it gets random int8, the float model random floats in [-1, 1].

    python benchmarks/build_mobilenetv2.py
    python benchmarks/build_mobilenetv2.py --bn-stats --name build_mobilenetv2_bnstats
    python benchmarks/build_mobilenetv2.py --images noise --keep /tmp/mnv2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"  # before anything can import TensorFlow

import numpy as np
import psutil
from _common import (
    RESULTS_DIR,
    ForeignLoad,
    edgeopt_command,
    load_average,
    print_table,
    subprocess_env,
    verdict,
    write_results,
)

NAME = "build_mobilenetv2"
INPUT_SHAPE = (224, 224, 3)
MAX_WALL_S = 60.0
MAX_RSS_BYTES = 3 * 1024 ** 3
MAX_LATENCY_RATIO = 0.6
GIB = 1024 ** 3
BN_STATS_IMAGES = 32  # one training-mode pass over 100 images at 224x224 peaks near 9 GiB
# Photographs that scikit-image ships inside its wheel (no download).
SKIMAGE_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry",
                  "hubble_deep_field", "retina", "camera", "coins", "moon", "brick", "grass",
                  "gravel")


# --- step 1: model and data (runs in a child process) ----------------------------------

def skimage_photos() -> list[np.ndarray]:
    """RGB uint8 photographs from skimage.data; [] when scikit-image is missing."""
    try:
        import skimage.data
    except ImportError:
        return []
    photos = []
    for name in SKIMAGE_PHOTOS:
        try:
            image = getattr(skimage.data, name)()
        except Exception:  # a photo that would need a download, or a missing name
            continue
        if image.ndim == 2:
            image = np.stack([image] * 3, axis=-1)
        if image.shape[0] >= INPUT_SHAPE[0] and image.shape[1] >= INPUT_SHAPE[1]:
            photos.append(np.ascontiguousarray(image[..., :3]).astype(np.uint8))
    return photos


def random_crops(photos: list[np.ndarray], count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` random 224x224 crops (randomly mirrored) cycling through `photos`, uint8."""
    h, w, _ = INPUT_SHAPE
    crops = np.empty((count, *INPUT_SHAPE), np.uint8)
    for i in range(count):
        photo = photos[i % len(photos)]
        y = rng.integers(0, photo.shape[0] - h + 1)
        x = rng.integers(0, photo.shape[1] - w + 1)
        crop = photo[y:y + h, x:x + w]
        crops[i] = crop[:, ::-1] if rng.random() < 0.5 else crop
    return crops


def make_images(kind: str, count: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """Float32 images in [-1, 1] and a description of where they came from."""
    photos = skimage_photos() if kind in ("auto", "skimage") else []
    if kind == "skimage" and not photos:
        raise SystemExit("--images skimage: scikit-image is not installed")
    if photos:
        pixels = random_crops(photos, count, rng).astype(np.float32)
        source = f"skimage.data photographs ({len(photos)}), random 224x224 crops"
    else:
        pixels = rng.uniform(0, 255, (count, *INPUT_SHAPE)).astype(np.float32)
        source = "seeded uniform noise"
    return pixels / 127.5 - 1.0, source


def reestimate_batchnorm(model, images: np.ndarray) -> None:
    """Set every BatchNormalization's moving mean/variance to its batch statistics on
    `images` (one training-mode pass with momentum 0); no other weight changes."""
    import keras

    layers = [layer for layer in model.layers
              if isinstance(layer, keras.layers.BatchNormalization)]
    for layer in layers:
        layer.momentum = 0.0
    model(images, training=True)
    for layer in layers:
        layer.momentum = 0.999


def prepare(workdir: Path, seed: int, calib_count: int, eval_count: int, images: str,
            bn_stats: bool) -> None:
    """Write model.keras, calib.npz, eval.npz and prepare.json into `workdir`."""
    import keras

    keras.utils.set_random_seed(seed)
    start = time.perf_counter()
    model = keras.applications.MobileNetV2(weights=None, input_shape=INPUT_SHAPE)
    rng = np.random.default_rng(seed)
    data, source = make_images(images, calib_count + eval_count, rng)
    if bn_stats:
        reestimate_batchnorm(model, data[:min(calib_count, BN_STATS_IMAGES)])
    model.save(workdir / "model.keras")
    input_name = model.inputs[0].name
    np.savez(workdir / "calib.npz", **{input_name: data[:calib_count]})
    np.savez(workdir / "eval.npz", **{input_name: data[calib_count:]})
    info = {"images": source, "seed": seed, "bn_stats_reestimated": bn_stats,
            "calibration_samples": calib_count,
            "evaluation_samples": eval_count, "input_name": input_name,
            "parameters": int(model.count_params()),
            "model_bytes": (workdir / "model.keras").stat().st_size,
            "seconds": time.perf_counter() - start}
    (workdir / "prepare.json").write_text(json.dumps(info, indent=2))


def run_prepare(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--prepare-into", str(workdir), "--seed",
               str(args.seed), "--calib-samples", str(args.calib_samples), "--eval-samples",
               str(args.eval_samples), "--images", args.images,
               *(["--bn-stats"] if args.bn_stats else [])]
    proc = subprocess.run(command, capture_output=True, text=True, env=subprocess_env())
    if proc.returncode != 0:
        raise RuntimeError(f"preparing the model failed: {proc.stderr[-2000:]}")
    return json.loads((workdir / "prepare.json").read_text())


# --- step 2: the build, with wall time and peak RSS ------------------------------------

@dataclass
class ProcessStats:
    exit_code: int
    wall_seconds: float
    cpu_seconds: float           # user + system CPU time of the build (from wait4)
    peak_rss_bytes: int          # max over polls of sum(RSS of the process tree)
    peak_processes: int          # most processes seen in the tree at one poll
    polls: int
    wait4_maxrss_bytes: int      # the build process's own ru_maxrss (incl. waited children)
    children_maxrss_before_bytes: int
    children_maxrss_after_bytes: int  # getrusage(RUSAGE_CHILDREN).ru_maxrss after the build


def tree_rss(root: psutil.Process) -> tuple[int, int]:
    """(sum of RSS, process count) over `root` and its descendants; vanished ones skipped."""
    total, count = 0, 0
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
            count += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total, count


def children_maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux


def run_measured(command: list[str], cwd: Path, stdout_path: Path, stderr_path: Path,
                 poll_seconds: float) -> ProcessStats:
    """Run `command`, polling its process tree's RSS until it exits (reaped with wait4)."""
    before = children_maxrss()
    peak, peak_procs, polls = 0, 0, 0
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=err, env=subprocess_env())
        root = psutil.Process(proc.pid)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            rss, count = tree_rss(root)
            peak, peak_procs, polls = max(peak, rss), max(peak_procs, count), polls + 1
            time.sleep(poll_seconds)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4, not by Popen
    return ProcessStats(proc.returncode, wall, usage.ru_utime + usage.ru_stime, peak,
                        peak_procs, polls,
                        usage.ru_maxrss * 1024, before, children_maxrss())


def build_command() -> list[str]:
    return [*edgeopt_command(), "build", "model.keras", "--device", "pixel-npu",
            "--calib", "calib.npz", "--eval", "eval.npz", "-o", "out", "--json"]


def run_build(workdir: Path, poll_seconds: float) -> tuple[ProcessStats, dict[str, Any]]:
    stats = run_measured(build_command(), workdir, workdir / "build.stdout.json",
                         workdir / "build.stderr.txt", poll_seconds)
    if stats.exit_code != 0:
        tail = (workdir / "build.stderr.txt").read_text()[-2000:]
        raise RuntimeError(f"edgeopt build exited {stats.exit_code}: {tail}")
    return stats, json.loads((workdir / "build.stdout.json").read_text())


# --- step 3: host latency --------------------------------------------------------------

def convert_float(workdir: Path) -> tuple[Path, float]:
    """`edgeopt convert model.keras -o float.tflite`; (path, wall seconds)."""
    start = time.perf_counter()
    subprocess.run([*edgeopt_command(), "convert", "model.keras", "-o", "float.tflite"],
                   cwd=workdir, check=True, capture_output=True, env=subprocess_env())
    return workdir / "float.tflite", time.perf_counter() - start


def random_input(detail: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
    shape, dtype = tuple(detail["shape"]), np.dtype(detail["dtype"])
    if dtype.kind == "f":
        return rng.uniform(-1, 1, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape, dtype=dtype)


def load_interpreter(model_path: Path, threads: int, seed: int):
    """A LiteRT Interpreter with tensors allocated and a random input set."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(model_path), num_threads=threads)
    interpreter.allocate_tensors()
    detail = interpreter.get_input_details()[0]
    interpreter.set_tensor(detail["index"], random_input(detail, np.random.default_rng(seed)))
    return interpreter


def timed_invokes(interpreter, count: int) -> list[float]:
    """Milliseconds of `count` back-to-back invokes."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        interpreter.invoke()
        times.append((time.perf_counter() - start) * 1000)
    return times


def time_models(paths: dict[str, Path], threads: int, warmup: int, runs: int, block: int,
                seed: int) -> dict[str, dict[str, Any]]:
    """Per model: `warmup` untimed invokes, then `runs` timed ones taken in interleaved
    blocks of `block` (float, int8, float, ...), so that load from other processes on a
    shared machine falls on both models alike. Median, min, p90, max in ms."""
    interpreters = {name: load_interpreter(path, threads, seed) for name, path in paths.items()}
    for interpreter in interpreters.values():
        timed_invokes(interpreter, warmup)
    times: dict[str, list[float]] = {name: [] for name in paths}
    while any(len(t) < runs for t in times.values()):
        for name, interpreter in interpreters.items():
            times[name] += timed_invokes(interpreter, min(block, runs - len(times[name])))
    return {name: latency_record(paths[name], interpreters[name], sorted(times[name]),
                                 threads, warmup) for name in paths}


def latency_record(path: Path, interpreter, times: list[float], threads: int,
                   warmup: int) -> dict[str, Any]:
    dtype = np.dtype(interpreter.get_input_details()[0]["dtype"]).name
    return {"model": path.name, "bytes": path.stat().st_size, "input_dtype": dtype,
            "threads": threads, "warmup": warmup, "runs": len(times),
            "median_ms": statistics.median(times), "min_ms": times[0],
            "p90_ms": times[int(0.9 * (len(times) - 1))], "max_ms": times[-1]}


# --- report ----------------------------------------------------------------------------

def targets(stats: ProcessStats, float_ms: float, int8_ms: float) -> dict[str, Any]:
    ratio = int8_ms / float_ms
    return {
        "build_wall": {"target": f"<= {MAX_WALL_S:.0f} s", "measured": stats.wall_seconds,
                       "verdict": verdict(stats.wall_seconds <= MAX_WALL_S)},
        "build_peak_rss": {"target": "<= 3 GiB (psutil tree sum)",
                           "measured": stats.peak_rss_bytes,
                           "verdict": verdict(stats.peak_rss_bytes <= MAX_RSS_BYTES)},
        "latency_ratio": {"target": f"int8 median <= {MAX_LATENCY_RATIO}x float median",
                          "measured": ratio, "verdict": verdict(ratio <= MAX_LATENCY_RATIO)},
    }


def print_report(stats: ProcessStats, latency: dict[str, dict], checks: dict,
                 others: dict[str, dict]) -> None:
    f, q = latency["float"], latency["int8"]
    share = {k: f"{v['other_share_of_all_cores']:.0%} of all cores" for k, v in others.items()}
    rows = [
        ("build wall time", "<= 60 s", f"{stats.wall_seconds:.1f} s",
         checks["build_wall"]["verdict"]),
        ("build CPU time (user+sys)", "—", f"{stats.cpu_seconds:.1f} s", ""),
        ("build peak RSS (psutil tree)", "<= 3.00 GiB",
         f"{stats.peak_rss_bytes / GIB:.2f} GiB ({stats.peak_processes} proc, "
         f"{stats.polls} polls)", checks["build_peak_rss"]["verdict"]),
        ("build ru_maxrss (wait4)", "—", f"{stats.wait4_maxrss_bytes / GIB:.2f} GiB", ""),
        ("RUSAGE_CHILDREN ru_maxrss after", "—",
         f"{stats.children_maxrss_after_bytes / GIB:.2f} GiB (before build "
         f"{stats.children_maxrss_before_bytes / GIB:.2f})", ""),
        ("float .tflite median", "—", f"{f['median_ms']:.2f} ms (p90 {f['p90_ms']:.2f})", ""),
        ("int8 .tflite median", "—", f"{q['median_ms']:.2f} ms (p90 {q['p90_ms']:.2f})", ""),
        ("int8 / float latency", "<= 0.60x", f"{checks['latency_ratio']['measured']:.3f}x",
         checks["latency_ratio"]["verdict"]),
        ("other processes' CPU, build", "—", share["build"], ""),
        ("other processes' CPU, latency", "—", share["latency"], ""),
    ]
    print_table(("measure", "target", "measured", "verdict"), rows)


def print_validation(validation: dict[str, Any], sizes: dict[str, int]) -> None:
    print(f"\nedgeopt validation on {validation['samples']} samples: {validation['metric']} "
          f"{validation['value']} (reference {validation['reference']}), cosine "
          f"{validation['cosine']}, SQNR {validation['sqnr_db']} dB")
    print(f"sizes: source {sizes['source_bytes']:,} B, float .tflite "
          f"{sizes['float_tflite_bytes']:,} B, int8 {sizes['artifact_bytes']:,} B")
    if (validation["cosine"] or 0.0) < 0.9:
        print("warning: int8 outputs barely match the float outputs (cosine < 0.9); "
              "the accuracy figure above is not meaningful")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="model and data seed (default 0)")
    parser.add_argument("--calib-samples", type=int, default=100)
    parser.add_argument("--eval-samples", type=int, default=20)
    parser.add_argument("--images", choices=("auto", "skimage", "noise"), default="auto",
                        help="calibration images: skimage photo crops, noise, or auto "
                             "(skimage when installed; default)")
    parser.add_argument("--bn-stats", action="store_true",
                        help="re-estimate BatchNorm statistics on the calibration images so "
                             "activations do not vanish (off: the plain weights=None model, "
                             "whose output is a constant 1/1000)")
    parser.add_argument("--poll-ms", type=float, default=50.0, help="RSS poll interval")
    parser.add_argument("--threads", type=int, default=2, help="Interpreter num_threads")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--runs", type=int, default=50, help="timed invokes per model")
    parser.add_argument("--block", type=int, default=10,
                        help="timed invokes per model before switching to the other")
    parser.add_argument("--keep", type=Path, default=None,
                        help="work in this (new or empty) folder and keep it")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                        help=f"where {NAME}.json goes (default benchmarks/results)")
    parser.add_argument("--name", default=NAME, help=f"results file stem (default {NAME})")
    parser.add_argument("--prepare-into", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def benchmark(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    load_start = load_average()
    prepared = run_prepare(args, workdir)
    print(f"model and data ready in {prepared['seconds']:.1f} s; images: {prepared['images']}")
    with ForeignLoad() as build_load:
        stats, manifest = run_build(workdir, args.poll_ms / 1000)
    float_path, convert_s = convert_float(workdir)
    int8_path = workdir / "out" / manifest["model"]["file"]
    with ForeignLoad() as latency_load:
        latency = time_models({"float": float_path, "int8": int8_path}, args.threads,
                              args.warmup, args.runs, args.block, args.seed)
    checks = targets(stats, latency["float"]["median_ms"], latency["int8"]["median_ms"])
    others = {"build": build_load.result(), "latency": latency_load.result()}
    print_report(stats, latency, checks, others)
    return {"load_average_at_start": load_start, "other_processes": others,
            "prepare": prepared,
            "command": " ".join(build_command()),
            "build": asdict(stats), "accuracy": manifest["accuracy"],
            "validation": manifest["validation"], "sizes": manifest["sizes"],
            "notes": manifest.get("notes", []),
            "converter": manifest["conversion"].get("converter"),
            "float_convert_seconds": convert_s, "latency": latency, "targets": checks}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.prepare_into is not None:
        prepare(args.prepare_into, args.seed, args.calib_samples, args.eval_samples,
                args.images, args.bn_stats)
        return 0
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="edgeopt-mnv2-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        record = benchmark(args, workdir)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print_validation(record["validation"], record["sizes"])
    for note in record["notes"]:
        print(f"edgeopt note: {note}")
    print(f"wrote {write_results(args.name, record, args.results_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
