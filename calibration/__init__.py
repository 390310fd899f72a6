"""Post-training quantization: one calibration core, two writers.

Algorithms (no TFLite, no ONNX): `observers` (bounded streaming statistics),
`estimators` (min-max, percentile, MSE, entropy, auto), `quantgrid`, `saturation`,
`weights` (int8/int4, per channel or per block), `gptq`, `layer_stats`, `plan` (bias
correction), `precision` + `recipes` (per-layer choices), `search` (accuracy budget),
`report` (layer-wise report and chart).

Formats, imported only when used: `tflite_backend` / `tflite_writer` / `tflite_format`
(LiteRT capture, ai-edge-quantizer writes) and `onnx_backend` / `onnx_writer` /
`onnx_weight_only` / `onnx_format` (onnxruntime capture, onnxruntime.quantization writes).

`engine.quantize_with` runs the stage; `edgeopt.quantize` is the public entry.
The converter baselines (`tflite_converter`, `tflite_aeq`, `onnx_static`) stay as they were.
"""
