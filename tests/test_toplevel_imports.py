"""edgeopt's own modules are imported at module top everywhere: edgeopt/ (cli/ included),
converters/ and the stage packages.

Only heavy third-party frameworks stay lazy inside functions; an edgeopt import inside a
function hides a dependency (and any import cycle) until that code path runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STAGE_PACKAGES = ("calibration", "compression", "delegates", "devices")
PACKAGES = ("edgeopt", "converters", *STAGE_PACKAGES)

# "path:statement" (e.g. "devices/x.py:from edgeopt.y import z") -> why it must stay inside
# its function. Empty unless an import is a genuine layering exception; say why in one line.
ALLOWED: dict[str, str] = {}


def _is_edgeopt(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "edgeopt"
    return any(alias.name.split(".")[0] == "edgeopt" for alias in node.names)


def function_level_imports(source: str) -> list[tuple[int, str]]:
    """(line, statement) of every edgeopt import inside a function or method body."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)) \
                    and _is_edgeopt(child):
                found.append((child.lineno, ast.unparse(child)))
            visit(child, inside)

    visit(ast.parse(source), False)
    return found


def _package_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_the_scanner_finds_a_function_level_import_and_ignores_top_and_third_party():
    source = (
        "from edgeopt.errors import DataError\n"
        "def f():\n"
        "    import numpy\n"
        "    from edgeopt.graph import Graph\n"
        "    from . import sibling\n"
        "class C:\n"
        "    def m(self):\n"
        "        if True:\n"
        "            import edgeopt.model\n"
    )
    assert function_level_imports(source) == [
        (4, "from edgeopt.graph import Graph"),
        (5, "from . import sibling"),
        (9, "import edgeopt.model"),
    ]


def test_every_package_is_scanned():
    scanned = {p.relative_to(ROOT).parent.as_posix() for p in _package_files()}
    assert set(PACKAGES) | {"edgeopt/cli"} <= scanned


@pytest.mark.parametrize("path", _package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_function_level_edgeopt_import(path: Path):
    rel = path.relative_to(ROOT).as_posix()
    offending = [f"{rel}:{line}: {stmt}"
                 for line, stmt in function_level_imports(path.read_text("utf-8"))
                 if f"{rel}:{stmt}" not in ALLOWED]
    assert not offending, "import these at module top:\n" + "\n".join(offending)
