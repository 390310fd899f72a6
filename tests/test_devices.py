"""Device profiles: shipped files validate, every number has a source, a bad file names
the file and the field, a calibrated profile in the user cache takes precedence."""

from __future__ import annotations

import pytest

from edgeopt.devices.figures import Figure
from edgeopt.devices.profile import all_profiles, load_profile, profile_names
from edgeopt.devices.quantities import QuantityError, parse_quantity
from edgeopt.errors import DeviceError

GOOD = """schema_version = 2
name = "my-board"
kind = "npu"
description = "a board"
delegate = "ethos-u"
runtime = "litert"
precision = "int8"
io_dtype = "int8"
formats = ["tflite"]
source = "datasheet"
main_unit = "npu"

[units.npu]
kind = "npu"
memory = ["sram"]
invoke_overhead = { value = "20 us", source = "datasheet" }
static_power = { value = "0.1 W", source = "datasheet" }
peak_ops.int8 = { value = "1 TOPS", source = "datasheet" }
efficiency.int8 = { source = "guess", default = 0.3, conv = 0.5 }
overhead = { source = "guess", default = "2 us" }
energy_per_op.int8 = { value = "0.5 pJ", source = "datasheet" }

[units.cpu]
kind = "cpu"
memory = ["sram"]
invoke_overhead = { value = "10 us", source = "guess" }
static_power = { value = "0.05 W", source = "guess" }
peak_ops.int8 = { value = "10 GOPS", source = "guess" }
efficiency.int8 = { source = "guess", default = 0.3 }
overhead = { source = "guess", default = "5 us" }
energy_per_op.int8 = { value = "1 pJ", source = "guess" }

[memory.sram]
bandwidth = { value = "4 GB/s", source = "datasheet" }
energy_per_byte = { value = "1 pJ", source = "Horowitz 2014" }

[links.bus]
between = ["cpu", "npu"]
bandwidth = { value = "4 GB/s", source = "datasheet" }
latency = { value = "10 us", source = "guess" }
energy_per_byte = { value = "1 pJ", source = "guess" }

[power]
idle = { value = "0.05 W", source = "datasheet" }
"""


def _figures(obj):
    """Every Figure inside a profile's hardware dataclasses."""
    if isinstance(obj, Figure):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _figures(value)
    elif hasattr(obj, "__dataclass_fields__"):
        for name in obj.__dataclass_fields__:
            yield from _figures(getattr(obj, name))


def test_shipped_profiles_load_and_every_number_has_a_source():
    profiles = all_profiles()
    assert len(profiles) == len(profile_names()) == 17
    for profile in profiles:
        assert profile.source and profile.description
        figures = list(_figures(profile.hardware))
        assert len(figures) > 20, profile.name
        assert all(f.source.strip() for f in figures), profile.name
        main = profile.hardware.unit(profile.hardware.main_unit)
        assert main.peak_ops and profile.hardware.cpu_unit().kind == "cpu"


def test_published_figures_are_in_the_profiles():
    coral = load_profile("coral-usb").hardware
    assert coral.unit("tpu").peak_ops["int8"].value == 4e12
    assert coral.unit("tpu").param_cache.value == 8 * 2 ** 20
    u55 = load_profile("ethos-u55-256").hardware
    assert u55.unit("npu").peak_ops["int8"].value == 256 * 500e6 * 2
    assert u55.memory["sram"].bandwidth.value == 4e9
    assert u55.memory["flash"].bandwidth.value == 0.5e9
    u65 = load_profile("ethos-u65-512").hardware
    assert u65.memory["dram"].bandwidth.value == 3.75e9


def test_user_profile_file(tmp_path):
    path = tmp_path / "board.toml"
    path.write_text(GOOD)
    profile = load_profile(str(path))
    assert profile.name == "my-board"
    assert profile.hardware.unit("npu").peak_ops["int8"].value == 1e12
    assert profile.hardware.unit("npu").efficiency_for("int8", "conv") == 0.5
    assert profile.hardware.unit("npu").efficiency_for("int8", "dense") == 0.3


