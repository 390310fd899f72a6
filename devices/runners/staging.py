"""Before a remote run: make the work folder, find what can run the model, push it all.

    >>> facts = probe(space, config)          # one device script
    >>> staged = stage(space, config, facts, handle)
    >>> staged.command, staged.model
    (('/data/local/tmp/benchmark_model',), '/data/local/tmp/edgeopt-1a2b3c4d/model.tflite')

The runner is TFLite's benchmark_model (`--benchmark-binary` as a local file to push or a
device path, else /data/local/tmp/benchmark_model, else one on PATH) or, on a Linux board
with Python, edgeopt's remote_bench.py run by the device's python3; `--runner auto` takes
benchmark_model when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgeopt.devices.runners import device_scripts as scripts
from edgeopt.errors import DeviceError
from edgeopt.model import ModelHandle

PROBE_TIMEOUT_S = 20.0
RUNNER_SCRIPT = Path(__file__).with_name("remote_bench.py")


@dataclass(frozen=True)
class DeviceFacts:
    binary: str | None
    python: str | None
    supply: str | None
    charging: bool
    abi: str


@dataclass(frozen=True)
class Staged:
    """What runs on the device: the command words, the model and delegate paths there."""

    command: tuple[str, ...]
    model: str
    delegate: str | None
    tool: str


def local_file(value: str | None) -> Path | None:
    return Path(value) if value and Path(value).is_file() else None


def step_timeout(config, seconds: float) -> float:
    """A device step's time limit: its own, but never longer than --timeout, so a device
    that stops answering is given up on as soon as a hung run would be."""
    return min(seconds, config.timeout_s)


def probe(space, config) -> DeviceFacts:
    given = config.benchmark_binary
    binaries = [given] if given and not local_file(given) else scripts.BINARY_CANDIDATES
    folders = [space.root] + ([space.path("numerics")] if config.numerics_samples else [])
    out = space.client.shell(scripts.probe_script(folders, binaries),
                             timeout=step_timeout(config, PROBE_TIMEOUT_S))
    found = scripts.parse_markers(out.stdout)

    def first(key: str) -> str | None:
        return (found.get(key) or [None])[0]

    return DeviceFacts(first("binary"), first("python"), first("power"),
                       (first("status") or "").lower() == "charging", first("abi") or "")


def _no_runner(space, config) -> DeviceError:
    return DeviceError(
        f"{space.client.who()} has no benchmark_model (looked for "
        f"{config.benchmark_binary or scripts.BINARY_CANDIDATES[0]} and on PATH)"
        + ("" if config.runner == "benchmark_model" else " and no python3") +
        ": give --benchmark-binary, a local file to push or a path on the device (TFLite "
        "publishes prebuilt benchmark_model binaries)")


def _command(space, config, facts: DeviceFacts, timeout: float) -> tuple[tuple[str, ...], str]:
    if local := local_file(config.benchmark_binary):
        binary = space.path("benchmark_model")
        space.client.push(local, binary, timeout=timeout)
        space.client.shell(scripts.chmod_script(binary),
                           timeout=step_timeout(config, PROBE_TIMEOUT_S))
        return (binary,), "benchmark_model"
    use_python = config.runner == "python" or (config.runner == "auto" and not facts.binary)
    if not use_python and facts.binary:
        return (facts.binary,), "benchmark_model"
    if use_python and facts.python:
        script = space.path(RUNNER_SCRIPT.name)
        space.client.push(RUNNER_SCRIPT, script, timeout=timeout)
        return (facts.python, script), f"edgeopt {RUNNER_SCRIPT.name} ({facts.python})"
    raise _no_runner(space, config)


def stage(space, config, facts: DeviceFacts, handle: ModelHandle) -> Staged:
    """Push the model, the runner when it is local, and a local delegate library."""
    timeout = step_timeout(config, 30.0 + handle.size_bytes / 2e6)
    remote_model = space.path(handle.path.name)
    space.client.push(handle.path, remote_model, timeout=timeout)
    command, tool = _command(space, config, facts, timeout)
    delegate = config.delegate
    if lib := local_file(delegate):
        delegate = space.path(lib.name)
        space.client.push(lib, delegate, timeout=timeout)
    return Staged(command, remote_model, delegate, tool)
