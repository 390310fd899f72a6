"""TFLite metadata in every .tflite edgeopt writes, read back by readers that are not ours.

The readers are MediaPipe's: the Python classes that flatc generated from the official
`metadata_schema.fbs` and `schema.fbs` (shipped in the `mediapipe` wheel), and MediaPipe's
C++ ImageClassifier, whose metadata extractor is the one the Task Library uses: it needs
the normalization to accept a float image model and names classes from the label file.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_user_error, tiny_cnn
from edgeopt.errors import DataError
from edgeopt.tflite_metadata import (
    MetadataSpec,
    Normalization,
    embed_metadata,
    folder_class_names,
    read_labels,
)

LABELS = ("bird", "cat", "dog", "fish")
MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)
SPEC = MetadataSpec(name="tiny", description="A 4-class test classifier.",
                    normalization=Normalization(MEAN, STD), labels=LABELS,
                    input_names=("image",), output_names=("probs",))


# --- independent readers --------------------------------------------------------------

def read_metadata(tflite: bytes):
    """(Model, ModelMetadataT, metadata entry names) with MediaPipe's generated classes."""
    from mediapipe.tasks.metadata import metadata_schema_py_generated as meta_fb
    from mediapipe.tasks.metadata import schema_py_generated as model_fb

    model = model_fb.Model.GetRootAs(tflite, 0)
    entries = {model.Metadata(i).Name().decode(): model.Metadata(i).Buffer()
               for i in range(model.MetadataLength())}
    if "TFLITE_METADATA" not in entries:
        return model, None, entries
    buffer = model.Buffers(entries["TFLITE_METADATA"]).DataAsNumpy().tobytes()
    assert meta_fb.ModelMetadata.ModelMetadataBufferHasIdentifier(buffer, 0)  # "M001"
    return model, meta_fb.ModelMetadataT.InitFromPackedBuf(buffer, 0), entries


def litert_outputs(tflite: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=tflite)
    interpreter.allocate_tensors()
    detail, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    results = []
    for x in inputs:
        interpreter.set_tensor(detail["index"], x.astype(detail["dtype"]))
        interpreter.invoke()
        results.append(interpreter.get_tensor(out["index"]).copy())
    return results


# --- models built in the test ------------------------------------------------------------

def _converter():
    import tensorflow as tf

    return tf.lite.TFLiteConverter.from_keras_model(tiny_cnn(classes=4))


@pytest.fixture(scope="module")
def float_tflite() -> bytes:
    return _converter().convert()


@pytest.fixture(scope="module")
def int8_tflite() -> bytes:
    import tensorflow as tf

    converter = _converter()
    rng = np.random.default_rng(0)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: (
        [rng.random((1, 16, 16, 3), dtype=np.float32) * 4 - 2] for _ in range(8))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    return converter.convert()


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory) -> Path:
    """Four class folders of seeded 16x16 RGB PNGs."""
    from PIL import Image

    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(3)
    for name in LABELS:
        (root / name).mkdir()
        for i in range(6):
            pixels = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


# --- the metadata itself ----------------------------------------------------------------

def test_every_field_reads_back_with_the_official_schema(float_tflite):
    from mediapipe.tasks.metadata import metadata_schema_py_generated as meta_fb

    shipped = embed_metadata(float_tflite, SPEC)
    _, meta, entries = read_metadata(shipped)
    assert {"min_runtime_version", "TFLITE_METADATA"} <= set(entries)  # converter's kept
    assert (meta.name, meta.description) == (b"tiny", b"A 4-class test classifier.")
    assert meta.minParserVersion == b"1.0.0"
    [subgraph] = meta.subgraphMetadata
    [image], [probs] = subgraph.inputTensorMetadata, subgraph.outputTensorMetadata

    assert image.name == b"image" and b"RGB image 16x16" in image.description
    assert image.content.contentPropertiesType == meta_fb.ContentProperties.ImageProperties
    props = image.content.contentProperties
    assert props.colorSpace == meta_fb.ColorSpaceType.RGB
    assert (props.defaultSize.width, props.defaultSize.height) == (16, 16)
    [unit] = image.processUnits
    assert unit.optionsType == meta_fb.ProcessUnitOptions.NormalizationOptions
    np.testing.assert_allclose(unit.options.mean, MEAN, rtol=1e-6)
    np.testing.assert_allclose(unit.options.std, STD, rtol=1e-6)
    np.testing.assert_allclose(image.stats.min, -np.array(MEAN) / STD, rtol=1e-6)
    np.testing.assert_allclose(image.stats.max, (255 - np.array(MEAN)) / STD, rtol=1e-6)

    assert probs.name == b"probs" and b"softmax" in probs.description
    [labels] = probs.associatedFiles
    assert labels.name == b"labels.txt"
    assert labels.type == meta_fb.AssociatedFileType.TENSOR_AXIS_LABELS
    assert (list(probs.stats.min), list(probs.stats.max)) == ([0.0], [1.0])
    with zipfile.ZipFile(io.BytesIO(shipped)) as archive:  # the file is also a valid zip
        assert archive.namelist() == ["labels.txt"]
        assert archive.getinfo("labels.txt").compress_type == zipfile.ZIP_STORED
        assert archive.read("labels.txt").decode().splitlines() == list(LABELS)


