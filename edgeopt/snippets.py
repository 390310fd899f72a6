"""Usage snippets written into each bundle: Python, Kotlin (LiteRT) and Swift (TFLite).

Each loads the model, applies the recorded preprocessing, quantizes inputs and
dequantizes outputs with the scale and zero point the manifest records. The Python one
is a runnable script; the tests run it and compare with the build's validation.
"""

from __future__ import annotations

import json

_PYTHON = '''"""Run {file} as edgeopt validated it: python usage/predict.py INPUTS

INPUTS is an .npz/.npy of preprocessed arrays (as given to edgeopt), or image files.
Prints one JSON line: the outputs' argmax per sample, the class names of those indices
when the bundle knows them (manifest.json "labels"), and the raw outputs' shapes.
"""

import json
import sys
from pathlib import Path

import numpy as np

BUNDLE = Path(__file__).resolve().parent.parent
MANIFEST = json.loads((BUNDLE / "manifest.json").read_text())


def preprocess_image(path):
    """The manifest's recorded image preprocessing: resize, colour, normalise, layout."""
    from PIL import Image

    prep = MANIFEST["preprocessing"]
    height, width = prep["resize"]
    with Image.open(path) as img:
        img = img.convert("L" if prep["color"] == "grayscale" else "RGB")
        if prep.get("resize_mode", "").startswith("cover"):  # keep the aspect, crop the centre
            scale = max(width / img.width, height / img.height)
            size = (max(width, round(img.width * scale)), max(height, round(img.height * scale)))
            img = img.resize(size, Image.BILINEAR)
            left, top = (size[0] - width) // 2, (size[1] - height) // 2
            img = img.crop((left, top, left + width, top + height))
        pixels = np.asarray(img.resize((width, height), Image.BILINEAR), np.float32)
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    x = (pixels - np.asarray(prep["mean"], np.float32)) / np.asarray(prep["std"], np.float32)
    return x.transpose(2, 0, 1) if prep["layout"] == "NCHW" else x


def to_model_layout(x, spec):
    """edgeopt may have turned NCHW into NHWC for .tflite: follow the artifact's shape."""
    want = tuple(spec["shape"][1:])
    if x.shape[1:] != want and x.ndim == 4 and x.transpose(0, 2, 3, 1).shape[1:] == want:
        return x.transpose(0, 2, 3, 1)
    return x


def quantize(x, spec):
    q = spec["quantization"]
    if q is None or np.dtype(spec["dtype"]).kind == "f":
        return x.astype(spec["dtype"])
    info = np.iinfo(spec["dtype"])
    return np.clip(np.round(x / q["scale"]) + q["zero_point"], info.min, info.max).astype(
        spec["dtype"])


def dequantize(y, spec):
    q = spec["quantization"]
    if q is None:
        return y.astype(np.float32)
    return (y.astype(np.float32) - q["zero_point"]) * q["scale"]


def run_tflite(samples):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(BUNDLE / MANIFEST["model"]["file"]))
    interpreter.allocate_tensors()
    inputs, outputs = interpreter.get_input_details(), interpreter.get_output_details()
    results = [[] for _ in outputs]
    for i in range(len(samples[0])):
        for detail, spec, values in zip(inputs, MANIFEST["inputs"], samples):
            x = to_model_layout(values[i:i + 1], spec)
            interpreter.set_tensor(detail["index"], quantize(x, spec))
        interpreter.invoke()
        for k, (detail, spec) in enumerate(zip(outputs, MANIFEST["outputs"])):
            results[k].append(dequantize(interpreter.get_tensor(detail["index"]), spec))
    return [np.concatenate(r) for r in results]


def run_onnx(samples):
    import onnxruntime as ort

    session = ort.InferenceSession(str(BUNDLE / MANIFEST["model"]["file"]),
                                   providers=["CPUExecutionProvider"])
    feeds = {{s["name"]: v for s, v in zip(MANIFEST["inputs"], samples)}}
    return [np.asarray(o, np.float32) for o in session.run(None, feeds)]


def load_inputs(args):
    if args[0].endswith((".npz", ".npy")):
        data = np.load(args[0], allow_pickle=False)
        if args[0].endswith(".npy"):
            return [data]
        names = [s["name"] for s in MANIFEST["inputs"]]
        keys = names if all(n in data.files for n in names) else [
            k for k in data.files if k != "labels"]
        return [data[k] for k in keys]
    return [np.stack([preprocess_image(p) for p in args])]


def predict(samples):
    run = run_tflite if MANIFEST["model"]["format"] == "tflite" else run_onnx
    return run(samples)


USAGE = """usage: python usage/predict.py INPUTS...
  INPUTS: an .npz/.npy of arrays preprocessed as given to edgeopt, or image files
  example: python usage/predict.py samples.npz"""


def main(args):
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 0 if args else 2
    missing = [a for a in args if not Path(a).is_file()]
    if missing:
        print(f"predict.py: no such file: {{missing[0]}}\\n{{USAGE}}", file=sys.stderr)
        return 2
    outputs = predict(load_inputs(args))
    argmax = outputs[0].reshape(len(outputs[0]), -1).argmax(1).tolist()
    record = {{"argmax": argmax}}
    names = (MANIFEST.get("labels") or {{}}).get("names")
    if names:
        record["labels"] = [names[i] if i < len(names) else str(i) for i in argmax]
    record["shapes"] = [list(o.shape) for o in outputs]
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''

_KOTLIN = '''// {file} on Android with LiteRT (com.google.ai.edge.litert:litert, the
// org.tensorflow.lite Interpreter API). Generated by edgeopt from manifest.json.
import android.content.Context
import java.nio.ByteBuffer
import java.nio.ByteOrder
import org.tensorflow.lite.Interpreter
import org.tensorflow.lite.support.common.FileUtil

