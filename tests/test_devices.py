"""Device profiles: shipped files validate; a bad file names the file and the field."""

from __future__ import annotations

import pytest

from edgeopt.devices.profile import all_profiles, load_profile, profile_names
from edgeopt.errors import DeviceError

GOOD = """schema_version = 1
name = "my-board"
kind = "npu"
description = "a board"
delegate = "ethos-u"
runtime = "litert"
precision = "int8"
io_dtype = "int8"
formats = ["tflite"]
source = "datasheet"
"""


def test_shipped_profiles_load():
    profiles = all_profiles()
    assert len(profiles) == len(profile_names()) == 10
    for profile in profiles:
        assert profile.source and profile.description


def test_user_profile_file(tmp_path):
    path = tmp_path / "board.toml"
    path.write_text(GOOD)
    assert load_profile(str(path)).name == "my-board"


@pytest.mark.parametrize("edit, field", [
    (lambda s: s.replace('kind = "npu"\n', ""), "kind"),
    (lambda s: s.replace('"npu"', '"fpga"'), "kind"),
    (lambda s: s.replace('formats = ["tflite"]', 'formats = ["pt"]'), "formats"),
    (lambda s: s.replace("schema_version = 1", "schema_version = 2"), "schema_version"),
    (lambda s: s.replace('precision = "int8"', "precision = 8"), "precision"),
])
def test_bad_profile_names_file_and_field(tmp_path, edit, field):
    path = tmp_path / "bad.toml"
    path.write_text(edit(GOOD))
    with pytest.raises(DeviceError) as info:
        load_profile(str(path))
    assert str(path) in str(info.value) and f"'{field}'" in str(info.value)


def test_not_toml(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("name = [unclosed")
    with pytest.raises(DeviceError, match="not valid TOML"):
        load_profile(str(path))
    with pytest.raises(DeviceError, match="not found"):
        load_profile(str(tmp_path / "missing.toml"))
