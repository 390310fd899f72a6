"""One test per delegate rule: each check gets an op that passes it and one that fails it.

Graphs are built by hand (no TensorFlow): a few tensors and one or two ops, just enough to
put the check on each side of its constraint. A last test makes sure no rule used by any
delegate table is left without a case here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from edgeopt.delegates.registry import RULE_MODULES, load_delegate_rules
from edgeopt.delegates.view import ModelIndex, OpView
from edgeopt.graph import Graph, Op, Quantization, Tensor

F32, F16, I8, U8, I16, I32 = "float32", "float16", "int8", "uint8", "int16", "int32"
NHWC = (1, 8, 8, 4)


def q(scale: float = 0.05, zero_point: int = 0) -> Quantization:
    return Quantization((scale,), (zero_point,))


def qc(channels: int, axis: int = 0, zero_point: int = 0) -> Quantization:
    return Quantization(tuple([0.01] * channels), tuple([zero_point] * channels), axis)


class Net:
    """A hand-built graph: add tensors, add ops, then view the last op for a delegate."""

    def __init__(self) -> None:
        self.tensors: list[Tensor] = []
        self.ops: list[Op] = []
        self.consts: dict[int, tuple] = {}

    def t(self, shape=NHWC, dtype=F32, *, const=None, quant=None, sig=None) -> int:
        """A tensor; ``const`` True (values unknown) or a tuple of its integer values."""
        size = max(math.prod(shape), 1) * 4 if const is not None else 0
        if quant is None and dtype in (I8, U8, I16) and const is None:
            quant = q()
        self.tensors.append(Tensor(f"t{len(self.tensors)}", tuple(shape), dtype, sig,
                                   const is not None, size, quant))
        if isinstance(const, tuple):
            self.consts[len(self.tensors) - 1] = const
        return len(self.tensors) - 1

    def op(self, name: str, ins, outs, version: int = 1, custom: str | None = None,
           subgraph: int = 0, **options) -> Net:
        self.ops.append(Op(len(self.ops), name, version, tuple(ins), tuple(outs), options,
                           custom, 0, subgraph))
        return self

    def view(self, delegate: str, at: int = -1, **settings) -> OpView:
        count = max(op.subgraph for op in self.ops) + 1
        graph = Graph("tflite", tuple(self.tensors), tuple(self.ops), (), (), count, {})
        rules = load_delegate_rules(delegate).with_settings(settings)
        op = graph.ops[at]
        key = f"CUSTOM:{op.custom_code}" if op.op == "CUSTOM" else op.op
        return OpView(ModelIndex.build(graph, self.consts), op, rules.spec(key),
                      rules.settings, rules.title)


def unary(name: str, dtype=F32, shape=NHWC, **options) -> Net:
    n = Net()
    return n.op(name, [n.t(shape, dtype)], [n.t(shape, dtype)], **options)


def binary(name: str, a=NHWC, b=NHWC, dtype=F32, out=None, qa=None, qb=None, qo=None,
           **options) -> Net:
    n = Net()
    ins = [n.t(a, dtype, quant=qa), n.t(b, dtype, quant=qb)]
    return n.op(name, ins, [n.t(out or a, dtype, quant=qo)], **options)


def conv(name="CONV_2D", dtype=F32, wdtype=None, wq=None, bias=True, out_dtype=None,
         runtime_weights=False, filt=(8, 3, 3, 4), out=(1, 8, 8, 8), **options) -> Net:
    n = Net()
    x = n.t(NHWC, dtype)
    w = n.t(filt, wdtype or dtype, const=None if runtime_weights else True, quant=wq)
    b = n.t((out[-1],), I32 if dtype in (I8, U8) else F32, const=True) if bias else -1
    return n.op(name, [x, w, b], [n.t(out, out_dtype or dtype)], **options)


def with_input(name: str, shape, second, second_dtype=I32, dtype=F32, out=None,
               const=True, **options) -> Net:
    """An op whose second input is a constant (axes, paddings, shape, size, perm)."""
    n = Net()
    ins = [n.t(shape, dtype), n.t((len(second),), second_dtype, const=second if const else None)]
    return n.op(name, ins, [n.t(out or shape, dtype)], **options)


def fc(dtype=F32, wdtype=None, wq=None, out=(1, 10), **options) -> Net:
    n = Net()
    ins = [n.t((1, 16), dtype), n.t((10, 16), wdtype or dtype, const=True, quant=wq),
           n.t((10,), I32 if dtype == I8 else F32, const=True)]
    return n.op("FULLY_CONNECTED", ins, [n.t(out, dtype)], weights_format="DEFAULT",
                **options)


def outputs(name: str, count: int, axis_const=(3,)) -> Net:
    n = Net()
    ins = [n.t((), I32, const=axis_const), n.t(NHWC)]
    return n.op(name, ins, [n.t((1, 8, 8, 1)) for _ in range(count)], num_splits=count)


def concat(count: int, dtype=F32, const_values=None) -> Net:
    n = Net()
    ins = [n.t(NHWC, dtype) for _ in range(count)]
    if const_values is not None:
        ins[-1] = n.t(NHWC, dtype, const=const_values, quant=q(0.1, 0))
    return n.op("CONCATENATION", ins, [n.t((1, 8, 8, 4 * count), dtype)], axis=3,
                fused_activation_function="NONE")


def logical(consumer: str) -> Net:
    n = Net()
    a, b, m = n.t(), n.t(), n.t(NHWC, "bool")
    n.op("LESS", [a, b], [m])
    return n.op(consumer, [m], [n.t(NHWC, F32 if consumer == "CAST" else "bool")])


def strided(strides, **masks) -> Net:
    n = Net()
    ins = [n.t(NHWC), n.t((4,), I32, const=(0, 0, 0, 0)), n.t((4,), I32, const=(1, 8, 8, 4)),
           n.t((4,), I32, const=tuple(strides))]
    return n.op("STRIDED_SLICE", ins, [n.t((1, 4, 4, 4))], **masks)


@dataclass(frozen=True)
class Case:
    delegate: str
    rule: str
    passing: Callable[[], OpView]
    failing: Callable[[], OpView]


CASES = [
    # Generic checks (checks.py), shared by several delegates.
    Case("xnnpack", "not_flex", lambda: unary("RELU").view("xnnpack"),
         lambda: unary("CUSTOM", custom="FlexErf").view("xnnpack")),
    Case("xnnpack", "not_custom",
         lambda: unary("CUSTOM", custom="Convolution2DTransposeBias").view("xnnpack"),
         lambda: unary("CUSTOM", custom="MyVendorOp").view("xnnpack")),
    Case("edgetpu", "no_control_flow", lambda: unary("RELU", I8).view("edgetpu"),
         lambda: unary("WHILE", I8).view("edgetpu")),
    Case("edgetpu", "in_main_subgraph", lambda: unary("RELU", I8).view("edgetpu"),
         lambda: unary("RELU", I8, subgraph=1).view("edgetpu")),
    Case("xnnpack", "no_string_tensors", lambda: unary("RESHAPE").view("xnnpack"),
         lambda: unary("RESHAPE", "string").view("xnnpack")),
    Case("xnnpack", "op_in_table", lambda: unary("RELU").view("xnnpack"),
         lambda: unary("CUMSUM").view("xnnpack")),
    Case("gpu", "op_version", lambda: binary("ADD", version=2).view("gpu"),
         lambda: binary("ADD", version=3).view("gpu")),
    Case("xnnpack", "data_dtypes", lambda: unary("HARD_SWISH").view("xnnpack"),
         lambda: unary("HARD_SWISH", I8).view("xnnpack")),
    Case("gpu", "data_rank", lambda: binary("ADD").view("gpu"),
         lambda: binary("ADD", (1, 2, 8, 8, 4), (1, 2, 8, 8, 4)).view("gpu")),
    Case("xnnpack", "per_tensor_activations", lambda: binary("ADD", dtype=I8).view("xnnpack"),
         lambda: binary("ADD", dtype=I8, qo=qc(4, 3)).view("xnnpack")),
    Case("xnnpack", "quantized_activations", lambda: binary("ADD", dtype=I8).view("xnnpack"),
         lambda: _unquantized_add().view("xnnpack")),
    Case("xnnpack", "fused_activation",
         lambda: binary("ADD", fused_activation_function="RELU").view("xnnpack"),
         lambda: binary("ADD", fused_activation_function="TANH").view("xnnpack")),
    Case("edgetpu", "weights_constant", lambda: conv(dtype=I8, wq=q()).view("edgetpu"),
         lambda: conv(dtype=I8, wq=q(), runtime_weights=True).view("edgetpu")),
    Case("edgetpu", "float_op_in_integer_graph", lambda: binary("ADD", dtype=I8).view("edgetpu"),
         lambda: binary("ADD").view("edgetpu")),
    Case("edgetpu", "static_shapes", lambda: unary("RELU", I8).view("edgetpu"),
         lambda: _dynamic_relu().view("edgetpu")),
    Case("nnapi", "shape_input_constant",
         lambda: with_input("RESHAPE", NHWC, (1, 256), out=(1, 256)).view("nnapi"),
         lambda: with_input("RESHAPE", NHWC, (1, 256), out=(1, 256), const=False).view("nnapi")),
    Case("qnn-htp", "weight_quantization",
         lambda: conv(dtype=I8, wq=qc(8)).view("qnn-htp"),
         lambda: conv(dtype=I8, wq=qc(8, zero_point=3)).view("qnn-htp")),
    Case("xnnpack", "softmax_beta_one", lambda: unary("SOFTMAX", beta=1.0).view("xnnpack"),
         lambda: unary("SOFTMAX", beta=0.5).view("xnnpack")),
    Case("gpu", "block_above_one", lambda: unary("DEPTH_TO_SPACE", block_size=2).view("gpu"),
         lambda: unary("DEPTH_TO_SPACE", block_size=1).view("gpu")),
    # XNNPACK (xnnpack.py).
    Case("xnnpack", "conv_bias_static", lambda: conv().view("xnnpack"),
         lambda: conv(bias=False).view("xnnpack")),
    Case("xnnpack", "conv_types_match", lambda: conv().view("xnnpack"),
         lambda: conv(dtype=I8, wq=q(), out_dtype=F32).view("xnnpack")),
    Case("xnnpack", "filter_quantization", lambda: conv(dtype=I8, wq=qc(8)).view("xnnpack"),
         lambda: conv(dtype=I8, wq=qc(4, axis=3)).view("xnnpack")),
    Case("xnnpack", "pool_stride_within_filter",
         lambda: unary("MAX_POOL_2D", stride_w=2, stride_h=2, filter_width=2,
                       filter_height=2).view("xnnpack"),
         lambda: unary("MAX_POOL_2D", stride_w=2, stride_h=2, filter_width=1,
                       filter_height=1).view("xnnpack")),
    Case("xnnpack", "binary_same_types", lambda: binary("MUL", dtype=I8).view("xnnpack"),
         lambda: _mixed_add().view("xnnpack")),
    Case("xnnpack", "add_scale_ratio", lambda: binary("ADD", dtype=I8).view("xnnpack"),
         lambda: binary("ADD", dtype=I8, qa=q(1.0), qo=q(1e-4)).view("xnnpack")),
    Case("xnnpack", "mul_scale_ratio", lambda: binary("MUL", dtype=I8).view("xnnpack"),
         lambda: binary("MUL", dtype=I8, qa=q(1e-4), qb=q(1e-4), qo=q(1.0)).view("xnnpack")),
    Case("xnnpack", "concat_inputs", lambda: concat(2).view("xnnpack"),
         lambda: concat(6).view("xnnpack")),
    Case("xnnpack", "reshape_params",
         lambda: with_input("RESHAPE", NHWC, (1, 256), out=(1, 256)).view("xnnpack"),
         lambda: with_input("RESHAPE", NHWC, (-1,), out=(256,)).view("xnnpack")),
    Case("xnnpack", "axes_constant",
         lambda: with_input("MEAN", NHWC, (1, 2), out=(1, 4)).view("xnnpack"),
         lambda: with_input("MEAN", NHWC, (1, 2), out=(1, 4), const=False).view("xnnpack")),
    Case("xnnpack", "paddings_constant", lambda: _pad((0, 0, 1, 1, 1, 1, 0, 0)).view("xnnpack"),
         lambda: _pad((0, 0, -1, 1, 1, 1, 0, 0)).view("xnnpack")),
    Case("xnnpack", "resize_size_constant",
         lambda: with_input("RESIZE_BILINEAR", NHWC, (16, 16)).view("xnnpack"),
         lambda: with_input("RESIZE_BILINEAR", NHWC, (16, 16), const=False).view("xnnpack")),
    Case("xnnpack", "slice_params", lambda: _slice((1, 4, 4, 4)).view("xnnpack"),
         lambda: _slice((-1, 4, 4, 4)).view("xnnpack")),
    Case("xnnpack", "strided_slice_params", lambda: strided((1, 1, 1, 1)).view("xnnpack"),
         lambda: strided((1, 2, 2, 1)).view("xnnpack")),
    Case("xnnpack", "split_params", lambda: outputs("SPLIT", 2).view("xnnpack"),
         lambda: outputs("SPLIT", 5).view("xnnpack")),
    Case("xnnpack", "transpose_perm_constant",
         lambda: with_input("TRANSPOSE", NHWC, (0, 2, 1, 3)).view("xnnpack"),
         lambda: with_input("TRANSPOSE", NHWC, (0, 2, 1, 3), const=False).view("xnnpack")),
    Case("xnnpack", "space_to_depth_block",
         lambda: unary("SPACE_TO_DEPTH", block_size=2).view("xnnpack"),
         lambda: unary("SPACE_TO_DEPTH", shape=(1, 5, 5, 4), block_size=2).view("xnnpack")),
    Case("xnnpack", "transpose_conv_params", lambda: _tconv(True).view("xnnpack"),
         lambda: _tconv(False).view("xnnpack")),
    Case("xnnpack", "batch_matmul_params",
         lambda: binary("BATCH_MATMUL", (1, 4, 8), (1, 8, 4), out=(1, 4, 4)).view("xnnpack"),
         lambda: binary("BATCH_MATMUL", (8,), (8,), out=(1,)).view("xnnpack")),
    Case("xnnpack", "fully_connected_params", lambda: fc().view("xnnpack"),
         lambda: _shuffled_fc().view("xnnpack")),
    Case("xnnpack", "fully_connected_types", lambda: fc(I8, wq=q()).view("xnnpack"),
         lambda: fc(I8, wq=q(0.05, 3)).view("xnnpack")),
    Case("xnnpack", "leaky_relu_params", lambda: unary("LEAKY_RELU", alpha=0.2).view("xnnpack"),
         lambda: unary("LEAKY_RELU", alpha=0.0).view("xnnpack")),
    Case("xnnpack", "quantize_params", lambda: _quantize(F32, I8).view("xnnpack"),
         lambda: _quantize(I8, U8).view("xnnpack")),
    Case("xnnpack", "dequantize_params", lambda: _quantize(I8, F32, "DEQUANTIZE").view("xnnpack"),
         lambda: _quantize(I16, F32, "DEQUANTIZE").view("xnnpack")),
    # LiteRT GPU delegate (gpu.py).
    Case("gpu", "gpu_activation", lambda: conv(fused_activation_function="RELU").view("gpu"),
         lambda: conv(fused_activation_function="SIGN_BIT").view("gpu")),
    Case("gpu", "one_runtime_input", lambda: unary("HARD_SWISH").view("gpu"),
         lambda: with_input("RESHAPE", NHWC, (1, 256), const=False).view("gpu")),
    Case("gpu", "one_or_two_operands", lambda: binary("SUB").view("gpu"),
         lambda: _three_input_sub().view("gpu")),
    Case("gpu", "conv_runtime_inputs", lambda: conv().view("gpu"),
         lambda: _all_runtime_conv().view("gpu")),
    Case("gpu", "strides_dilation_positive", lambda: conv(stride_h=1, stride_w=1).view("gpu"),
         lambda: conv(stride_h=0, stride_w=1).view("gpu")),
    Case("gpu", "depthwise_shapes",
         lambda: conv("DEPTHWISE_CONV_2D", filt=(1, 3, 3, 4), out=(1, 8, 8, 4),
                      depth_multiplier=1).view("gpu"),
         lambda: conv("DEPTHWISE_CONV_2D", filt=(1, 3, 3, 8), out=(1, 8, 8, 8),
                      depth_multiplier=1).view("gpu")),
    Case("gpu", "broadcast_supported", lambda: binary("ADD", NHWC, (8, 8, 4)).view("gpu"),
         lambda: binary("ADD", (2, 8, 8, 4), (8, 8, 4)).view("gpu")),
    Case("gpu", "fully_connected_gpu", lambda: fc().view("gpu"),
         lambda: _constant_input_fc().view("gpu")),
    Case("gpu", "reduce_axes_constant",
         lambda: with_input("SUM", NHWC, (1, 2), out=(1, 4)).view("gpu"),
         lambda: with_input("SUM", NHWC, (1, 2), out=(1, 4), const=False).view("gpu")),
    Case("gpu", "slice_rank_3_or_4", lambda: _slice((1, 4, 4, 4)).view("gpu"),
         lambda: _slice((4, 4), shape=(8, 8)).view("gpu")),
    Case("gpu", "pad_shape", lambda: _pad((0, 0, 1, 1, 1, 1, 0, 0)).view("gpu"),
         lambda: _pad((1, 1, 1, 1), shape=(8, 8)).view("gpu")),
    Case("gpu", "resize_corners",
         lambda: with_input("RESIZE_BILINEAR", NHWC, (16, 16), align_corners=True).view("gpu"),
         lambda: with_input("RESIZE_BILINEAR", NHWC, (16, 16), align_corners=True,
                            half_pixel_centers=True).view("gpu")),
    Case("gpu", "dequantize_not_int16", lambda: _quantize(I8, F32, "DEQUANTIZE").view("gpu"),
         lambda: _quantize(I16, F32, "DEQUANTIZE").view("gpu")),
    Case("gpu", "gather_indices", lambda: _gather((3,)).view("gpu"),
         lambda: _gather((3, 1)).view("gpu")),
    Case("gpu", "cumsum_float", lambda: with_input("CUMSUM", NHWC, (1,)).view("gpu"),
         lambda: with_input("CUMSUM", NHWC, (1,), dtype=I8).view("gpu")),
    Case("gpu", "cast_combination", lambda: _quantize(F32, I32, "CAST").view("gpu"),
         lambda: _quantize(I8, F32, "CAST").view("gpu")),
    Case("gpu", "logical_feeds_float", lambda: logical("CAST").view("gpu", at=0),
         lambda: logical("LOGICAL_NOT").view("gpu", at=0)),
    Case("gpu", "add_n_two_inputs", lambda: _add_n(2).view("gpu"),
         lambda: _add_n(3).view("gpu")),
    # Android NNAPI (nnapi.py).
    Case("nnapi", "feature_level",
         lambda: with_input("RESIZE_NEAREST_NEIGHBOR", NHWC, (16, 16)).view("nnapi", api_level=29),
         lambda: with_input("RESIZE_NEAREST_NEIGHBOR", NHWC, (16, 16)).view("nnapi",
                                                                            api_level=28)),
    Case("nnapi", "quant_level", lambda: binary("SUB", dtype=I8).view("nnapi", api_level=29),
         lambda: binary("SUB", dtype=I8).view("nnapi", api_level=28)),
    Case("nnapi", "int32_arithmetic_level",
         lambda: binary("ADD", dtype=I32).view("nnapi", api_level=30),
         lambda: binary("ADD", dtype=I32).view("nnapi", api_level=29)),
    Case("nnapi", "conv_bias_present", lambda: conv().view("nnapi"),
         lambda: conv(bias=False).view("nnapi")),
    Case("nnapi", "dilation_level",
         lambda: conv(dilation_w_factor=2, dilation_h_factor=2).view("nnapi", api_level=29),
         lambda: conv(dilation_w_factor=2, dilation_h_factor=2).view("nnapi", api_level=28)),
    Case("nnapi", "per_channel_level",
         lambda: conv(dtype=I8, wq=qc(8)).view("nnapi", api_level=29),
         lambda: conv(dtype=I8, wq=qc(8)).view("nnapi", api_level=28)),
    Case("nnapi", "hybrid_level", lambda: fc(F32, I8, q()).view("nnapi", api_level=29),
         lambda: fc(F32, I8, q()).view("nnapi", api_level=28)),
    Case("nnapi", "keep_num_dims_level",
         lambda: fc(keep_num_dims=True).view("nnapi", api_level=30),
         lambda: fc(keep_num_dims=True).view("nnapi", api_level=29)),
    Case("nnapi", "softmax_rank", lambda: unary("SOFTMAX", shape=(1, 10)).view("nnapi"),
         lambda: unary("SOFTMAX", shape=(1, 2, 2, 2, 10)).view("nnapi")),
    Case("nnapi", "resize_params", lambda: with_input("RESIZE_BILINEAR", NHWC, (16, 16)).view(
        "nnapi"), lambda: with_input("RESIZE_BILINEAR", (8, 8, 4), (16, 16)).view("nnapi")),
    Case("nnapi", "quant_pool_window",
         lambda: unary("AVERAGE_POOL_2D", I8, filter_width=3, filter_height=3).view("nnapi"),
         lambda: unary("AVERAGE_POOL_2D", I8, filter_width=17, filter_height=17).view("nnapi")),
    Case("nnapi", "batch_matmul_params",
         lambda: binary("BATCH_MATMUL", (2, 4, 8), (2, 8, 4), out=(2, 4, 4)).view("nnapi"),
         lambda: binary("BATCH_MATMUL", (2, 4, 8), (1, 8, 4), out=(2, 4, 4)).view("nnapi")),
    # Qualcomm QNN HTP (qnn_htp.py).
    Case("qnn-htp", "precision_dtypes", lambda: binary("ADD", dtype=I8).view("qnn-htp"),
         lambda: binary("ADD").view("qnn-htp", precision="int8")),
    # Coral Edge TPU (edgetpu.py).
    Case("edgetpu", "runtime_level",
         lambda: with_input("TRANSPOSE", NHWC, (0, 2, 1, 3), dtype=I8).view("edgetpu"),
         lambda: with_input("TRANSPOSE", NHWC, (0, 2, 1, 3), dtype=I8).view(
             "edgetpu", runtime_version=13)),
    Case("edgetpu", "innermost_3d", lambda: unary("RELU", I8).view("edgetpu"),
         lambda: unary("RELU", I8, shape=(2, 8, 8, 4)).view("edgetpu")),
    Case("edgetpu", "conv_same_dilation",
         lambda: conv(dtype=I8, wq=q(), dilation_h_factor=2, dilation_w_factor=2).view("edgetpu"),
         lambda: conv(dtype=I8, wq=q(), dilation_h_factor=1, dilation_w_factor=2).view(
             "edgetpu")),
    Case("edgetpu", "depthwise_no_dilation",
         lambda: conv("DEPTHWISE_CONV_2D", I8, wq=q()).view("edgetpu"),
         lambda: conv("DEPTHWISE_CONV_2D", I8, wq=q(), dilation_h_factor=2,
                      dilation_w_factor=2).view("edgetpu")),
    Case("edgetpu", "fully_connected_1d", lambda: fc(I8, wq=q()).view("edgetpu"),
         lambda: fc(I8, wq=q(), out=(4, 10)).view("edgetpu")),
    Case("edgetpu", "fully_connected_fits", lambda: fc(I8, wq=q()).view("edgetpu"),
         lambda: fc(I8, wq=q()).view("edgetpu", fc_max_weights=100)),  # 160 weights
    Case("edgetpu", "concat_constant_zero",
         lambda: concat(2, I8, const_values=(0,) * 256).view("edgetpu"),
         lambda: concat(2, I8, const_values=(5,) * 256).view("edgetpu")),
    Case("edgetpu", "mean_axes",
         lambda: with_input("MEAN", NHWC, (1, 2), dtype=I8, out=(1, 4)).view("edgetpu"),
         lambda: with_input("MEAN", NHWC, (0,), dtype=I8, out=(8, 8, 4)).view("edgetpu")),
    Case("edgetpu", "no_batch_axis", lambda: outputs("SPLIT", 2, (3,)).view("edgetpu"),
         lambda: outputs("SPLIT", 2, (0,)).view("edgetpu")),
    Case("edgetpu", "pad_axes", lambda: _pad((0, 0, 1, 1, 1, 1, 0, 0), I8).view("edgetpu"),
         lambda: _pad((1, 1, 0, 0, 0, 0, 0, 0), I8).view("edgetpu")),
    Case("edgetpu", "softmax_1d", lambda: unary("SOFTMAX", I8, shape=(1, 10)).view("edgetpu"),
         lambda: unary("SOFTMAX", I8, shape=(1, 4, 10)).view("edgetpu")),
    Case("edgetpu", "strided_slice_unit", lambda: strided((1, 1, 1, 1)).view("edgetpu"),
         lambda: strided((1, 1, 1, 1), ellipsis_mask=1).view("edgetpu")),
]


def _unquantized_add() -> Net:
    n = Net()
    a, b = n.t(NHWC, I8), n.t(NHWC, I8)
    out = len(n.tensors)
    n.tensors.append(Tensor("raw", NHWC, I8, None, False, 0, None))
    return n.op("ADD", [a, b], [out])


def _dynamic_relu() -> Net:
    n = Net()
    return n.op("RELU", [n.t(NHWC, I8, sig=(-1, 8, 8, 4))], [n.t(NHWC, I8, sig=(-1, 8, 8, 4))])


def _mixed_add() -> Net:
    n = Net()
    return n.op("ADD", [n.t(NHWC, I8), n.t(NHWC, F32)], [n.t(NHWC, I8)])


def _pad(values, dtype=F32, shape=NHWC) -> Net:
    n = Net()
    pads = n.t((len(shape), 2) if len(values) == 2 * len(shape) else (len(values) // 2, 2),
               I32, const=tuple(values))
    return n.op("PAD", [n.t(shape, dtype), pads], [n.t(shape, dtype)])


def _slice(size, shape=NHWC) -> Net:
    n = Net()
    begin = n.t((len(size),), I32, const=(0,) * len(size))
    sizes = n.t((len(size),), I32, const=tuple(size))
    return n.op("SLICE", [n.t(shape), begin, sizes], [n.t(tuple(abs(s) for s in size))])


def _tconv(constant_shape: bool) -> Net:
    n = Net()
    shape = n.t((4,), I32, const=(1, 16, 16, 8) if constant_shape else None)
    ins = [shape, n.t((8, 3, 3, 4), const=True), n.t(NHWC)]
    return n.op("TRANSPOSE_CONV", ins, [n.t((1, 16, 16, 8))], padding="SAME", stride_w=2,
                stride_h=2)


def _shuffled_fc() -> Net:
    net = fc()
    net.ops[-1].options["weights_format"] = "SHUFFLED4x16INT8"
    return net


def _constant_input_fc() -> Net:
    n = Net()
    ins = [n.t((1, 16), const=True), n.t((10, 16), const=True), n.t((10,), const=True)]
    return n.op("FULLY_CONNECTED", ins, [n.t((1, 10))], weights_format="DEFAULT")


def _quantize(src, dst, name="QUANTIZE") -> Net:
    n = Net()
    src_q = q() if src in (I8, U8, I16) else None
    dst_q = q(0.1, 128) if dst == U8 else (q() if dst in (I8, I16) else None)
    return n.op(name, [n.t(NHWC, src, quant=src_q)], [n.t(NHWC, dst, quant=dst_q)])


def _three_input_sub() -> Net:
    n = Net()
    return n.op("SUB", [n.t(), n.t(), n.t()], [n.t()])


def _all_runtime_conv() -> Net:
    n = Net()
    ins = [n.t(), n.t((8, 3, 3, 4)), n.t((8,))]
    return n.op("CONV_2D", ins, [n.t((1, 8, 8, 8))], stride_h=1, stride_w=1)


def _gather(index_shape) -> Net:
    n = Net()
    return n.op("GATHER", [n.t((10, 4)), n.t(index_shape, I32)], [n.t((3, 4))])


def _add_n(count: int) -> Net:
    n = Net()
    return n.op("ADD_N", [n.t() for _ in range(count)], [n.t()])


@pytest.mark.parametrize("case", CASES, ids=[f"{c.delegate}-{c.rule}" for c in CASES])
def test_rule_passes_and_fails(case: Case):
    rule = load_delegate_rules(case.delegate).specific[case.rule]
    ok, detail = rule(case.passing())
    assert ok, f"{case.rule} rejected its passing case: {detail}"
    ok, detail = rule(case.failing())
    assert not ok, f"{case.rule} accepted its failing case"
    assert rule.constraint and not rule.constraint.startswith(case.rule)


def test_every_rule_in_use_has_a_case():
    tested = {load_delegate_rules(c.delegate).specific[c.rule].check for c in CASES}
    missing = []
    for name in RULE_MODULES:
        rules = load_delegate_rules(name)
        used = {r.name for r in rules.generic}
        used |= {check for spec in rules.ops.values() for check in spec.checks}
        missing += [f"{name}.{rule}" for rule in sorted(used)
                    if rules.specific[rule].check not in tested]
    assert not missing, f"rules without a test case: {missing}"


def test_precision_fp16_lets_float_ops_onto_the_htp():
    rule = load_delegate_rules("qnn-htp").specific["precision_dtypes"]
    assert rule(binary("ADD").view("qnn-htp", precision="fp16"))[0]


def test_unknown_delegate_option_is_a_config_error():
    from edgeopt.errors import ConfigError

    with pytest.raises(ConfigError, match="api_level"):
        load_delegate_rules("edgetpu").with_settings({"api_level": 29})


def test_static_weight_unpacking_follows_its_consumers():
    """XNNPACK folds DEQUANTIZE of fp16 weights into the delegate only with its consumer."""
    from edgeopt.delegates.engine import place_with_rules

    for consumer_ok in (True, False):
        n = Net()
        w16 = n.t((8, 3, 3, 4), F16, const=True)
        w32 = n.t((8, 3, 3, 4))
        n.op("DEQUANTIZE", [w16], [w32])
        bias = n.t((8,), const=True) if consumer_ok else -1
        n.op("CONV_2D", [n.t(), w32, bias], [n.t((1, 8, 8, 8))], stride_w=1, stride_h=1)
        graph = Graph("tflite", tuple(n.tensors), tuple(n.ops), (), (), 1, {})
        units = [op.unit for op in place_with_rules(graph, load_delegate_rules("xnnpack")).ops]
        assert units == (["xnnpack"] * 2 if consumer_ok else ["cpu"] * 2)


def test_applicable_fixes_name_what_edgeopt_build_can_do():
    from edgeopt.delegates.engine import place_with_rules

    net = _dynamic_relu()
    graph = Graph("tflite", tuple(net.tensors), tuple(net.ops), (0,), (1,), 1, {})
    placement = place_with_rules(graph, load_delegate_rules("edgetpu"))
    assert placement.applicable_fixes() == ("fix_dynamic_batch",)
    assert placement.ops[0].rewrite.startswith("dynamic batch: fix the input shape to 1")


def test_depthwise_has_no_dynamic_quantization_in_xnnpack():
    """Found by benchmarks/delegates_xnnpack.py on a dynamic-range quantized MobileNetV2."""
    rule = load_delegate_rules("xnnpack").specific["conv_types_match"]
    assert rule(conv(wdtype=I8, wq=qc(8)).view("xnnpack"))[0]
    depthwise = conv("DEPTHWISE_CONV_2D", wdtype=I8, wq=qc(4, 3), filt=(1, 3, 3, 4),
                     out=(1, 8, 8, 4))
    assert not rule(depthwise.view("xnnpack"))[0]
