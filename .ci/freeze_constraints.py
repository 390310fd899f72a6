"""Print constraints.txt for the environment this runs in.

Every package that `edgeopt[test,real,torch]` (and the checkers CI runs) pulls in, with the
version installed here, read from the installed metadata: unlike `pip freeze`, nothing
that merely happens to be installed gets pinned, and edgeopt itself is left out.

    python .ci/freeze_constraints.py > constraints.txt
"""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOTS = ["edgeopt[test,real,torch]"]
CHECKERS = ["import-linter", "mypy"]  # run by the tests and CI, not imported by edgeopt
# Build tools every venv brings its own of; pinning them fights pyproject's build-system.
UNPINNED = {"edgeopt", "pip", "setuptools", "wheel"}

HEADER = """\
# The package versions that install together and pass the test suite (Python 3.11, Linux
# x86_64): every package `pip install -e ".[test,real,torch]"` brings in, pinned. README's
# commands and .ci/run install with `-c constraints.txt`, so a new machine gets what CI checked.
# torch==2.13.0 matches the CPU wheel 2.13.0+cpu where pip finds one (on the CI machine, its
# find-links folder); PyPI's own torch wheels for Linux are CUDA builds of several GB.
# Regenerate from a venv that passes: python .ci/freeze_constraints.py > constraints.txt
"""


def _requirements(dist: metadata.Distribution, extras: set[str]) -> list[Requirement]:
    wanted = []
    for raw in dist.requires or []:
        req = Requirement(raw)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
            wanted.append(req)
    return wanted


def closure(roots: list[str]) -> dict[str, str]:
    """Canonical name -> installed version of `roots` and everything they require."""
    versions: dict[str, str] = {}
    done: dict[str, set[str]] = {}
    todo = [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        key = canonicalize_name(req.name)
        extras = set(req.extras)
        if key in done and extras <= done[key]:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            sys.exit(f"freeze_constraints: {req.name} is required but not installed")
        done[key] = done.get(key, set()) | extras
        # ==X matches X+cpu too; pinning the local label would refuse every other build
        versions[key] = Version(dist.version).public
        todo.extend(_requirements(dist, done[key]))
    return versions


def main() -> None:
    packages = closure(ROOTS)
    checkers = {k: v for k, v in closure(CHECKERS).items() if k not in packages}
    lines = [HEADER.rstrip("\n")]
    lines += [f"{k}=={v}" for k, v in sorted(packages.items()) if k not in UNPINNED]
    if checkers:
        lines.append("# Checkers the tests and CI run (import-linter contract, mypy).")
        lines += [f"{k}=={v}" for k, v in sorted(checkers.items()) if k not in UNPINNED]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
