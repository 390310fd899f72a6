"""No shell command is built from an unquoted user string, anywhere.

1. The code, read as syntax trees: no host shell at all (`shell=True`, os.system, os.popen,
   a command string handed to subprocess); every value interpolated into a device shell
   script goes through `q`/`shlex.quote` (or is a number); every script sent to a device is
   one of those scripts, a constant, or passed through unchanged.
2. The scripts, run by the real /bin/sh (dash here, like a board; Android's mksh parses
   single quotes the same way) on hostile names: each arrives as one literal word.
3. `edgeopt bench --ssh` with hostile model names and a hostile host name.
   (`--adb` with hostile names: tests/test_adb_bench.py; image folders:
   tests/test_hostile_paths.py.)
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, assert_user_error, wrapped_python
from edgeopt.devices.runners import device_scripts as scripts

CODE_DIRS = ("edgeopt", "calibration", "compression", "converters", "delegates", "devices",
             "benchmarks", "samples")
HOST_SHELL_CALLS = {"os.system", "os.popen", "subprocess.getoutput",
                    "subprocess.getstatusoutput", "pty.spawn"}
ARGV_CALLS = {"subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call",
              "subprocess.check_output", "spawn_tracked", "run_tracked", "os.execv",
              "os.execvp", "os.spawnv"}
HOSTILE = ["a b", "it's", 'say "hi"', "x;touch PWNED", "$(touch PWNED)", "`touch PWNED`",
           "new\nline", "-rf", "--graph=/etc/passwd", "*", "~root", "a\\b", "tab\there",
           "$HOME", "& touch PWNED &", "| touch PWNED", "> PWNED"]


def _sources() -> list[tuple[Path, ast.Module]]:
    found = []
    for folder in CODE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found.append((path, ast.parse(path.read_text(), str(path))))
    return found


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _is_string_expr(node: ast.AST) -> bool:
    """A command line as one string (rather than an argv list)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    return isinstance(node, ast.BinOp) and (_is_string_expr(node.left)
                                            or _is_string_expr(node.right))


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{node.lineno}"


def test_no_host_shell_anywhere():
    problems = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _dotted(node.func)
            if name in HOST_SHELL_CALLS:
                problems.append(f"{_where(path, node)}: {name} runs a host shell")
            for keyword in node.keywords:
                if keyword.arg == "shell" and not (isinstance(keyword.value, ast.Constant)
                                                   and keyword.value.value is False):
                    problems.append(f"{_where(path, node)}: shell=... runs a host shell")
            if name in ARGV_CALLS and node.args and _is_string_expr(node.args[0]):
                problems.append(f"{_where(path, node)}: {name} is given a command string")
    assert problems == []
    assert len(_sources()) > 100  # the walk really covered the code


# --- device scripts: every interpolated value quoted ----------------------------------------

QUOTERS = {"q", "shlex.quote", "int", "len"}


