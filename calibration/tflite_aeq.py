"""Quantize a float `.tflite` with ai-edge-quantizer (the input is already LiteRT's format).

The first version calibrates with ai-edge-quantizer's own min-max; the calibration core
(issue 3) will hand it our calibration result instead. Integer model IO, where a device
needs it, is set afterwards with LiteRT's model-interface tool.
"""

from __future__ import annotations

import copy
import os
import tempfile

import numpy as np

from edgeopt import tflite_edit
from edgeopt.calibration.tflite_buffers import inline_buffers
from edgeopt.errors import ConversionError, first_line
from edgeopt.model import tflite_interpreter
from edgeopt.runtime import sample_row

# TFLite schema TensorType values accepted by modify_model_interface.
_TENSOR_TYPES = {"float32": 0, "uint8": 3, "int8": 9}


def _signature_samples(float_tflite: bytes, arrays: dict[str, np.ndarray]) -> dict:
    interpreter = tflite_interpreter(float_tflite)
    signatures = interpreter.get_signature_list()
    if not signatures:
        raise ConversionError("the .tflite has no signature; re-export it with a "
                              "serving_default signature to quantize it")
    key, signature = next(iter(signatures.items()))
    names = signature["inputs"]
    values = list(arrays.values()) if set(names) != set(arrays) else [arrays[n] for n in names]
    count = len(values[0])
    samples = [{n: sample_row(v, i) for n, v in zip(names, values)}
               for i in range(count)]
    return {key: samples}


def full_integer(float_tflite: bytes, arrays: dict[str, np.ndarray], io_dtype: str) -> bytes:
    from ai_edge_quantizer import quantizer, recipe

    try:
        qt = quantizer.Quantizer(bytearray(float_tflite), recipe.static_wi8_ai8())
        calibration = qt.calibrate(_signature_samples(float_tflite, arrays), num_threads=2)
        model = bytes(qt.quantize(calibration).quantized_model)
    except (ValueError, RuntimeError, KeyError) as exc:
        first = first_line(exc)
        raise ConversionError(f"ai-edge-quantizer could not quantize the model: {first}") from exc
    return model if io_dtype == "float32" else set_io_dtype(model, io_dtype)


def set_io_dtype(model: bytes, io_dtype: str) -> bytes:
    """Replace float model IO by integer IO (drops the boundary quantize/dequantize ops)."""
    from ai_edge_litert._pywrap_modify_model_interface import modify_model_interface

    code = _TENSOR_TYPES[io_dtype]
    with tempfile.TemporaryDirectory(prefix="edgeopt-io-") as tmp:
        src, dst = os.path.join(tmp, "in.tflite"), os.path.join(tmp, "out.tflite")
        with open(src, "wb") as f:  # the tool drops buffers stored after the flatbuffer
            f.write(inline_buffers(model))
        status = modify_model_interface(src, dst, code, code)
        if status != 0 or not os.path.exists(dst):
            raise ConversionError(f"could not give the int8 model {io_dtype} inputs and outputs")
        with open(dst, "rb") as f:
            return dequantize_for_float_readers(f.read())


def dequantize_for_float_readers(model: bytes) -> bytes:
    """An integer output that float ops of the graph also read (ai-edge-quantizer hands an
    op it keeps float the output's DEQUANTIZE, which the IO change turns into a QUANTIZE to
    the integer IO type) gets a DEQUANTIZE of its own for those readers: without it LiteRT
    refuses the model (basic-pitch's EXPAND_DIMS on coral-usb)."""
    unpacked = tflite_edit.unpack(model)
    if unpacked is None:
        return model
    generated = tflite_edit.schema()
    integer = {generated.TensorType.INT8, generated.TensorType.UINT8}
    changed = False
    for graph in unpacked.subgraphs or []:
        outputs = {int(i) for i in (graph.outputs if graph.outputs is not None else [])}
        kept = []
        for op in list(graph.operators or []):
            kept.append(op)
            produced = [int(i) for i in (op.outputs if op.outputs is not None else [])]
            for out in produced:
                if out not in outputs or graph.tensors[out].type not in integer:
                    continue
                readers = [r for r in graph.operators if r is not op and r.inputs is not None
                           and out in [int(i) for i in r.inputs] and r.outputs is not None
                           and len(r.outputs) and graph.tensors[int(r.outputs[0])].type
                           == generated.TensorType.FLOAT32
                           and tflite_edit.opcode_name(unpacked, r)[0] != "DEQUANTIZE"]
                if not readers:
                    continue
                tensor = copy.deepcopy(graph.tensors[out])
                tensor.name = (tflite_edit.text(tensor.name) + "/float").encode()
                tensor.type, tensor.quantization, tensor.buffer = \
                    generated.TensorType.FLOAT32, None, 0
                graph.tensors.append(tensor)
                dequantize = generated.OperatorT()
                dequantize.opcodeIndex = tflite_edit.opcode_index(unpacked, "DEQUANTIZE", 2)
                dequantize.inputs, dequantize.outputs = [out], [len(graph.tensors) - 1]
                kept.append(dequantize)
                for reader in readers:
                    reader.inputs = [len(graph.tensors) - 1 if int(i) == out else int(i)
                                     for i in reader.inputs]
                changed = True
        graph.operators = kept
    return tflite_edit.pack(unpacked) if changed else model
