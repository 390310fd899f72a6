"""Loading a real delegate library through LiteRT's load_delegate, and every way it fails."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from test_delegates_models import models

from edgeopt.delegates import interpreter_with_delegate, load_external_delegate
from edgeopt.errors import DeviceError

# A minimal external delegate: it claims no ops (Prepare does nothing), and refuses an
# option named "fail" through the error callback, as a real delegate refuses bad options.
FAKE_DELEGATE_C = r"""
#include <stddef.h>
#include <stdint.h>
typedef struct { void* data; int (*prepare)(void*, void*); void* copy_from; void* copy_to;
                 void* free_handle; int64_t flags; void* builder; } Delegate;
static int prepare(void* context, void* delegate) { return 0; }
static Delegate the_delegate = {0, prepare, 0, 0, 0, 0, 0};
void* tflite_plugin_create_delegate(char** keys, char** values, size_t n,
                                    void (*report)(const char*)) {
  for (size_t i = 0; i < n; i++) {
    if (keys[i][0] == 'f') { report("option 'fail' refused"); return NULL; }
  }
  return &the_delegate;
}
void tflite_plugin_destroy_delegate(void* delegate) {}
"""


@pytest.fixture(scope="module")
def fake_delegate(tmp_path_factory):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build a test delegate")
    folder = tmp_path_factory.mktemp("delegate")
    (folder / "fake.c").write_text(FAKE_DELEGATE_C)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(folder / "libfake.so"),
                    str(folder / "fake.c")], check=True)
    return folder / "libfake.so"


def test_a_delegate_library_loads_and_runs_a_model(fake_delegate):
    delegate = load_external_delegate(fake_delegate, {"verbose": 1})
    interpreter = interpreter_with_delegate(models()["cnn_int8"], delegate)
    interpreter.invoke()
    assert interpreter.get_output_details()[0]["shape"].tolist() == [1, 4]


def test_refused_options_are_a_device_error(fake_delegate):
    with pytest.raises(DeviceError, match="option 'fail' refused"):
        load_external_delegate(fake_delegate, {"fail": "yes"})


@pytest.mark.parametrize("library, message", [
    ("/nonexistent/libedgetpu.so.1", "not found"),
    ("libedgetpu_not_installed.so.1", "dynamic loader cannot find it"),
])
def test_missing_library(library, message):
    with pytest.raises(DeviceError, match=message):
        load_external_delegate(library)


def test_a_folder_or_a_model_file_is_not_a_delegate(tmp_path):
    with pytest.raises(DeviceError, match="is not a file"):
        load_external_delegate(tmp_path)
    model = tmp_path / "m.tflite"
    model.write_bytes(models()["cnn_int8"])
    with pytest.raises(DeviceError, match="cannot be loaded"):
        load_external_delegate(model)


def test_a_shared_library_without_the_delegate_interface():
    with pytest.raises(DeviceError, match="not a TFLite external delegate"):
        load_external_delegate("libm.so.6")
