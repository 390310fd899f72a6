"""PyTorch .pt2 inputs (issue 17): detection, safe loading, the op allowlist, the ONNX export
checked against the program, bad input. Builds on real models are in test_torch_build.py."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

from torch_models import DataDependent, TwoHeads, WithCond, rewrite_pt2, save_program  # noqa: E402

from conftest import assert_user_error  # noqa: E402
from edgeopt.errors import ConfigError, ModelLoadError  # noqa: E402
from edgeopt.model import detect_format, load_model  # noqa: E402
from edgeopt.torch_module import export_module  # noqa: E402
from edgeopt.torch_program import ProgramRunner, load_program  # noqa: E402


@pytest.fixture(scope="session")
def two_heads_pt2(tmp_path_factory):
    return save_program(TwoHeads(), (1, 3, 16, 16), tmp_path_factory.mktemp("pt2") / "heads.pt2")


class Evil:
    """A pickle that would leave a marker file if anything unpickled it unrestricted."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="session")
def heads_handle(two_heads_pt2, tmp_path_factory):
    """The program loaded from a file whose name does not say .pt2 (one export, shared:
    each takes seconds)."""
    renamed = tmp_path_factory.mktemp("renamed") / "model.bin"
    renamed.write_bytes(two_heads_pt2.read_bytes())
    return load_model(renamed)


def test_pt2_is_told_from_content_and_exported_to_onnx(heads_handle):
    assert detect_format(heads_handle.torch.pt2) == "pt2"
    handle = heads_handle
    assert handle.format == "onnx" and handle.torch is not None
    assert [s.name for s in handle.inputs] == ["x"] and len(handle.outputs) == 2
    record = handle.torch.record()
    assert [o["name"] for o in record["outputs"]] == [s.name for s in handle.outputs]
    assert record["parity"]["cosine"] > 0.9999 and record["parity"]["max_abs"] < 1e-4


def test_onnx_nodes_are_named_by_pytorch_module_path(heads_handle):
    import onnx

    handle = heads_handle
    names = [n.name for n in onnx.load(str(handle.path)).graph.node]
    # The BatchNorm folded into its Conv names the block holding both.
    assert "features.0" in names and "features.1.0" in names and "classifier" in names
    assert handle.torch.named_layers >= 5
    graph = onnx.load(str(handle.path)).graph
    assert all(not n.metadata_props for n in graph.node)
    # The output tensors carry the names too (the layer report names tensors).
    by_name = {n.name: n for n in graph.node}
    assert list(by_name["features.0"].output) == ["features.0"]
    assert list(by_name["features.0.2"].input) == ["features.0"]  # the ReLU after it


def test_reference_runner_is_the_pytorch_program(two_heads_pt2):
    runner = ProgramRunner(load_program(two_heads_pt2))
    x = np.random.default_rng(0).standard_normal((3, 3, 16, 16)).astype(np.float32)
    module = torch.export.load(two_heads_pt2).module()
    expected = [module(torch.from_numpy(x[i:i + 1]))[0].detach().numpy() for i in range(3)]
    got = runner.run({"x": x})
    assert len(got) == 2 and np.array_equal(got[0], np.concatenate(expected))


def _marker_untouched(marker):
    assert not marker.exists(), "a pickle from the file ran"


def test_pickled_weights_load_only_as_plain_tensors(two_heads_pt2, tmp_path, run_cli):
    marker = tmp_path / "ran"
    with zipfile.ZipFile(two_heads_pt2) as archive:
        root = archive.namelist()[0].split("/", 1)[0] + "/"
        config = json.loads(archive.read(root + "data/weights/model_weights_config.json"))
    first = next(iter(config["config"].values()))
    first["use_pickle"] = True
    bad = rewrite_pt2(two_heads_pt2, tmp_path / "bad.pt2", replace={
        "data/weights/model_weights_config.json": json.dumps(config).encode(),
        f"data/weights/{first['path_name']}": pickle.dumps(Evil(marker))})
    assert_user_error(run_cli("inspect", bad), "weights_only=True")
    _marker_untouched(marker)


def test_sample_inputs_never_fall_back_to_unrestricted_pickle(two_heads_pt2, tmp_path, run_cli):
    marker = tmp_path / "ran"
    bad = rewrite_pt2(two_heads_pt2, tmp_path / "bad.pt2",
                      replace={"data/sample_inputs/model.pt": pickle.dumps(Evil(marker))})
    out = tmp_path / "dist"
    assert_user_error(run_cli("build", bad, "--calib", "random", "-o", out), "sample inputs")
    _marker_untouched(marker)
    assert not out.exists()


@pytest.mark.parametrize("member, fragment", [
    ("data/aotinductor/model/model.so", "AOTInductor"),
    ("data/constants/opaque_obj_0", "pickled Python object"),
    ("data/weights/model.pt", "legacy pickle"),
    ("code/evil.py", "not part of an ExportedProgram"),
])
def test_members_holding_code_or_pickles_are_refused(two_heads_pt2, tmp_path, run_cli,
                                                     member, fragment):
    bad = rewrite_pt2(two_heads_pt2, tmp_path / "bad.pt2", add={member: b"\x80\x04N."})
    assert_user_error(run_cli("inspect", bad), fragment)


def _first_node(program):
    return program["graph_module"]["graph"]["nodes"][0]


