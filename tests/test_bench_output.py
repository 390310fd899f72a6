"""The benchmark_model parser on real output texts quoted from documentation.

Sources (quoted verbatim, trimmed to the lines around the figures):
- TensorFlow `tensorflow/lite/tools/benchmark/README.md`, "Profiling model operators";
- TensorFlow `tensorflow/lite/tools/benchmark/android/README.md` (logcat line);
- TensorFlow `tensorflow/lite/g3doc/performance/measurement.md` (logcat line);
- NobuoTsukamoto/meta-tensorflow-lite README: benchmark_model on qemuriscv64;
- lp6m/yolov5s_android `benchmark/benchmark.md`: benchmark_model on a Xiaomi Mi11 over
  adb, with NNAPI, and a run where the NNAPI delegate failed.
"""

from __future__ import annotations

import pytest

from edgeopt.devices.runners.benchmark_output import (
    BenchmarkOutputError,
    parse_benchmark_output,
)

README_PROFILING_TAIL = """\
Timings (microseconds): count=50 first=79449 curr=81350 min=77385 max=88213 avg=79732 std=1929
Memory (bytes): count=0
31 nodes observed


Average inference timings in us: Warmup: 83235, Init: 38467, Inference: 79760.9
"""

ANDROID_LOGCAT = ("... tflite  : Inference timings in us: Init: 1007529, First inference: 4098, "
                  "Warmup (avg): 1686.59, Inference (avg): 1687.92\n")

MEASUREMENT_LOGCAT = ("... tflite  : Average inference timings in us: Warmup: 91471, Init: 4108, "
                      "Inference: 80660.1\n")

RISCV_FULL = """\
Loaded model ./mobilenet_v1_1.0_224.tflite
The input model file size (MB): 16.9008
Initialized session in 17.187ms.
Running benchmark for at least 1 iterations and at least 0.5 seconds but terminate if exceeding 150 seconds.
count=1 curr=3512391

Running benchmark for at least 50 iterations and at least 1 seconds but terminate if exceeding 150 seconds.
count=50 first=2990275 curr=2913402 min=2727568 max=3189954 avg=2.95034e+06 std=109798

Inference timings in us: Init: 17187, First inference: 3512391, Warmup (avg): 3.51239e+06, Inference (avg): 2.95034e+06
Note: as the benchmark tool itself affects memory footprint, the following is only APPROXIMATE to the actual memory footprint of the model at runtime. Take the information at your discretion.
Memory footprint delta from the start of the tool (MB): init=4.21094 overall=46.0859
Profiling Info for Benchmark Initialization:
Timings (microseconds): count=1 curr=1356
Memory (bytes): count=0
1 nodes observed
Operator-wise Profiling Info for Regular Benchmark Runs:
Timings (microseconds): count=50 first=2989660 curr=2912978 min=2727203 max=3189476 avg=2.9499e+06 std=109770
Memory (bytes): count=0
31 nodes observed
"""  # noqa: E501

MI11_NNAPI_GPU = """\
count=50 first=157195 curr=159511 min=149738 max=161935 avg=156669 std=2352
Inference timings in us: Init: 404292, First inference: 188086, Warmup (avg): 175313, Inference (avg): 156669
Note: as the benchmark tool itself affects memory footprint, the following is only APPROXIMATE to the actual memory footprint of the model at runtime. Take the information at your discretion.
Peak memory footprint (MB): init=6.80469 overall=61.0078
"""  # noqa: E501

MI11_NNAPI_FAILED = """\
STARTING!
Log parameter values verbosely: [0]
Num threads: [4]
Graph: [/data/local/tmp/yolov5s_int8_640.tflite]
#threads used for CPU inference: [4]
Use NNAPI: [1]
NNAPI execution preference: [sustained_speed]
NNAPI accelerator name: [qti-default]
NNAPI accelerators available: [qti-default,qti-dsp,qti-gpu,nnapi-reference]
Loaded model /data/local/tmp/yolov5s_int8_640.tflite
INFO: Initialized TensorFlow Lite runtime.
INFO: Created TensorFlow Lite delegate for NNAPI.
ERROR: NN API returned error ANEURALNETWORKS_OP_FAILED at line 3779 while completing NNAPI compilation.

ERROR: Node number 248 (TfLiteNnapiDelegate) failed to prepare.

ERROR: Restored original execution plan after delegate application failure.
Failed to apply NNAPI delegate.
Benchmarking failed.
"""  # noqa: E501