def test_quantization_parameters_are_described_and_stats_are_in_the_tensor_domain(
        int8_tflite):
    from ai_edge_litert.interpreter import Interpreter

    shipped = embed_metadata(int8_tflite, SPEC)
    _, meta, _ = read_metadata(shipped)
    [image] = meta.subgraphMetadata[0].inputTensorMetadata
    [probs] = meta.subgraphMetadata[0].outputTensorMetadata
    interpreter = Interpreter(model_content=shipped)
    (in_scale, in_zp), = [d["quantization"] for d in interpreter.get_input_details()]
    (out_scale, out_zp), = [d["quantization"] for d in interpreter.get_output_details()]
    for tensor, scale, zp in ((image, in_scale, in_zp), (probs, out_scale, out_zp)):
        text = tensor.description.decode()
        assert f"scale {scale:.8g}" in text and f"zero point {zp}" in text, text
    # pixels 0 and 255, normalised, then quantized with the input's own parameters
    low = np.clip(np.round(-np.array(MEAN) / STD / in_scale) + in_zp, -128, 127)
    high = np.clip(np.round((255 - np.array(MEAN)) / STD / in_scale) + in_zp, -128, 127)
    np.testing.assert_array_equal(image.stats.min, low)
    np.testing.assert_array_equal(image.stats.max, high)
    assert (list(probs.stats.min), list(probs.stats.max)) == ([-128.0], [127.0])


@pytest.mark.parametrize("which", ["float_tflite", "int8_tflite"])
def test_the_model_runs_unchanged_in_litert(which, request):
    plain = request.getfixturevalue(which)
    shipped = embed_metadata(plain, SPEC)
    rng = np.random.default_rng(5)
    samples = [rng.normal(0, 1, (1, 16, 16, 3)) * (1 if which == "float_tflite" else 60)
               for _ in range(4)]
    for before, after in zip(litert_outputs(plain, samples), litert_outputs(shipped, samples)):
        np.testing.assert_array_equal(before, after)


def test_weights_stay_on_16_byte_boundaries(float_tflite):
    model, _, _ = read_metadata(embed_metadata(float_tflite, SPEC))
    starts = []
    for i in range(model.BuffersLength()):
        table = model.Buffers(i)._tab
        field = table.Offset(4)  # Buffer.data
        if field and table.VectorLen(field):
            starts.append(table.Vector(field))
    assert starts and all(start % 16 == 0 for start in starts)


def test_embedding_again_replaces_the_metadata_and_its_files(float_tflite):
    once = embed_metadata(float_tflite, SPEC)
    renamed = ("sparrow", "tabby", "terrier", "trout")
    twice = embed_metadata(once, MetadataSpec(name="again", description="second",
                                              labels=renamed))
    model, meta, entries = read_metadata(twice)
    names = [model.Metadata(i).Name() for i in range(model.MetadataLength())]
    assert names.count(b"TFLITE_METADATA") == 1 and meta.name == b"again"
    assert meta.subgraphMetadata[0].inputTensorMetadata[0].processUnits is None  # no guess
    with zipfile.ZipFile(io.BytesIO(twice)) as archive:
        assert archive.read("labels.txt").decode().split() == list(renamed)
    assert len(twice) < len(once) + 200  # the old zip is not carried along


