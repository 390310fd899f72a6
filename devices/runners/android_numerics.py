"""--check-numerics on a phone: the same inputs through benchmark_model with and without the
delegate, each output tensor written to a file, pulled and compared on the host.

    >>> device_numerics(space, config, handle, staged)
    {'reference': 'benchmark_model --use_xnnpack=false (TFLite CPU kernels)',
     'candidate': 'benchmark_model --use_gpu=true', 'samples': 4, 'sqnr_db': 41.2, ...}

All runs go through one device script (two runner processes per sample); the inputs go
out in one push and the outputs come back in one pull.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from edgeopt.devices.runners import device_scripts as scripts
from edgeopt.devices.runners.delegates import REFERENCE_FLAGS, benchmark_model_flags
from edgeopt.devices.runners.numerics import (
    compare_device_outputs,
    device_input_files,
    input_flags,
    numerics_inputs,
)
from edgeopt.devices.runners.staging import Staged, step_timeout
from edgeopt.devices.runners.workspace import Workspace, run_script
from edgeopt.errors import DeviceError
from edgeopt.model import ModelHandle

ONE_RUN = ["--num_runs=1", "--warmup_runs=0", "--min_secs=0", "--warmup_min_secs=0"]


def _push_inputs(space: Workspace, config, handle: ModelHandle, arrays, samples: int,
                 local: Path) -> list[list[str]]:
    """Write and push every sample's input files; returns their device paths per sample."""
    remote, files = [], []
    for i in range(samples):
        names = [f"in_{i}_{k}.bin" for k in range(len(handle.inputs))]
        for name, content in zip(names, device_input_files(handle, arrays, i)):
            (local / name).write_bytes(content)
            files.append(str(local / name))
        remote.append([space.path("numerics", n) for n in names])
    space.client.push_many([Path(f) for f in files], space.path("numerics"),
                           timeout=step_timeout(config, 60.0))
    return remote


def _runs(space: Workspace, config, handle: ModelHandle, staged: Staged,
          inputs: list[list[str]]):
    common = [*staged.command, f"--graph={staged.model}", *ONE_RUN]
    if config.threads:
        common.append(f"--num_threads={config.threads}")
    candidate_flags = list(benchmark_model_flags(staged.delegate, config.delegate_options))
    runs = []
    for i, files in enumerate(inputs):
        feed = common + input_flags(handle, files)
        out = space.path("numerics", f"{{}}_{i}.bin")
        runs.append((f"reference {i}", feed + list(REFERENCE_FLAGS)
                     + [f"--output_filepath={out.format('ref')}"]))
        runs.append((f"delegate {i}", feed + candidate_flags
                     + [f"--output_filepath={out.format('cand')}"]))
    return runs, candidate_flags


def device_numerics(space: Workspace, config, handle: ModelHandle, staged: Staged) -> dict:
    """Compare the delegate with TFLite's CPU kernels on `config.numerics_samples` inputs."""
    reference, candidate, labels = device_output_files(space, config, handle, staged)
    return compare_device_outputs(handle, reference, candidate, labels)


def device_output_files(space: Workspace, config, handle: ModelHandle,
                        staged: Staged) -> tuple[list[bytes], list[bytes], tuple[str, str]]:
    """Each sample's `--output_filepath` bytes without and with the delegate, and the two
    runs' labels (also edgeopt.divergence's way to read every tensor on a phone)."""
    samples = config.numerics_samples
    arrays = numerics_inputs(handle, config.numerics_inputs, samples)
    with tempfile.TemporaryDirectory(prefix="edgeopt-numerics-") as tmp:
        inputs = _push_inputs(space, config, handle, arrays, samples, Path(tmp))
        runs, candidate_flags = _runs(space, config, handle, staged, inputs)
        run = run_script(space, scripts.numerics_script(runs), config.timeout_s,
                         "the numerics runs")
        failed = scripts.parse_markers(run.text).get("fail")
        if failed:
            raise DeviceError(f"{space.client.who()}: benchmark_model failed the numerics run "
                              f"'{failed[0]}' (its output files are missing)")
        pulled = Path(tmp) / "pulled"
        pulled.mkdir()
        names = [f"{kind}_{i}.bin" for i in range(samples) for kind in ("ref", "cand")]
        space.client.pull_many([space.path("numerics", n) for n in names], pulled,
                               timeout=step_timeout(config, 60.0))
        reference = [_read(pulled, f"ref_{i}.bin") for i in range(samples)]
        candidate = [_read(pulled, f"cand_{i}.bin") for i in range(samples)]
    labels = (f"{staged.tool} {' '.join(REFERENCE_FLAGS)} (TFLite CPU kernels)",
              f"{staged.tool} {' '.join(candidate_flags) or '(default delegates)'}")
    return reference, candidate, labels


def _read(folder: Path, name: str) -> bytes:
    path = folder / name
    if not path.is_file():
        raise DeviceError(f"the runner wrote no {name} (does this benchmark_model build "
                          "support --output_filepath? older ones do not)")
    return path.read_bytes()
