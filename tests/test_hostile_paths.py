""".keras archives and model files made to reach outside their folder, or to exhaust memory:
refused with a reason before Keras (or onnx) opens them, and nothing written anywhere."""

from __future__ import annotations

import os
import stat
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_user_error
from edgeopt.errors import ModelLoadError
from edgeopt.keras_archive import MAX_MEMBER_BYTES, check_keras_archive
from edgeopt.model import load_model


def _members(keras_path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(keras_path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _repack(target: Path, members: dict[str, bytes], extra: list[zipfile.ZipInfo] = (),
            payloads: list[bytes] = (), compression=zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(target, "w", compression) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
        for info, payload in zip(extra, payloads):
            archive.writestr(info, payload)
    return target


def _info(name: str, mode: int = stat.S_IFREG | 0o644) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = mode << 16
    return info


def _nothing_escaped(root: Path) -> None:
    assert not list(root.rglob("pwned*")), "a member was written outside its folder"
    assert not Path("/tmp/pwned.txt").exists()


@pytest.mark.parametrize("name, reason", [
    ("../pwned.txt", "climbs out"),
    ("assets/../../pwned.txt", "climbs out"),
    ("assets\\..\\..\\pwned.txt", "climbs out"),
    ("/tmp/pwned.txt", "absolute path"),
    ("C:/pwned.txt", "absolute path"),
    ("assets/pwned\nnewline.txt", "control characters"),
])
def test_members_that_leave_the_archive_are_refused(tmp_path, tiny_keras_path, name, reason):
    path = _repack(tmp_path / "m.keras", _members(tiny_keras_path), [_info(name)], [b"x"])
    with pytest.raises(ModelLoadError, match=reason):
        load_model(path)
    _nothing_escaped(tmp_path)


def test_symlink_member_is_refused(tmp_path, tiny_keras_path):
    link = _info("assets/passwd", stat.S_IFLNK | 0o777)
    path = _repack(tmp_path / "m.keras", _members(tiny_keras_path), [link], [b"/etc/passwd"])
    with pytest.raises(ModelLoadError, match="'assets/passwd' is a symbolic link"):
        load_model(path)


def test_fifo_member_is_refused(tmp_path, tiny_keras_path):
    fifo = _info("assets/pipe", stat.S_IFIFO | 0o644)
    path = _repack(tmp_path / "m.keras", _members(tiny_keras_path), [fifo], [b""])
    with pytest.raises(ModelLoadError, match="special file"):
        check_keras_archive(path)


def test_member_outside_the_keras_format_is_refused(tmp_path, tiny_keras_path):
    path = _repack(tmp_path / "m.keras", _members(tiny_keras_path), [_info("run_me.py")],
                   [b"import os; os.system('touch pwned')"])
    with pytest.raises(ModelLoadError, match="'run_me.py' is not part of the Keras format"):
        load_model(path)


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_duplicate_config_is_refused(tmp_path, tiny_keras_path):
    members = _members(tiny_keras_path)
    path = _repack(tmp_path / "m.keras", members, [_info("config.json")], [b'{"x": 1}'])
    with pytest.raises(ModelLoadError, match="appears more than once"):
        load_model(path)




def test_zip_bomb_is_refused_before_it_is_expanded(tmp_path, tiny_keras_path):
    members = _members(tiny_keras_path)
    members["model.weights.h5"] = bytes(64 * 1024 ** 2)  # deflates about 1000-fold
    path = _repack(tmp_path / "bomb.keras", members, compression=zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 1024 ** 2
    with pytest.raises(ModelLoadError, match=r"model.weights.h5' expands [\d,]+-fold"):
        load_model(path)


def _patch_directory(path: Path, member: str, offset: int, fmt: str, value: int) -> None:
    """Rewrite one field of a member's central-directory entry (what zipfile trusts)."""
    data = bytearray(path.read_bytes())
    name = member.encode()
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        name_len = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46:at + 46 + name_len] == name:
            struct.pack_into(fmt, data, at + offset, value)
        at = data.find(b"PK\x01\x02", at + 4)
    path.write_bytes(bytes(data))


def _declare_size(path: Path, member: str, size: int) -> None:
    _patch_directory(path, member, 24, "<I", size)  # uncompressed size


def test_encrypted_member_is_refused(tmp_path, tiny_keras_path):
    path = _repack(tmp_path / "m.keras", _members(tiny_keras_path))
    _patch_directory(path, "model.weights.h5", 8, "<H", 0x1)  # general purpose flags
    with pytest.raises(ModelLoadError, match="encrypted"):
        load_model(path)


def test_oversized_member_is_refused_from_its_declared_size(tmp_path, tiny_keras_path):
    path = _repack(tmp_path / "huge.keras", _members(tiny_keras_path))
    _declare_size(path, "model.weights.h5", MAX_MEMBER_BYTES + 4096)
    with pytest.raises(ModelLoadError, match="over the limit of 2,048.0 MiB"):
        load_model(path)


def test_oversized_config_is_refused(tmp_path, tiny_keras_path):
    path = _repack(tmp_path / "cfg.keras", _members(tiny_keras_path))
    _declare_size(path, "config.json", 512 * 1024 ** 2)
    with pytest.raises(ModelLoadError, match="'config.json' declares 512.0 MiB"):
        load_model(path)


def test_lambda_layer_is_refused_with_its_name(tmp_path):
    import keras

    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(3, name="dense_in")(inputs)
    outputs = keras.layers.Lambda(lambda x: x * 2, name="scale_by_two")(hidden)
    path = tmp_path / "lambda.keras"
    keras.Model(inputs, outputs).save(path)
    with pytest.raises(ModelLoadError, match="layer 'scale_by_two' is a Lambda layer"):
        load_model(path)


def test_deflated_archive_of_a_good_model_still_loads(tmp_path, tiny_keras_path):
    path = _repack(tmp_path / "deflated.keras", _members(tiny_keras_path),
                   compression=zipfile.ZIP_DEFLATED)
    assert load_model(path).inputs[0].shape == (-1, 16, 16, 3)


def test_hostile_archive_through_the_cli_is_one_line_and_writes_nothing(run_cli, tmp_path,
                                                                        tiny_keras_path):
    path = _repack(tmp_path / "m.keras", _members(tiny_keras_path),
                   [_info("assets/../../pwned.txt")], [b"x"])
    out = tmp_path / "out"
    assert_user_error(run_cli("build", path, "--calib", "random", "-o", out), "climbs out")
    assert_user_error(run_cli("inspect", path), "climbs out")
    assert not out.exists()
    _nothing_escaped(tmp_path)


# --- ONNX external data: the cases test_model.py does not cover --------------------------

def _external(tmp_path: Path, tiny_onnx_path: Path, location: str) -> Path:
    from test_model import _with_external_data

    return _with_external_data(tmp_path, tiny_onnx_path, location)


def test_external_data_through_a_symlinked_folder_is_refused(tmp_path, tiny_onnx_path):
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "w.bin").write_bytes(b"\0" * 4096)
    path = _external(tmp_path, tiny_onnx_path, "data/w.bin")
    os.symlink(tmp_path / "secret", path.parent / "data")
    with pytest.raises(ModelLoadError, match="outside the model's folder"):
        load_model(path)


def test_external_data_naming_a_fifo_does_not_hang(tmp_path, tiny_onnx_path):
    path = _external(tmp_path, tiny_onnx_path, "w.bin")
    os.mkfifo(path.parent / "w.bin")
    with pytest.raises(ModelLoadError, match="'w.bin' is missing"):
        load_model(path)


def test_external_data_naming_the_folder_itself_is_refused(tmp_path, tiny_onnx_path):
    path = _external(tmp_path, tiny_onnx_path, ".")
    with pytest.raises(ModelLoadError, match="outside the model's folder"):
        load_model(path)


# --- image folders: hostile names are just names ----------------------------------------

HOSTILE_NAMES = ["a b.png", "it's.png", "x;touch pwned.png", "$(touch pwned).png",
                 "new\nline.png", "-rf.png", "--calib.png", "`id`.png"]


def test_image_folder_with_hostile_names(tmp_path):
    from PIL import Image

    from edgeopt.data import load_dataset
    from edgeopt.model import TensorSpec

    folder = tmp_path / "images"
    rng = np.random.default_rng(0)
    for i, name in enumerate(HOSTILE_NAMES):
        label = "-0 class" if i % 2 else "$(cls)"
        (folder / label).mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / label / name, format="PNG")
    data = load_dataset(str(folder), (TensorSpec("x", (-1, 8, 8, 3), "float32"),))
    assert data.count == len(HOSTILE_NAMES) and sorted(set(data.labels)) == [0, 1]
    _nothing_escaped(tmp_path)
    assert not list(Path.cwd().glob("pwned*"))


def test_image_folder_with_a_fifo_is_an_error_not_a_hang(tmp_path):
    from PIL import Image

    from edgeopt.data import load_dataset
    from edgeopt.errors import DataError
    from edgeopt.model import TensorSpec

    folder = tmp_path / "images"
    folder.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(folder / "a.png")
    os.mkfifo(folder / "b.png")
    with pytest.raises(DataError, match="b.png is not a regular file"):
        load_dataset(str(folder), (TensorSpec("x", (-1, 8, 8, 3), "float32"),))