def test_calibrated_profile_in_the_user_cache_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "edgeopt" / "profiles"
    folder.mkdir(parents=True)
    (folder / "rpi5-cpu.toml").write_text(GOOD.replace('"my-board"', '"rpi5-cpu"'))
    assert load_profile("rpi5-cpu").path == str(folder / "rpi5-cpu.toml")
    assert load_profile("pixel-cpu").path.endswith("profiles/pixel-cpu.toml")


@pytest.mark.parametrize("edit, field, why", [
    (lambda s: s.replace('kind = "npu"\ndescription', 'description'), "'kind'", "missing"),
    (lambda s: s.replace('"npu"\ndescription', '"fpga"\ndescription'), "'kind'", "one of"),
    (lambda s: s.replace('formats = ["tflite"]', 'formats = ["pt"]'), "'formats'", "formats"),
    (lambda s: s.replace("schema_version = 2", "schema_version = 1"), "'schema_version'",
     "must be 2"),
    (lambda s: s.replace('precision = "int8"', "precision = 8"), "'precision'", "must be str"),
    (lambda s: s.replace('"4 GB/s", source = "datasheet" }\nenergy_per_byte = { value = "1 pJ", '
                         'source = "Horowitz', '"-4 GB/s", source = "datasheet" }\n'
                         'energy_per_byte = { value = "1 pJ", source = "Horowitz'),
     "'memory.sram.bandwidth'", "above 0"),
    (lambda s: s.replace('"4 GB/s", source = "datasheet" }\nenergy_per_byte = { value = "1 pJ", '
                         'source = "Horowitz', '"4 GB/sec", source = "datasheet" }\n'
                         'energy_per_byte = { value = "1 pJ", source = "Horowitz'),
     "'memory.sram.bandwidth'", "unknown unit 'GB/sec'"),
    (lambda s: s.replace('main_unit = "npu"', 'main_unit = "gpu"'), "'main_unit'",
     "unknown unit 'gpu'"),
    (lambda s: s.replace('memory = ["sram"]', 'memory = ["l2"]', 1), "'units.npu.memory'",
     "unknown memory level 'l2'"),
    (lambda s: s.replace('between = ["cpu", "npu"]', 'between = ["cpu", "dsp"]'),
     "'links.bus.between'", "unknown unit 'dsp'"),
    (lambda s: s.replace('kind = "npu"\nmemory', 'kind = "fpga"\nmemory'), "'units.npu.kind'",
     "one of"),
    (lambda s: s.replace('{ value = "1 TOPS", source = "datasheet" }', '"1 TOPS"'),
     "'units.npu.peak_ops.int8'", "source"),
    (lambda s: s.replace('static_power = { value = "0.1 W", source = "datasheet" }\n', ''),
     "'units.npu.static_power'", "missing"),
    (lambda s: s.replace("[power]\n", "[power]\nnote = 1\n").replace(
        'idle = { value = "0.05 W", source = "datasheet" }', ""), "'power.idle'", "missing"),
])
def test_bad_profile_names_file_and_field(tmp_path, edit, field, why):
    path = tmp_path / "bad.toml"
    path.write_text(edit(GOOD))
    with pytest.raises(DeviceError) as info:
        load_profile(str(path))
    message = str(info.value)
    assert str(path) in message and field in message and why in message, message


def test_not_toml(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("name = [unclosed")
    with pytest.raises(DeviceError, match="not valid TOML"):
        load_profile(str(path))
    with pytest.raises(DeviceError, match="not found"):
        load_profile(str(tmp_path / "missing.toml"))


@pytest.mark.parametrize("text, quantity, value", [
    ("4 TOPS", "ops", 4e12), ("8 MiB", "bytes", 8 * 2 ** 20), ("68 GB/s", "bandwidth", 68e9),
    ("5 Gbit/s", "bandwidth", 625e6), ("250 us", "time", 250e-6), (3, "count", 3.0),
])
def test_quantities(text, quantity, value):
    assert parse_quantity(text, quantity) == pytest.approx(value)


def test_quantity_errors_say_what_is_allowed():
    with pytest.raises(QuantityError, match="allowed units: W, mW"):
        parse_quantity("2 kW", "power")
    with pytest.raises(QuantityError, match="must be a number"):
        parse_quantity(True, "power")
