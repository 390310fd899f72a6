"""Without PyTorch installed, a .pt2 input ends in one error that says what to install
(issue 17). torch is hidden from a fresh interpreter (`sys.modules['torch'] = None` makes
every `import torch` fail as on a machine without it); nothing else is replaced."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from conftest import assert_user_error

HIDDEN = ("import runpy, sys; sys.modules['torch'] = None; sys.modules['onnxscript'] = None; "
          "sys.argv = ['edgeopt', *sys.argv[1:]]; runpy.run_module('edgeopt.cli', "
          "run_name='__main__')")


def _pt2_shaped(path):
    """A zip laid out as torch.export.save lays one out (the error comes before its JSON)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("model/archive_format", "pt2")
        archive.writestr("model/archive_version", "0")
        archive.writestr("model/models/model.json", "{}")
    return path


def test_pt2_without_torch_says_what_to_install(tmp_path):
    model = _pt2_shaped(tmp_path / "model.pt2")
    out = tmp_path / "dist"
    for args in (["inspect", model], ["build", model, "--calib", "random", "-o", out]):
        result = subprocess.run([sys.executable, "-c", HIDDEN, *map(str, args)],
                                capture_output=True, text=True, timeout=300)
        assert_user_error(result, "pip install 'edgeopt[torch]'")
        assert "needs PyTorch" in result.stderr
    assert not out.exists()