def _assignments(function: ast.AST) -> dict[str, list[ast.AST]]:
    found: dict[str, list[ast.AST]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append(node.value)
    return found


def _quoted(node: ast.AST, assigned: dict, seen: frozenset = frozenset()) -> bool:
    """True when `node` can only produce quoted words, numbers or constant text."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Call):
        name = _dotted(node.func)
        if name in QUOTERS:
            return True
        if name.endswith(".join") and len(node.args) == 1:
            arg = node.args[0]
            if isinstance(arg, ast.Call) and _dotted(arg.func) == "map":
                return _dotted(arg.args[0]) in QUOTERS
            if isinstance(arg, (ast.GeneratorExp, ast.ListComp)):
                return _quoted(arg.elt, assigned, seen)
        return False
    if isinstance(node, ast.JoinedStr):
        return all(_quoted(v, assigned, seen) for v in node.values)
    if isinstance(node, ast.FormattedValue):
        spec = node.format_spec
        numeric = spec is not None and all(isinstance(v, ast.Constant) and v.value in ("g", "d")
                                           for v in spec.values)
        return numeric or _quoted(node.value, assigned, seen)
    if isinstance(node, ast.IfExp):
        return _quoted(node.body, assigned, seen) and _quoted(node.orelse, assigned, seen)
    if isinstance(node, ast.BinOp):
        return _quoted(node.left, assigned, seen) and _quoted(node.right, assigned, seen)
    if isinstance(node, ast.Name) and node.id in assigned and node.id not in seen:
        return all(_quoted(v, assigned, seen | {node.id}) for v in assigned[node.id])
    return False


def _script_functions():
    tree = ast.parse(Path(scripts.__file__).read_text())
    return [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.endswith("_script")]


def test_every_value_in_a_device_script_is_quoted():
    functions = _script_functions()
    assert {f.name for f in functions} >= {"probe_script", "benchmark_script", "sampler_script",
                                           "cleanup_script", "numerics_script", "chmod_script"}
    for function in functions:
        assigned = _assignments(function)
        strings = [n for n in ast.walk(function) if isinstance(n, ast.JoinedStr)]
        bad = [ast.unparse(n) for n in strings if not _quoted(n, assigned)]
        assert bad == [], f"{function.name}: unquoted values in {bad}"


def test_the_checker_sees_an_unquoted_value():
    bad = ast.parse('def x_script(path):\n    return f"rm -rf {path}"\n').body[0]
    good = ast.parse('def x_script(path):\n    return f"rm -rf {q(path)}"\n').body[0]
    fstring = [n for n in ast.walk(bad) if isinstance(n, ast.JoinedStr)][0]
    assert not _quoted(fstring, _assignments(bad))
    fstring = [n for n in ast.walk(good) if isinstance(n, ast.JoinedStr)][0]
    assert _quoted(fstring, _assignments(good))


def _script_argument(call: ast.Call) -> ast.AST | None:
    name = _dotted(call.func).split(".")[-1]
    if name == "spawn" and len(call.args) == 2:
        return call.args[1]
    if name in ("shell", "_run", "run_script") and call.args:
        return call.args[1] if name == "run_script" else call.args[0]
    return None


def test_every_script_sent_to_a_device_is_a_quoted_one():
    runners = Path(scripts.__file__).parent
    for path in sorted(runners.glob("*.py")):
        tree = ast.parse(path.read_text())
        for function in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            assigned = _assignments(function)
            params = {a.arg for a in function.args.args}
            for call in [n for n in ast.walk(function) if isinstance(n, ast.Call)]:
                script = _script_argument(call)
                if script is None:
                    continue
                ok = (_quoted(script, assigned)
                      or (isinstance(script, ast.Call)
                          and _dotted(script.func).split(".")[-1].endswith("_script"))
                      or (isinstance(script, ast.Name) and script.id in params | {"script"}))
                assert ok, f"{path.name}:{call.lineno}: {ast.unparse(script)}"


# --- the scripts under a real shell ----------------------------------------------------------

def _sh(script: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", "-c", script], cwd=cwd, capture_output=True, text=True,
                          timeout=30)


def test_hostile_words_reach_the_command_as_one_literal_word(tmp_path):
    flags = [f"--graph={name}" for name in HOSTILE] + HOSTILE
    out = _sh(scripts.benchmark_script([sys.executable, "-c",
                                        "import sys, json; print(json.dumps(sys.argv[1:]))"],
                                       flags, limit_s=20), tmp_path)
    lines = out.stdout.splitlines()
    assert lines[0].startswith("@pid ")
    assert json.loads(lines[1]) == flags
    assert not list(tmp_path.iterdir())  # no PWNED, no redirect target


def test_probe_and_cleanup_of_hostile_folders(tmp_path):
    folders = [str(tmp_path / name.replace("/", "_")) for name in HOSTILE]
    out = _sh(scripts.probe_script(folders, binaries=[str(tmp_path / "$(touch PWNED)")],
                                   supplies=[str(tmp_path / "none; touch PWNED")]), tmp_path)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(Path(f).name for f in folders)
    for folder in folders:
        assert _sh(scripts.cleanup_script(folder), tmp_path).returncode == 0
    assert list(tmp_path.iterdir()) == []


def test_numerics_script_labels_and_arguments(tmp_path):
    runs = [(f"run {name}", ["false", name]) for name in HOSTILE[:6]]
    out = _sh(scripts.numerics_script(runs), tmp_path)
    assert scripts.parse_markers(out.stdout)["fail"] == [label for label, _ in runs]
    assert not list(tmp_path.iterdir())


# --- bench --ssh with hostile names ----------------------------------------------------------

ODD_MODELS = ["a b;touch PWNED $(touch PWNED) `touch PWNED` 'q' \"d\".tflite",
              "new\nline.tflite", "-leading-dash.tflite"]


@pytest.fixture
def recording_ssh(tmp_path, monkeypatch) -> Path:
    """A stand-in `ssh` that logs its argv (NUL-separated) and runs the remote command with
    /bin/sh, as sshd does; python3 on its PATH has LiteRT, like a prepared board."""
    board_bin = wrapped_python(tmp_path / "board-bin").parent
    ssh = tmp_path / "ssh"
    ssh.write_text(f"#!/bin/sh\nprintf '%s\\0' \"$@\" >> {tmp_path}/ssh-argv\n"
                   "for last in \"$@\"; do :; done\n"
                   f"PATH={board_bin}:/usr/bin:/bin exec /bin/sh -c \"$last\"\n")
    ssh.chmod(0o755)
    monkeypatch.setenv("EDGEOPT_SSH", str(ssh))
    return tmp_path / "ssh-argv"




def _no_pwned(*folders: Path) -> None:
    for folder in folders:
        assert not list(folder.rglob("PWNED*")), folder


def test_bench_over_ssh_with_hostile_model_names(bench, recording_ssh, tiny_float_tflite,
                                                 tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # so `-leading-dash.tflite` is given as a relative path
    for name in ODD_MODELS:
        shutil.copy(tiny_float_tflite, work / name)
    result = bench("--ssh", "pi@board.local", "--runs", 3, "--min-secs", 0, "--no-power",
                   "--json", "--", *ODD_MODELS)
    assert result.exit_code == 0, result.stderr
    records = json.loads(result.stdout)["results"]
    assert sorted(r["model"]["file"] for r in records) == sorted(ODD_MODELS)
    argvs = [a.split("\0") for a in recording_ssh.read_text().split("\0pi@board.local\0")]
    assert all(argv[-1] == "--" for argv in argvs[:-1])  # `--` right before every host
    _no_pwned(tmp_path)
    assert not list(Path("/tmp").glob("PWNED*"))  # the board's work folders live in /tmp


@pytest.mark.parametrize("target", ["-oProxyCommand=touch PWNED", "--help", "host name",
                                    "host\n-oProxyCommand=x", ""])
def test_hostile_ssh_targets_are_refused(bench, recording_ssh, tiny_float_tflite, tmp_path,
                                         target):
    result = bench(tiny_float_tflite, "--ssh", target, "--runs", 3, "--no-power")
    assert_user_error(result, "is not a host")
    assert not recording_ssh.exists()  # ssh was never started
    _no_pwned(tmp_path, Path.cwd())


def test_the_real_ssh_client_never_sees_a_dash_host(bench, tiny_float_tflite, tmp_path,
                                                    monkeypatch):
    if shutil.which("ssh") is None:
        pytest.skip("no ssh client (Debian package openssh-client)")
    monkeypatch.delenv("EDGEOPT_SSH", raising=False)
    monkeypatch.chdir(tmp_path)
    result = bench(tiny_float_tflite, "--ssh", f"-oProxyCommand=touch {tmp_path}/PWNED",
                   "--runs", 3, "--no-power")
    assert_user_error(result, "is not a host")
    _no_pwned(tmp_path)
    assert os.listdir(tmp_path) == []
