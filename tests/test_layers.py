"""The import structure (docs/ARCHITECTURE.md): imports point down, cli -> roof -> stages
-> ground, checked by the import-linter contracts in pyproject.toml; no import cycles
anywhere in edgeopt (function-level imports count); only edgeopt.cli imports click.

The stage folders (calibration/, devices/...) install as subpackages of edgeopt, so the
graph is read from a tree of symlinks laid out as installed. `python tests/test_layers.py`
runs the same check by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `lint-imports --no-cache`, with the interpreter running the tests
# (run from the tree: the checkout's own edgeopt/ folder must not shadow it)
LINT = ("import sys\nfrom importlinter.cli import lint_imports\n"
        f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}, no_cache=True))")


def installed_tree(into: Path) -> Path:
    """`into`/edgeopt/... with every .py of the package where an install would put it."""
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    for package, folder in package_dirs.items():
        source = ROOT / folder
        for path in source.rglob("*.py"):
            if "__pycache__" in path.relative_to(source).parts:
                continue
            target = into.joinpath(*package.split("."), path.relative_to(source))
            if target.exists():  # a nested package mapped on its own
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(path)
    return into


GRAPH = """import json, grimp
graph = grimp.build_graph("edgeopt", include_external_packages=True, cache_dir=None)
print(json.dumps({m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}))
"""


def _graph(tree: Path) -> dict[str, set[str]]:
    """module -> the modules it imports, as grimp reads them (every import statement,
    inside functions too), in a fresh interpreter so that `tree` is the edgeopt it finds."""
    out = subprocess.run([sys.executable, "-c", GRAPH], cwd=tree, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(tree)})
    assert out.returncode == 0, out.stderr
    return {module: set(imports) for module, imports in json.loads(out.stdout).items()}


def _strongly_connected(graph: dict[str, set[str]], modules: set[str]) -> list[set[str]]:
    """Tarjan's components of the import graph restricted to `modules` (iterative)."""
    index, low, on_stack, stack, components, counter = {}, {}, set(), [], [], [0]

    def visit(root: str) -> None:
        work = [(root, iter(sorted(graph[root] & modules)))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    components.append(component)
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(
                    graph[child] & modules))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return components


def test_import_contracts_hold(tmp_path):
    tree = installed_tree(tmp_path / "tree")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", LINT], cwd=tree, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout and "KEPT" in out.stdout, out.stdout


def test_no_import_cycles(tmp_path):
    graph = _graph(installed_tree(tmp_path / "tree"))
    modules = {m for m in graph if m == "edgeopt" or m.startswith("edgeopt.")}
    assert len(modules) > 150  # the whole package, stages included, was read
    # packages count too: a module importing its own package's __init__, which imports
    # the module back, only works in one import order
    cycles = [c for c in _strongly_connected(graph, modules) if len(c) > 1]
    assert cycles == [], cycles


def test_only_the_cli_imports_click(tmp_path):
    graph = _graph(installed_tree(tmp_path / "tree"))
    importers = {m for m, imports in graph.items() if "click" in imports}
    assert importers and all(m.startswith("edgeopt.cli") for m in importers), sorted(importers)


def test_the_cycle_check_sees_function_level_imports(tmp_path):
    """A cycle hidden inside a function body is still a cycle."""
    pkg = tmp_path / "tree" / "edgeopt"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from edgeopt import b\n")
    (pkg / "b.py").write_text("def late():\n    from edgeopt import a\n    return a\n")
    graph = _graph(tmp_path / "tree")
    assert {"edgeopt.a", "edgeopt.b"} in _strongly_connected(graph, {"edgeopt.a", "edgeopt.b"})


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tree = installed_tree(Path(tmp))
        sys.exit(subprocess.run([sys.executable, "-c", LINT], cwd=tree,
                                env={**os.environ, "PYTHONPATH": str(tree)}).returncode)
