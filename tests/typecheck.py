"""Run mypy on the stage APIs: `python tests/typecheck.py` (tests/test_typecheck.py runs it
in the default suite, so `.ci/run` checks it).

mypy cannot follow setuptools' editable-install finder, and pyproject maps top-level
folders into `edgeopt` (`calibration/` is `edgeopt.calibration`), so the package is laid
out as installed in a temporary tree of symlinks. The scope (`modules`) and settings are
pyproject's `[tool.mypy]`; `typing_contracts` (in tests/) checks each implementation of a
boundary Protocol against it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def package_tree(dest: Path, root: Path = ROOT) -> Path:
    """`dest/edgeopt/...` as the installed package, made of symlinks into `root`."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = config["tool"]["setuptools"]["package-dir"]
    for package, folder in sorted(mapping.items()):
        target = dest.joinpath(*package.split("."))
        if os.path.lexists(target):
            continue  # a subfolder of a package already linked whole
        if package == "edgeopt":  # the top package holds other packages: link its entries
            target.mkdir(parents=True)
            for entry in (root / folder).iterdir():
                (target / entry.name).symlink_to(entry)
        else:
            target.symlink_to(root / folder, target_is_directory=True)
    return dest


def run_mypy(cache_dir: Path, root: Path = ROOT) -> subprocess.CompletedProcess:
    """mypy over `[tool.mypy] modules`; its report is in stdout, exit status 0 when clean."""
    with tempfile.TemporaryDirectory(prefix="edgeopt-typecheck-") as tmp:
        tree = package_tree(Path(tmp), root)
        env = {**os.environ, "MYPYPATH": os.pathsep.join([str(tree), str(root / "tests")])}
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(root / "pyproject.toml"),
             "--cache-dir", str(cache_dir)],
            capture_output=True, text=True, cwd=root, env=env, timeout=600)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="edgeopt-mypy-cache-") as cache:
        proc = run_mypy(Path(cache))
    sys.stdout.write(proc.stdout + proc.stderr)
    raise SystemExit(proc.returncode)
