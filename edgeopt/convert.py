"""`edgeopt convert`: any supported model -> float `.tflite`, checked for parity."""

from __future__ import annotations

import tempfile
from pathlib import Path

from edgeopt.atomic import check_output_path, write_file_atomic
from edgeopt.converters.float_tflite import FloatConversion, to_float_tflite
from edgeopt.converters.onnx_adapt import adapt_onnx, adaptation_notes
from edgeopt.converters.onnx_pin import held_inputs
from edgeopt.converters.parity import check_parity
from edgeopt.data import DataSpec, load_data, shapes_from_data
from edgeopt.errors import ConversionError
from edgeopt.model import load_model, with_input_shapes
from edgeopt.runtime import LayoutAdapter, TFLiteRunner, make_runner, run_dataset
from edgeopt.tflite_metadata import check_labels_file, converted_with_metadata
from edgeopt.torch_program import ProgramRunner

PARITY_SAMPLES = 16


def convert_to_file(model: str, output: Path, samples: str = "random",
                    progress=lambda _msg: None, labels: str | None = None,
                    input_shapes: tuple[str, ...] = (),
                    input_values: tuple[str, ...] = (), torch_route: str = "onnx") -> dict:
    """Convert `model` to a float `.tflite` at `output`; returns the conversion record.
    `input_shapes` (--input-shape) fix dynamic dimensions; else the data's shape does.
    A .pt2 by `torch_route` litert is litert-torch's .tflite, checked against PyTorch."""
    check_output_path(output)
    handle, values = held_inputs(with_input_shapes(load_model(model, torch_route),
                                                   input_shapes), input_values)
    if handle.format == "tflite" and handle.torch is None:
        raise ConversionError(f"{model} already is a .tflite model")
    check_labels_file(labels, handle)
    data = load_data(DataSpec(samples, calib_role="sample"), handle.inputs, hold_out=False)[0]
    handle, data, fixed = shapes_from_data(handle, data)
    handle = adapt_onnx(handle, values, data.arrays)
    for note in fixed + adaptation_notes(handle):
        progress(note)
    data = data.take(slice(0, PARITY_SAMPLES))
    by_litert = handle.torch is not None and handle.format == "tflite"
    progress(f"running the {'PyTorch' if by_litert else handle.format} model on "
             f"{data.count} samples")
    reference = run_dataset(ProgramRunner(handle.torch.program) if by_litert
                            else make_runner(handle), data.arrays)
    if by_litert:  # litert-torch's .tflite is the conversion (NCHW kept, as it writes it)
        conv = FloatConversion(handle.tflite_bytes(), None, {}, (None,) * len(handle.outputs),
                               handle.torch.exporter)
    else:
        with tempfile.TemporaryDirectory(prefix="edgeopt-convert-") as tmp:
            progress("converting to float .tflite")
            conv = to_float_tflite(handle, Path(tmp), data.arrays)
    tflite = converted_with_metadata(conv.tflite, handle, conv.converter, data, labels)
    runner = LayoutAdapter(TFLiteRunner(tflite, [s.name for s in handle.inputs]),
                           conv.input_perms, conv.output_perms, handle.outputs)
    parity = check_parity(reference, run_dataset(runner, data.arrays), conv.converter)
    write_file_atomic(output, tflite)
    shown = model if handle.adaptation or by_litert else str(handle.path)  # the user's file
    return {"model": shown, "output": str(output), "converter": conv.converter,
            "size_bytes": len(tflite), "parity": parity.to_json(),
            "parity_data": data.source, "warnings": list(data.warnings),
            "input_shapes": {s.name: list(s.shape) for s in handle.inputs},
            **({"onnx_rewrite": handle.adaptation} if handle.adaptation else {})}