def test_mediapipe_image_classifier_uses_the_normalization_and_the_labels(float_tflite):
    import mediapipe as mp
    from mediapipe.tasks.python import BaseOptions, vision

    def classifier(model: bytes):
        options = vision.ImageClassifierOptions(
            base_options=BaseOptions(model_asset_buffer=model), max_results=4)
        return vision.ImageClassifier.create_from_options(options)

    with pytest.raises(Exception, match="NormalizationOptions"):
        classifier(float_tflite)  # without metadata MediaPipe cannot feed a float model
    # MediaPipe takes one mean and std for all channels (the Task Library takes three)
    spec = MetadataSpec(name="tiny", description="test", labels=LABELS,
                        normalization=Normalization((127.5,), (127.5,)))
    shipped = embed_metadata(float_tflite, spec)
    pixels = np.random.default_rng(7).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    with classifier(shipped) as task:
        result = task.classify(mp.Image(image_format=mp.ImageFormat.SRGB, data=pixels))
    scores = {c.category_name: c.score for c in result.classifications[0].categories}
    [expected] = litert_outputs(shipped, [((pixels - 127.5) / 127.5)[None]])
    assert set(scores) == set(LABELS)
    np.testing.assert_allclose([scores[name] for name in LABELS], expected[0], atol=1e-5)


# --- labels -----------------------------------------------------------------------------

def test_label_files_and_class_folders(tmp_path, image_folder, float_tflite):
    (tmp_path / "labels.txt").write_text("a\nb\n\n")
    assert read_labels(tmp_path / "labels.txt") == ("a", "b")
    (tmp_path / "empty.txt").write_text("\n")
    for path, fragment in ((tmp_path / "none.txt", "not found"), (tmp_path / "empty.txt",
                                                                   "is empty")):
        with pytest.raises(DataError, match=fragment):
            read_labels(path)
    assert folder_class_names(str(image_folder)) == LABELS
    for digit in ("0", "2"):
        (tmp_path / "digits" / digit).mkdir(parents=True)
    assert folder_class_names(str(tmp_path / "digits")) == ("0", "1", "2")
    with pytest.raises(DataError, match="2 labels but no model output has 2 classes"):
        embed_metadata(float_tflite, MetadataSpec(name="x", description="y",
                                                  labels=("a", "b")))
    loose = MetadataSpec(name="x", description="y", labels=("a", "b"), labels_optional=True)
    _, meta, _ = read_metadata(embed_metadata(float_tflite, loose))
    assert meta.subgraphMetadata[0].outputTensorMetadata[0].associatedFiles is None


# --- the commands that write a .tflite -------------------------------------------------------

@pytest.fixture(scope="module")
def keras_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("keras") / "pets.keras"
    tiny_cnn(classes=4).save(path)
    return path


