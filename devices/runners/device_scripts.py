"""The device-side shell scripts, with every path, name and flag quoted by `shlex.quote`.

    >>> benchmark_script(["benchmark_model"], ["--graph=/data/local/tmp/a b.tflite"])
    "echo @pid $$; exec benchmark_model '--graph=/data/local/tmp/a b.tflite' 2>&1"

A model called `a b;touch PWNED.tflite` reaches the device shell only as one single-quoted
word. Scripts speak to the host through lines starting with `@` (`@pid 1234`,
`@binary /path`); the rest of their output is the tools' own. They use only POSIX sh
that Android's mksh/toybox and a Linux board's dash both run.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

BINARY_CANDIDATES = ("/data/local/tmp/benchmark_model",)
POWER_SUPPLIES = ("/sys/class/power_supply/battery", "/sys/class/power_supply/bms",
                  "/sys/class/power_supply/Battery")


def q(value: str) -> str:
    return shlex.quote(str(value))


def probe_script(folders: Sequence[str], binaries: Sequence[str] = BINARY_CANDIDATES,
                 supplies: Sequence[str] = POWER_SUPPLIES) -> str:
    """Make the work folders; report the first benchmark binary, battery sensor and ABI."""
    return "; ".join([
        f"mkdir -p {' '.join(map(q, folders))} || exit 1",
        f"for b in {' '.join(map(q, binaries))}; do if [ -x \"$b\" ]; then "
        "echo \"@binary $b\"; break; fi; done",
        "b=$(command -v benchmark_model 2>/dev/null) && echo \"@binary $b\"",
        "p=$(command -v python3 2>/dev/null) && echo \"@python $p\"",
        f"for d in {' '.join(map(q, supplies))}; do if [ -r \"$d/current_now\" ] && "
        "[ -r \"$d/voltage_now\" ]; then echo \"@power $d\"; "
        "echo \"@status $(cat \"$d/status\" 2>/dev/null)\"; break; fi; done",
        "echo \"@abi $(getprop ro.product.cpu.abi 2>/dev/null || uname -m)\"",
        "true",
    ])


def parse_markers(output: str) -> dict[str, list[str]]:
    """`@key value` lines -> {key: [values in order]}."""
    markers: dict[str, list[str]] = {}
    for line in output.splitlines():
        if line.startswith("@"):
            key, _, value = line[1:].partition(" ")
            markers.setdefault(key, []).append(value.strip())
    return markers


def benchmark_script(command: Sequence[str], flags: Sequence[str],
                     limit_s: float | None = None) -> str:
    """Print the shell's pid (exec keeps it, so it can be killed), then run the command;
    with `limit_s`, under the device's own `timeout` when it has one, so a run whose host
    vanished still ends by itself."""
    words = " ".join(q(w) for w in [*command, *flags])
    if limit_s is None:
        return f"echo @pid $$; exec {words} 2>&1"
    return (f"echo @pid $$; if command -v timeout >/dev/null 2>&1; then exec timeout -s KILL "
            f"{int(limit_s) + 1} {words} 2>&1; else exec {words} 2>&1; fi")


def sampler_script(supply: str, interval_s: float, max_samples: int) -> str:
    """Battery current and voltage every `interval_s`, each line `@s CURRENT VOLTAGE`;
    `read` is a shell builtin, so a sample costs no process but `sleep`. Stops by itself
    after `max_samples` even if the host vanished."""
    return (f"echo @pid $$; d={q(supply)}; i=0; while [ $i -lt {int(max_samples)} ]; do "
            "read c < \"$d/current_now\"; read v < \"$d/voltage_now\"; echo \"@s $c $v\"; "
            f"sleep {interval_s:g}; i=$((i+1)); done")


def cleanup_script(workdir: str, pids: Sequence[int] = ()) -> str:
    """Kill our own device processes by pid and process group (never by name), then remove
    the work folder. adbd starts each shell in a session of its own, so a script's group
    holds the tools it started."""
    targets = " ".join(f"-{int(p)} {int(p)}" for p in pids)
    kills = f"kill -9 {targets} 2>/dev/null; " if pids else ""
    return f"{kills}rm -rf {q(workdir)}"


def numerics_script(runs: Sequence[tuple[str, Sequence[str]]]) -> str:
    """Run benchmark_model once per (label, argv); a failed run prints `@fail LABEL`."""
    steps = [f"{' '.join(map(q, argv))} >/dev/null 2>&1 || echo {q('@fail ' + label)}"
             for label, argv in runs]
    return "; ".join(["echo @pid $$", *steps, "true"])


def chmod_script(path: str) -> str:
    return f"chmod 755 {q(path)}"