def test_full_run_gives_steady_warmup_init_and_memory():
    result = parse_benchmark_output(RISCV_FULL)
    assert result.runs == 50
    assert result.warmup_us == {"count": 1.0, "curr": 3512391.0}
    assert result.init_ms == pytest.approx(17.187)
    assert result.first_ms == pytest.approx(3512.391)
    assert result.inference_avg_ms == pytest.approx(2950.34)
    assert result.memory_mb == {"init": 4.21094, "overall": 46.0859}
    latency = result.latency()
    assert latency.mean == pytest.approx(2950.34)        # avg=2.95034e+06 us
    assert (latency.min, latency.max, latency.std) == pytest.approx((2727.568, 3189.954,
                                                                     109.798))
    assert latency.p90 is None and latency.p99 is None   # the tool does not print them
    # the op profiler's `Timings (microseconds): count=50 ... avg=2.9499e+06` is not it
    assert result.steady_us["avg"] == 2.95034e+06


def test_without_phase_headers_the_last_stat_line_is_the_steady_runs():
    result = parse_benchmark_output(MI11_NNAPI_GPU)
    assert result.steady_us["avg"] == 156669
    assert result.memory_mb == {"init": 6.80469, "overall": 61.0078}
    assert result.latency().mean == pytest.approx(156.669)


def test_old_summary_with_profiling_tail():
    result = parse_benchmark_output(README_PROFILING_TAIL)
    assert result.steady_us == {}                       # only profiler stat lines here
    assert result.init_ms == pytest.approx(38.467)
    assert result.warmup_avg_ms == pytest.approx(83.235)
    assert result.latency().mean == pytest.approx(79.7609)


@pytest.mark.parametrize("text, init_ms, mean_ms", [
    (ANDROID_LOGCAT, 1007.529, 1.68792),
    (MEASUREMENT_LOGCAT, 4.108, 80.6601),
])
def test_logcat_lines_with_their_prefix(text, init_ms, mean_ms):
    result = parse_benchmark_output(text)
    assert result.init_ms == pytest.approx(init_ms)
    assert result.latency().mean == pytest.approx(mean_ms)


def test_failed_delegate_is_an_error_with_the_tools_reason():
    with pytest.raises(BenchmarkOutputError, match="ANEURALNETWORKS_OP_FAILED"):
        parse_benchmark_output(MI11_NNAPI_FAILED)
    partial = parse_benchmark_output(MI11_NNAPI_FAILED, require_timings=False)
    assert "Benchmarking failed." in partial.errors


def test_run_cut_short_never_passes_its_warmup_off_as_steady_runs():
    cut = RISCV_FULL.split("count=50 first=2990275")[0]
    result = parse_benchmark_output(cut, require_timings=False)
    assert result.steady_us == {} and result.warmup_us["count"] == 1
    with pytest.raises(BenchmarkOutputError):
        parse_benchmark_output(cut)


def test_newer_builds_median_is_read():
    line = ("count=25 first=187533 curr=140990 min=140071 max=195121 avg=145528 std=13583 "
            "p5=140545 median=141253 p95=187533\n")
    assert parse_benchmark_output(line).latency().median == pytest.approx(141.253)


def test_delegation_lines_are_kept():
    text = (MI11_NNAPI_GPU + "INFO: Replacing 31 out of 31 node(s) with delegate "
            "(TfLiteGpuDelegateV2) node, yielding 1 partitions.\n")
    assert parse_benchmark_output(text).delegation[0].startswith("Replacing 31 out of 31")