def test_build_ships_the_metadata_it_validated_and_vela_keeps_it(keras_model, image_folder,
                                                                 tmp_path, run_cli):
    result = run_cli("build", keras_model, "--device", "ethos-u55-256", "--calib",
                     image_folder, "--mean", "127.5", "--std", "127.5", "-o",
                     tmp_path / "dist", "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((tmp_path / "dist" / "manifest.json").read_text())
    shipped = (tmp_path / "dist" / manifest["model"]["file"]).read_bytes()
    assert manifest["model"]["sha256"] == hashlib.sha256(shipped).hexdigest()
    assert manifest["model"]["size_bytes"] == len(shipped)
    _, meta, _ = read_metadata(shipped)
    assert meta.name == b"pets" and b"ethos-u55-256" in meta.description
    [image] = meta.subgraphMetadata[0].inputTensorMetadata
    assert list(image.processUnits[0].options.mean) == [127.5]
    assert image.description.decode().startswith("RGB image 16x16")
    assert f"zero point {manifest['inputs'][0]['quantization']['zero_point']}" in \
        image.description.decode()
    with zipfile.ZipFile(io.BytesIO(shipped)) as archive:  # class folders named the labels
        assert archive.read("labels.txt").decode().split() == list(LABELS)

    compiled = manifest["compiled"]
    vela = (tmp_path / "dist" / compiled["file"]).read_bytes()
    assert compiled["sha256"] == hashlib.sha256(vela).hexdigest()
    _, vela_meta, entries = read_metadata(vela)
    assert "OfflineMemoryAllocation" in entries and vela_meta.name == b"pets"
    with zipfile.ZipFile(io.BytesIO(vela)) as archive:  # the label file it names is there
        assert archive.read("labels.txt").decode().split() == list(LABELS)


def test_quantize_writes_metadata_and_reports_the_final_size(keras_model, image_folder,
                                                            tmp_path, run_cli):
    labels = tmp_path / "names.txt"
    labels.write_text("".join(f"class {n}\n" for n in LABELS))
    out = tmp_path / "pets_int8.tflite"
    result = run_cli("quantize", keras_model, "--calib", image_folder, "--labels", labels,
                     "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["size_bytes"] == out.stat().st_size
    _, meta, _ = read_metadata(out.read_bytes())
    assert meta.name == b"pets" and b"w8a8" in meta.description
    assert list(meta.subgraphMetadata[0].inputTensorMetadata[0].processUnits[0].options.std) \
        == [255.0]
    with zipfile.ZipFile(out) as archive:
        assert archive.read("labels.txt").decode().splitlines()[0] == "class bird"


def test_a_tflite_input_keeps_its_own_label_file(float_tflite, tmp_path, run_cli):
    source = tmp_path / "with_labels.tflite"
    source.write_bytes(embed_metadata(float_tflite, SPEC))
    out = tmp_path / "quantized.tflite"
    result = run_cli("quantize", source, "--calib", "random", "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    _, meta, _ = read_metadata(out.read_bytes())
    assert meta.name == b"with_labels"
    with zipfile.ZipFile(out) as archive:
        assert archive.read("labels.txt").decode().split() == list(LABELS)


def test_convert_writes_metadata_and_a_bad_label_file_is_one_error(keras_model, image_folder,
                                                                  tmp_path, run_cli):
    out = tmp_path / "pets_float.tflite"
    result = run_cli("convert", keras_model, "-o", out, "--calib", image_folder, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["size_bytes"] == out.stat().st_size
    _, meta, _ = read_metadata(out.read_bytes())
    assert b"converted from pets.keras" in meta.description
    [image] = meta.subgraphMetadata[0].inputTensorMetadata
    assert (list(image.processUnits[0].options.mean), list(image.stats.max)) == ([0.0], [1.0])

    wrong = tmp_path / "three.txt"
    wrong.write_text("a\nb\nc\n")
    bad = tmp_path / "bad.tflite"
    assert_user_error(run_cli("convert", keras_model, "-o", bad, "--labels", wrong),
                      "3 labels but no model output has 3 classes")
    assert not bad.exists()


def test_build_refuses_a_missing_label_file_before_converting(keras_model, image_folder,
                                                              tmp_path, run_cli):
    result = run_cli("build", keras_model, "--calib", image_folder, "--labels",
                     tmp_path / "missing.txt", "-o", tmp_path / "dist")
    assert_user_error(result, "label file not found")
    assert "converting" not in result.stderr and not (tmp_path / "dist").exists()


def _input_normalization(tflite: bytes) -> tuple[list[float], list[float]]:
    _, meta, _ = read_metadata(tflite)
    options = meta.subgraphMetadata[0].inputTensorMetadata[0].processUnits[0].options
    return list(options.mean), list(options.std)


def test_build_and_quantize_write_the_same_normalization_for_the_same_flags(
        keras_model, tmp_path, run_cli):
    """Drift: build filled a missing --std with 1.0, quantize with 255 (the documented
    default), so the same flags gave two different NormalizationOptions."""
    data = tmp_path / "arrays.npz"
    np.savez(data, image=np.random.default_rng(5).random((12, 16, 16, 3), dtype=np.float32))
    flags = ("--calib", data, "--mean", "127.5", "--json")
    built = run_cli("build", keras_model, "--device", "host-cpu", *flags, "-o", tmp_path / "d")
    assert built.exit_code == 0, built.stderr
    quantized = run_cli("quantize", keras_model, *flags, "-o", tmp_path / "q.tflite")
    assert quantized.exit_code == 0, quantized.stderr
    from_build = _input_normalization((tmp_path / "d" / "pets.tflite").read_bytes())
    from_quantize = _input_normalization((tmp_path / "q.tflite").read_bytes())
    assert from_build == from_quantize == ([127.5], [255.0])
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["preprocessing"]["app_normalization"] == {"mean": [127.5], "std": [255.0]}