@pytest.mark.parametrize("edit, fragment", [
    (lambda p: p.update(guards_code=["__import__('os').system('true')"]), "guard code"),
    (lambda p: _first_node(p).update(target="torch.load"), "refusing op torch.load"),
    (lambda p: _first_node(p).update(target="torch.ops.aten.from_file.default"),
     "read or write files"),
    (lambda p: _first_node(p).update(target="torch.ops.aten.conv2d.default.__call__"),
     "refusing op"),
    (lambda p: _first_node(p)["outputs"][0]["as_tensor"].update(name="a; import os"),
     "not an identifier"),
    (lambda p: p["graph_module"]["graph"]["sym_int_values"].update(
        s0={"as_expr": {"expr_str": "__import__('os').getcwd()", "hint": None}}),
     "shape expression"),
])
def test_program_json_that_would_run_code_is_refused(two_heads_pt2, tmp_path, run_cli, edit,
                                                     fragment):
    bad = rewrite_pt2(two_heads_pt2, tmp_path / "bad.pt2", edit=edit)
    assert_user_error(run_cli("inspect", bad), fragment)


def test_pt2_from_a_newer_torch_names_the_version(two_heads_pt2, tmp_path, run_cli):
    def newer(program):
        program["schema_version"]["minor"] += 1
        program["torch_version"] = "9.1.0"

    bad = rewrite_pt2(two_heads_pt2, tmp_path / "newer.pt2", edit=newer)
    out = tmp_path / "dist"
    assert_user_error(run_cli("build", bad, "--calib", "random", "-o", out),
                      "saved by torch 9.1.0")
    assert not out.exists()


@pytest.mark.parametrize("keep", [0.5, 0.97])
def test_truncated_pt2_is_one_error(two_heads_pt2, tmp_path, run_cli, keep):
    data = two_heads_pt2.read_bytes()
    bad = tmp_path / "cut.pt2"
    bad.write_bytes(data[:int(len(data) * keep)])
    assert_user_error(run_cli("inspect", bad))


def test_control_flow_ops_are_refused(tmp_path, run_cli):
    path = save_program(WithCond(), (2, 3), tmp_path / "cond.pt2")
    assert_user_error(run_cli("inspect", path), "higher_order.cond")


def test_module_with_data_dependent_control_flow_is_one_error():
    with pytest.raises(ModelLoadError, match="data-dependent control flow"):
        export_module(DataDependent(), (torch.randn(1, 3, 8, 8),))


def test_example_inputs_of_the_wrong_shape_are_one_error():
    with pytest.raises(ModelLoadError, match=r"example inputs \[\(1, 5, 16, 16\)\]"):
        export_module(TwoHeads(), (torch.randn(1, 5, 16, 16),))
    with pytest.raises(ConfigError, match="example_inputs must be a tensor"):
        export_module(TwoHeads(), [np.zeros((1, 3, 16, 16))])


def test_load_program_matches_torch_export_load(two_heads_pt2):
    ours = load_program(two_heads_pt2)
    theirs = torch.export.load(two_heads_pt2)
    x = torch.randn(1, 3, 16, 16)
    for a, b in zip(ours.module()(x), theirs.module()(x)):
        assert torch.equal(a, b)


def test_inspect_names_the_users_pt2(run_cli, two_heads_pt2):
    result = run_cli("inspect", two_heads_pt2, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["model"] == str(two_heads_pt2) and record["format"] == "pt2"
    assert record["graph_read_from"].endswith("exported from PyTorch")
    assert record["op_histogram"]["Conv"] == 2


def test_weight_names_that_reach_past_modules_are_refused(two_heads_pt2, tmp_path, run_cli):
    with zipfile.ZipFile(two_heads_pt2) as archive:
        root = archive.namelist()[0].split("/", 1)[0] + "/"
        config = json.loads(archive.read(root + "data/weights/model_weights_config.json"))
    name = next(iter(config["config"]))
    config["config"]["features.__class__"] = config["config"].pop(name)
    bad = rewrite_pt2(two_heads_pt2, tmp_path / "bad.pt2", replace={
        "data/weights/model_weights_config.json": json.dumps(config).encode()})
    assert_user_error(run_cli("inspect", bad), "not a dotted module path")


def test_export_without_torchvision_writes_nothing_on_stderr(two_heads_pt2):
    # The torch extra brings no torchvision; torch.onnx then warned about each of its ops.
    hidden = ("import runpy, sys; sys.modules['torchvision'] = None; "
              "sys.argv = ['edgeopt', *sys.argv[1:]]; "
              "runpy.run_module('edgeopt.cli', run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", hidden, "inspect", str(two_heads_pt2)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "torchvision" not in result.stderr and result.stderr.strip() == "", result.stderr
    assert "exported from PyTorch" in result.stdout


@pytest.mark.parametrize("saved_by, fragment", [("9.1.0", "saved by torch 9.1.0, newer than"),
                                                ("2.0.0", "corrupt or truncated")])
def test_program_torch_cannot_rebuild_names_a_newer_torch(two_heads_pt2, tmp_path, run_cli,
                                                          saved_by, fragment):
    # Same export schema, an op overload the installed torch lacks: what a newer torch can
    # write. Blamed on the newer torch when the file says it came from one.
    def newer_op(program):
        program["torch_version"] = saved_by
        node = next(n for n in program["graph_module"]["graph"]["nodes"]
                    if n["target"].startswith("torch.ops.aten.conv2d."))
        node["target"] = "torch.ops.aten.conv2d.added_in_a_later_release"

    bad = rewrite_pt2(two_heads_pt2, tmp_path / "newer.pt2", edit=newer_op)
    result = run_cli("inspect", bad)
    assert_user_error(result, fragment)
    assert len(result.stderr) < 600  # torch's own message quotes the whole node