class EdgeoptModel(context: Context) {{
    private val interpreter = Interpreter(FileUtil.loadMappedFile(context, "{file}"))

    // Input '{in_name}': shape {in_shape}, {in_dtype}{in_quant_comment}
    // Preprocessing recorded by edgeopt: {prep}
    fun run(input: FloatArray): FloatArray {{
        val inputBuffer = ByteBuffer.allocateDirect({in_bytes}).order(ByteOrder.nativeOrder())
        for (x in input) {{
{kotlin_put}
        }}
        inputBuffer.rewind()
        val outputBuffer = ByteBuffer.allocateDirect({out_bytes}).order(ByteOrder.nativeOrder())
        interpreter.run(inputBuffer, outputBuffer)
        outputBuffer.rewind()
        return FloatArray({out_elems}) {{
{kotlin_get}
        }}
    }}
}}
'''

_SWIFT = '''// {file} on iOS with TensorFlowLiteSwift. Generated by edgeopt from manifest.json.
import Foundation
import TensorFlowLite

final class EdgeoptModel {{
    private let interpreter: Interpreter

    init() throws {{
        let path = Bundle.main.path(forResource: "{stem}", ofType: "{ext}")!
        interpreter = try Interpreter(modelPath: path)
        try interpreter.allocateTensors()
    }}

    // Input '{in_name}': shape {in_shape}, {in_dtype}{in_quant_comment}
    // Preprocessing recorded by edgeopt: {prep}
    func run(_ input: [Float]) throws -> [Float] {{
{swift_in}
        try interpreter.copy(data, toInputAt: 0)
        try interpreter.invoke()
        let output = try interpreter.output(at: 0)
{swift_out}
    }}
}}
'''


def _elements(shape: list[int]) -> int:
    count = 1
    for d in shape:
        count *= max(d, 1)
    return count


def _quant(spec: dict) -> tuple[float, int] | None:
    q = spec["quantization"]
    if q is None or spec["dtype"] in ("float32", "float16"):
        return None
    return q["scale"], q["zero_point"]


def _kotlin_io(inp: dict, out: dict) -> dict:
    qi, qo = _quant(inp), _quant(out)
    if qi:
        lo, hi = (-128, 127) if inp["dtype"] == "int8" else (0, 255)
        put = (f"            val q = Math.round(x / {qi[0]!r}f) + {qi[1]}\n"
               f"            inputBuffer.put(q.coerceIn({lo}, {hi}).toByte())")
    else:
        put = "            inputBuffer.putFloat(x)"
    if qo:
        read = "outputBuffer.get().toInt()" + (" and 0xFF" if out["dtype"] == "uint8" else "")
        get = f"            (({read}) - {qo[1]}) * {qo[0]!r}f"
    else:
        get = "            outputBuffer.getFloat()"
    return {"kotlin_put": put, "kotlin_get": get,
            "in_bytes": _elements(inp["shape"]) * (1 if qi else 4),
            "out_bytes": _elements(out["shape"]) * (1 if qo else 4)}


def _swift_io(inp: dict, out: dict) -> dict:
    qi, qo = _quant(inp), _quant(out)
    if qi:
        kind = "Int8" if inp["dtype"] == "int8" else "UInt8"
        swift_in = (f"        let quantized: [{kind}] = input.map {{ x in\n"
                    f"            {kind}(clamping: Int((x / {qi[0]!r}).rounded()) + {qi[1]}) }}\n"
                    "        let data = quantized.withUnsafeBufferPointer { Data(buffer: $0) }")
    else:
        swift_in = "        let data = input.withUnsafeBufferPointer { Data(buffer: $0) }"
    if qo:
        kind = "Int8" if out["dtype"] == "int8" else "UInt8"
        swift_out = (f"        return output.data.map {{ (b: UInt8) -> Float in\n"
                     f"            (Float({kind}(bitPattern: b)) - {qo[1]}) * {qo[0]!r} }}"
                     if kind == "Int8" else
                     f"        return output.data.map {{ (Float($0) - {qo[1]}) * {qo[0]!r} }}")
    else:
        swift_out = ("        return output.data.withUnsafeBytes { Array($0.bindMemory("
                     "to: Float.self)) }")
    return {"swift_in": swift_in, "swift_out": swift_out}


def usage_snippets(manifest: dict) -> dict[str, bytes]:
    """Files for the bundle's `usage/` folder."""
    model = manifest["model"]
    files = {"usage/predict.py": _PYTHON.format(file=model["file"]).encode()}
    if model["format"] != "tflite":
        return files
    inp, out = manifest["inputs"][0], manifest["outputs"][0]
    q = _quant(inp)
    fields = {
        "file": model["file"], "stem": model["file"].rsplit(".", 1)[0],
        "ext": model["file"].rsplit(".", 1)[1], "in_name": inp["name"],
        "in_shape": inp["shape"], "in_dtype": inp["dtype"],
        "in_quant_comment": f", quantized with scale {q[0]!r}, zero point {q[1]}" if q else "",
        "prep": json.dumps(manifest.get("preprocessing", {})),
        "out_elems": _elements(out["shape"]),
        **_kotlin_io(inp, out), **_swift_io(inp, out),
    }
    files["usage/EdgeoptModel.kt"] = _KOTLIN.format(**fields).encode()
    files["usage/EdgeoptModel.swift"] = _SWIFT.format(**fields).encode()
    return files
