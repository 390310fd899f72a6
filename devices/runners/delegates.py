"""Which delegate a device profile names, and how each runner asks for it.

    >>> benchmark_model_flags("gpu")
    ('--use_gpu=true',)
    >>> host_delegate("xnnpack").label
    'XNNPACK (LiteRT default delegate)'

One table per runner: the flags of TFLite's `benchmark_model` (README, "TFLite delegate
parameters"), and the delegates LiteRT can load on a Linux host. A NAME from these tables or
a PATH to a delegate library (`--external_delegate_path`, `load_delegate`) is accepted.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.delegates.external import load_external_delegate
from edgeopt.errors import DeviceError

# benchmark_model flags per delegate name (profile `delegate` field or --delegate NAME).
BENCHMARK_MODEL_FLAGS: dict[str, tuple[str, ...]] = {
    "xnnpack": ("--use_xnnpack=true",),
    "none": ("--use_xnnpack=false",),
    "gpu": ("--use_gpu=true",),
    "nnapi": ("--use_nnapi=true",),
    "google-tensor": ("--use_nnapi=true",),
    "hexagon": ("--use_hexagon=true",),
    "qnn-htp": ("--external_delegate_path=libQnnTFLiteDelegate.so",
                "--external_delegate_options=backend_type:htp"),
    "edgetpu": ("--external_delegate_path=libedgetpu.so.1",),
}
# The reference that --check-numerics compares a delegate with: TFLite's own CPU kernels.
REFERENCE_FLAGS = ("--use_xnnpack=false",)
ALIASES = {"cpu": "none", "reference": "none"}
# Delegates a Linux host can load by library name.
HOST_LIBRARIES = {"edgetpu": "libedgetpu.so.1", "qnn-htp": "libQnnTFLiteDelegate.so"}
NOT_ON_HOST = {"gpu", "nnapi", "google-tensor", "hexagon"}
NOT_MEASURABLE = {"ethos-u": "Ethos-U NPUs run on microcontrollers, not under benchmark_model; "
                             "use `edgeopt estimate` (Vela) for them"}


def is_library_path(value: str) -> bool:
    return "/" in value or value.endswith(".so") or ".so." in value


def canonical(name: str) -> str:
    name = ALIASES.get(name, name)
    if name in NOT_MEASURABLE:
        raise DeviceError(NOT_MEASURABLE[name])
    return name


def benchmark_model_flags(delegate: str | None,
                          options: tuple[tuple[str, str], ...] = ()) -> tuple[str, ...]:
    """Flags that make benchmark_model use `delegate` (a name, or a library path on the
    device); None means the binary's default (XNNPACK in current builds)."""
    if delegate is None:
        return ()
    if is_library_path(delegate):
        flags = (f"--external_delegate_path={delegate}",)
        if options:
            flags += ("--external_delegate_options=" + ";".join(f"{k}:{v}" for k, v in options),)
        return flags
    name = canonical(delegate)
    if name not in BENCHMARK_MODEL_FLAGS:
        known = ", ".join(sorted(BENCHMARK_MODEL_FLAGS))
        raise DeviceError(f"unknown delegate '{delegate}' (known: {known}, or a path to a "
                          "delegate library)")
    return BENCHMARK_MODEL_FLAGS[name]


@dataclass(frozen=True)
class HostDelegate:
    """How to build a LiteRT interpreter on this host for one delegate choice."""

    label: str
    default_delegates: bool = True     # False: LiteRT's builtin kernels only
    library: str | None = None
    options: tuple[tuple[str, str], ...] = ()

    def load(self):
        """The loaded external delegate, or None; a library that fails is a DeviceError."""
        if self.library is None:
            return None

        return load_external_delegate(self.library, dict(self.options))


def host_delegate(delegate: str | None,
                  options: tuple[tuple[str, str], ...] = ()) -> HostDelegate:
    """The host's way to run `delegate` with LiteRT, or a DeviceError that says where to."""
    if delegate is None or delegate == "xnnpack":
        return HostDelegate("XNNPACK (LiteRT default delegate)")
    if is_library_path(delegate):
        return HostDelegate(f"external delegate {delegate}", library=delegate, options=options)
    name = canonical(delegate)
    if name == "none":
        return HostDelegate("LiteRT builtin kernels (no delegate)", default_delegates=False)
    if name in HOST_LIBRARIES:
        return HostDelegate(f"{name} delegate", library=HOST_LIBRARIES[name], options=options)
    if name in NOT_ON_HOST:
        raise DeviceError(f"the {name} delegate runs on the phone, not on this host: measure "
                          "it there with --adb, or give --delegate PATH to a delegate library")
    raise DeviceError(f"unknown delegate '{delegate}' (known: xnnpack, none, "
                      f"{', '.join(sorted(HOST_LIBRARIES))}, or a path to a delegate library)")
