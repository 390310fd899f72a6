"""The report's Data section in words: where the samples came from, how many, whether they
had labels, and what the app must do to an input (preprocessing, layout).

    >>> rows = data_rows(manifest)
    >>> rows[0]
    ('calibration', 'digits_calib.npz: 200 samples')

Layouts are named from the shapes the artifact really takes, not from the source model:
an ONNX model's NCHW input is NHWC in the `.tflite` that onnx2tf wrote.
"""

from __future__ import annotations

import html
import re

IMAGE_CHANNELS = (1, 3, 4)
_TRANSPOSED = re.compile(r"^'(?P<name>.+)' transposed (?P<given>N\w+) to (?P<model>N\w+)$")


def _e(value) -> str:
    return html.escape(str(value))


def tensor_layout(shape) -> str | None:
    """NHWC or NCHW for a 4-D image-like shape, None when neither axis says so."""
    if len(shape) != 4:
        return None
    last, first = shape[3] in IMAGE_CHANNELS, shape[1] in IMAGE_CHANNELS
    if last != first:
        return "NHWC" if last else "NCHW"
    return None


def _numbers(values) -> str:
    return ", ".join(f"{v:g}" for v in values)


def _samples(source: str, count: int) -> str:
    return f"{source}: {count} sample{'s' if count != 1 else ''}"


def _source_rows(m: dict) -> list[tuple[str, str]]:
    d = m["data"]
    calib = _samples(d["calibration"], d["calibration_samples"])
    if not d.get("representative", True):
        calib += " (random inputs, not representative: the accuracy figures mean nothing)"
    labels = ("yes: accuracy is measured against them" if d.get("labels") else
              "none: the float model's top-1 is the reference (agreement)")
    return [("calibration", _e(calib)),
            ("evaluation", _e(_samples(d["evaluation"], d["evaluation_samples"]))),
            ("labels", _e(labels))]


def _preprocessing_text(prep: dict) -> str:
    source = prep.get("source")
    if source == "random":
        return "none: random inputs"
    if source == "images":
        height, width = prep["resize"]
        fit = (f"scaled to cover {width}×{height} and centre-cropped"
               if str(prep.get("resize_mode", "")).startswith("cover")
               else f"resized to {width}×{height}")
        colour = "grayscale" if prep["color"] == "grayscale" else "RGB"
        return (f"images {fit}, {colour}, normalised as (pixel − {_numbers(prep['mean'])}) / "
                f"{_numbers(prep['std'])} on 0..255 pixels, fed {prep['layout']}")
    text = "arrays used as given"
    app = prep.get("app_normalization")
    if app:
        text += (f"; the app normalises as (value − {_numbers(app['mean'])}) / "
                 f"{_numbers(app['std'])} (--mean/--std)")
    return text


def _layout_text(tensor: dict, m: dict, given: dict[str, tuple[str, str]]) -> str:
    name, fmt = tensor["name"], m["model"]["format"]
    shape = list(tensor["shape"])
    layout = tensor_layout(shape)
    text = f"the .{fmt} artifact takes {layout + ' ' if layout else ''}{shape}"
    changes = (m.get("conversion") or {}).get("input_layout_changes") or {}
    source_layout = None
    if name in changes and layout:
        source_layout = "NCHW" if layout == "NHWC" else "NHWC"
        text += (f"; the {m['source']['format']} source takes {source_layout}, the conversion "
                 f"moved it to {layout}")
    if name in given:
        data_layout, model_layout = given[name]
        text += (f"; the data was given {data_layout} and transposed to the source model's "
                 f"{model_layout}")
    return text


def data_rows(m: dict) -> list[tuple[str, str]]:
    """(label, HTML) rows of the Data section."""
    notes = m["data"].get("layout_notes") or []
    given, other = {}, []
    for note in notes:
        match = _TRANSPOSED.match(note)
        if match:
            given[match["name"]] = (match["given"], match["model"])
        else:
            other.append(note)
    rows = _source_rows(m)
    if m.get("labels"):
        names = m["labels"]["names"]
        shown = ", ".join(names[:10]) + (", …" if len(names) > 10 else "")
        rows.append(("class names", _e(f"{len(names)} from {m['labels']['source']}: {shown}")))
    rows.append(("preprocessing", _e(_preprocessing_text(m.get("preprocessing") or {}))))
    for tensor in m["inputs"]:
        rows.append((f"input <code>{_e(tensor['name'])}</code>",
                     _e(_layout_text(tensor, m, given))))
    if other:
        rows.append(("read", _e("; ".join(other))))
    return rows
