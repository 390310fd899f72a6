"""Keras definitions of corpus models that `keras.applications` does not ship.

Each follows its paper / torchvision definition layer for layer (the shapes a latency
depends on; weights are random): ResNet-18/34 (basic blocks, He et al. 2015), Wide
ResNet-50-2 (torchvision: bottleneck v1.5 with twice the inner width), SqueezeNet 1.1
(Iandola et al., the torchvision 1.1 variant), ViT-Ti/16, ViT-B/16 (Dosovitskiy et al.,
a class token, learned position embeddings, pre-norm blocks), and the torchvision
networks AI Hub exports: ShuffleNetV2 x0.5 (Ma et al. 2018), RegNetX-3.2GF and
RegNetY-800MF (Radosavovic et al. 2020; torchvision's stage widths, depths and group
widths, read from its `BlockParams`), GoogLeNet (Szegedy et al. 2014, torchvision's
variant: BN after every conv, a 3x3 conv in the "5x5" branch; its input transform, three
element-wise ops on the image, left out) and ResNeXt-50 32x4d / ResNeXt-101 32x8d (Xie et
al. 2017, torchvision: the bottleneck's 3x3 in 32 groups).

AI Hub's super-resolution models, x4 from 128x128 (its `DEFAULT_SCALE_FACTOR` and input
spec), as the sources it loads define them: QuickSRNet small / medium / large (Berger et
al. 2023, aimet-model-zoo `QuickSRNetBase`: 3x3 convs with clipped ReLU, the large one with
its 1x1 "anchor" from the input), XLSR (Ayazoglu 2021, aimet-model-zoo `XLSRRelease`:
grouped-conv GBlocks), SESR-M5 (Bhardwaj et al. 2022, aimet-model-zoo `SESRRelease`
uncollapsed, as AI Hub loads it: each block a kxk conv to 256 channels and a 1x1 back),
Real-ESRGAN general x4v3 (basicsr `SRVGGNetCompact`: 32 3x3 convs with PReLU) and the
RRDB network of ESRGAN / Real-ESRGAN x4plus (Wang et al. 2018, basicsr `RRDBNet`: 23
residual-in-residual dense blocks, two nearest x2 upsamplings). Pixel shuffle is
DEPTH_TO_SPACE (PyTorch's channel order differs; its cost does not).

    >>> model = build_network(keras, "ResNet18", keras.Input((224, 224, 3), batch_size=1),
    ...                       classes=1000)                                  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

# builder -> (kind, settings)
NETWORKS: dict[str, tuple[str, dict[str, Any]]] = {
    "ResNet18": ("resnet", {"blocks": (2, 2, 2, 2), "bottleneck": False, "width": 1}),
    "ResNet34": ("resnet", {"blocks": (3, 4, 6, 3), "bottleneck": False, "width": 1}),
    "WideResNet50": ("resnet", {"blocks": (3, 4, 6, 3), "bottleneck": True, "width": 2}),
    "SqueezeNet11": ("squeezenet", {}),
    "ViTTiny16": ("vit", {"dim": 192, "depth": 12, "heads": 3, "mlp": 768, "patch": 16}),
    "ViTBase16": ("vit", {"dim": 768, "depth": 12, "heads": 12, "mlp": 3072, "patch": 16}),
    "ShuffleNetV2x05": ("shufflenet", {"channels": (24, 48, 96, 192, 1024),
                                       "repeats": (4, 8, 4)}),
    # (width, depth) per stage, the group width, the squeeze-excitation ratio
    "RegNetX3_2GF": ("regnet", {"stages": ((96, 2), (192, 6), (432, 15), (1008, 2)),
                                "group_width": 48, "se_ratio": 0.0}),
    "RegNetY800MF": ("regnet", {"stages": ((64, 1), (144, 3), (320, 8), (784, 2)),
                                "group_width": 16, "se_ratio": 0.25}),
    "GoogLeNet": ("googlenet", {}),
    # torchvision: width per group 4 (8) x 32 groups = twice (four times) ResNet's planes
    "ResNeXt50_32x4d": ("resnet", {"blocks": (3, 4, 6, 3), "bottleneck": True, "width": 2,
                                   "groups": 32}),
    "ResNeXt101_32x8d": ("resnet", {"blocks": (3, 4, 23, 3), "bottleneck": True,
                                    "width": 4, "groups": 32}),
    "QuickSRNetSmall": ("quicksrnet", {"channels": 32, "layers": 2, "anchor": False}),
    "QuickSRNetMedium": ("quicksrnet", {"channels": 32, "layers": 5, "anchor": False}),
    "QuickSRNetLarge": ("quicksrnet", {"channels": 64, "layers": 11, "anchor": True}),
    "XLSR": ("xlsr", {}),
    "SESR_M5": ("sesr", {"channels": 16, "blocks": 5, "expand": 256}),
    "SRVGGNetCompact": ("srvgg", {"features": 64, "convs": 32}),
    "RRDBNet": ("rrdb", {"features": 64, "grow": 32, "blocks": 23}),
}
SR_SCALE = 4   # AI Hub's super-resolution models upscale x4


def build_network(keras, builder: str, inputs, classes: int):
    """The Keras model ``builder`` names (see `NETWORKS`) on ``inputs``."""
    kind, settings = NETWORKS[builder]
    body = {"resnet": _resnet, "squeezenet": _squeezenet, "vit": _vit,
            "shufflenet": _shufflenet, "regnet": _regnet, "googlenet": _googlenet,
            "quicksrnet": _quicksrnet, "xlsr": _xlsr, "sesr": _sesr, "srvgg": _srvgg,
            "rrdb": _rrdb}[kind]
    return keras.Model(inputs, body(keras, inputs, classes, **settings), name=builder)


def _conv_bn(keras, x, filters: int, size: int, stride: int = 1, relu: bool = True,
             groups: int = 1):
    layers = keras.layers
    x = layers.Conv2D(filters, size, strides=stride, padding="same", use_bias=False,
                      groups=groups)(x)
    x = layers.BatchNormalization(epsilon=1e-5)(x)
    return layers.ReLU()(x) if relu else x


def _resnet(keras, inputs, classes: int, blocks, bottleneck: bool, width: int,
            groups: int = 1):
    layers = keras.layers
    x = _conv_bn(keras, inputs, 64, 7, 2)
    x = layers.MaxPooling2D(3, 2, padding="same")(x)
    expansion = 4 if bottleneck else 1
    for stage, count in enumerate(blocks):
        planes = 64 * 2 ** stage
        for index in range(count):
            stride = 2 if stage and not index else 1
            x = _resnet_block(keras, x, planes, stride, bottleneck, width, expansion,
                              groups)
    x = layers.GlobalAveragePooling2D()(x)
    return layers.Dense(classes)(x)


def _resnet_block(keras, x, planes: int, stride: int, bottleneck: bool, width: int,
                  expansion: int, groups: int = 1):
    layers = keras.layers
    out_channels = planes * expansion
    shortcut = x
    if stride != 1 or x.shape[-1] != out_channels:
        shortcut = _conv_bn(keras, x, out_channels, 1, stride, relu=False)
    if bottleneck:  # torchvision v1.5: the stride sits on the 3x3
        y = _conv_bn(keras, x, planes * width, 1)
        y = _conv_bn(keras, y, planes * width, 3, stride, groups=groups)
        y = _conv_bn(keras, y, out_channels, 1, relu=False)
    else:
        y = _conv_bn(keras, x, planes, 3, stride)
        y = _conv_bn(keras, y, planes, 3, relu=False)
    return layers.ReLU()(layers.Add()([y, shortcut]))


def _fire(keras, x, squeeze: int, expand: int):
    layers = keras.layers
    s = layers.Conv2D(squeeze, 1, activation="relu")(x)
    left = layers.Conv2D(expand, 1, activation="relu")(s)
    right = layers.Conv2D(expand, 3, padding="same", activation="relu")(s)
    return layers.Concatenate()([left, right])


def _squeezenet(keras, inputs, classes: int):
    layers = keras.layers
    x = layers.Conv2D(64, 3, strides=2, activation="relu")(inputs)
    x = layers.MaxPooling2D(3, 2)(x)
    x = _fire(keras, _fire(keras, x, 16, 64), 16, 64)
    x = layers.MaxPooling2D(3, 2)(x)
    x = _fire(keras, _fire(keras, x, 32, 128), 32, 128)
    x = layers.MaxPooling2D(3, 2)(x)
    for squeeze, expand in ((48, 192), (48, 192), (64, 256), (64, 256)):
        x = _fire(keras, x, squeeze, expand)
    x = layers.Conv2D(classes, 1, activation="relu")(x)
    return layers.GlobalAveragePooling2D()(x)


def _vit(keras, inputs, classes: int, dim: int, depth: int, heads: int, mlp: int,
         patch: int):
    layers = keras.layers
    x = layers.Conv2D(dim, patch, strides=patch)(inputs)
    tokens = x.shape[1] * x.shape[2]
    x = layers.Reshape((tokens, dim))(x)
    x = _ClassToken(dim, tokens)(x)
    for _ in range(depth):
        y = layers.LayerNormalization(epsilon=1e-6)(x)
        y = layers.MultiHeadAttention(heads, dim // heads)(y, y)
        x = layers.Add()([x, y])
        y = layers.LayerNormalization(epsilon=1e-6)(x)
        y = layers.Dense(mlp, activation="gelu")(y)
        x = layers.Add()([x, layers.Dense(dim)(y)])
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    return layers.Dense(classes)(x[:, 0])


def _dw_bn(keras, x, stride: int):
    layers = keras.layers
    x = layers.DepthwiseConv2D(3, strides=stride, padding="same", use_bias=False)(x)
    return layers.BatchNormalization(epsilon=1e-5)(x)


def _channel_shuffle(keras, x):
    """torchvision's shuffle of two groups: channel g*C/2 + j moves to 2j + g."""
    layers = keras.layers
    h, w, c = x.shape[1:]
    x = layers.Reshape((h, w, 2, c // 2))(x)
    x = layers.Permute((1, 2, 4, 3))(x)
    return layers.Reshape((h, w, c))(x)


def _shuffle_unit(keras, x, out_channels: int, stride: int):
    branch = out_channels // 2
    if stride == 1:
        keep, x = x[..., :branch], x[..., branch:]
    else:
        keep = _conv_bn(keras, _dw_bn(keras, x, stride), branch, 1)
    y = _conv_bn(keras, _dw_bn(keras, _conv_bn(keras, x, branch, 1), stride), branch, 1)
    return _channel_shuffle(keras, keras.layers.Concatenate()([keep, y]))


def _shufflenet(keras, inputs, classes: int, channels, repeats):
    layers = keras.layers
    x = _conv_bn(keras, inputs, channels[0], 3, 2)
    x = layers.MaxPooling2D(3, 2, padding="same")(x)
    for out_channels, count in zip(channels[1:-1], repeats):
        for index in range(count):
            x = _shuffle_unit(keras, x, out_channels, 2 if index == 0 else 1)
    x = _conv_bn(keras, x, channels[-1], 1)
    x = layers.GlobalAveragePooling2D()(x)
    return layers.Dense(classes)(x)


def _regnet_block(keras, x, width: int, stride: int, group_width: int, se_ratio: float):
    """torchvision's ResBottleneckBlock (bottleneck ratio 1): 1x1, grouped 3x3 carrying the
    stride, optional squeeze-excitation on the input width, 1x1, projected shortcut."""
    layers = keras.layers
    shortcut = x
    if stride != 1 or x.shape[-1] != width:
        shortcut = _conv_bn(keras, x, width, 1, stride, relu=False)
    squeeze = int(round(se_ratio * x.shape[-1]))
    y = _conv_bn(keras, x, width, 1)
    y = _conv_bn(keras, y, width, 3, stride, groups=width // group_width)
    if squeeze:
        s = layers.GlobalAveragePooling2D(keepdims=True)(y)
        s = layers.Conv2D(squeeze, 1, activation="relu")(s)
        s = layers.Conv2D(width, 1, activation="sigmoid")(s)
        y = layers.Multiply()([y, s])
    y = _conv_bn(keras, y, width, 1, relu=False)
    return layers.ReLU()(layers.Add()([y, shortcut]))


def _regnet(keras, inputs, classes: int, stages, group_width: int, se_ratio: float):
    layers = keras.layers
    x = _conv_bn(keras, inputs, 32, 3, 2)
    for width, depth in stages:
        for index in range(depth):
            x = _regnet_block(keras, x, width, 2 if index == 0 else 1, group_width, se_ratio)
    x = layers.GlobalAveragePooling2D()(x)
    return layers.Dense(classes)(x)


# GoogLeNet's inception blocks: 1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5", pool projection
_INCEPTION = {"3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
              "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
              "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
              "4e": (256, 160, 320, 32, 128, 128), "5a": (256, 160, 320, 32, 128, 128),
              "5b": (384, 192, 384, 48, 128, 128)}


def _inception(keras, x, c1: int, r3: int, c3: int, r5: int, c5: int, pool: int):
    layers = keras.layers
    conv = lambda y, n, k: _conv_bn_eps(keras, y, n, k)  # noqa: E731
    branches = [conv(x, c1, 1), conv(conv(x, r3, 1), c3, 3), conv(conv(x, r5, 1), c5, 3),
                conv(layers.MaxPooling2D(3, 1, padding="same")(x), pool, 1)]
    return layers.Concatenate()(branches)


def _conv_bn_eps(keras, x, filters: int, size: int, stride: int = 1):
    # torchvision's BasicConv2d: BN epsilon 0.001
    layers = keras.layers
    x = layers.Conv2D(filters, size, strides=stride, padding="same", use_bias=False)(x)
    return layers.ReLU()(layers.BatchNormalization(epsilon=1e-3)(x))


def _googlenet(keras, inputs, classes: int):
    layers = keras.layers
    x = _conv_bn_eps(keras, inputs, 64, 7, 2)
    x = layers.MaxPooling2D(3, 2, padding="same")(x)   # ceil mode: the same sizes
    x = _conv_bn_eps(keras, _conv_bn_eps(keras, x, 64, 1), 192, 3)
    x = layers.MaxPooling2D(3, 2, padding="same")(x)
    for name in ("3a", "3b", "pool", "4a", "4b", "4c", "4d", "4e", "pool2", "5a", "5b"):
        if name.startswith("pool"):
            x = layers.MaxPooling2D(3 if name == "pool" else 2, 2, padding="same")(x)
        else:
            x = _inception(keras, x, *_INCEPTION[name])
    x = layers.GlobalAveragePooling2D()(x)
    return layers.Dense(classes)(x)


# --- super-resolution (AI Hub, x4 from 128x128) -----------------------------------------

def _conv(keras, x, filters: int, size: int, groups: int = 1, activation=None,
          use_bias: bool = True):
    return keras.layers.Conv2D(filters, size, padding="same", groups=groups,
                               activation=activation, use_bias=use_bias)(x)


def _clipped(keras, x):
    """PyTorch's Hardtanh(0, 1)."""
    return keras.layers.ReLU(max_value=1.0)(x)


def _pixel_shuffle(x):
    return _depth_to_space_layer()(SR_SCALE)(x)


def _quicksrnet(keras, inputs, classes: int, channels: int, layers: int, anchor: bool):
    x = _clipped(keras, _conv(keras, inputs, channels, 3))
    for _ in range(layers):
        x = _clipped(keras, _conv(keras, x, channels, 3))
    x = _conv(keras, x, 3 * SR_SCALE ** 2, 3)
    if anchor:   # the input, repeated per output pixel by a 1x1 conv, added
        x = keras.layers.Add()([_conv(keras, inputs, 3 * SR_SCALE ** 2, 1), x])
    return _pixel_shuffle(_clipped(keras, x))


def _xlsr(keras, inputs, classes: int):
    layers = keras.layers
    residual = _conv(keras, inputs, 16, 3)
    x = _conv(keras, _conv(keras, inputs, 32, 3, activation="relu"), 32, 1)
    for _ in range(3):   # GBlock: grouped 3x3 (4 groups), ReLU, 1x1
        x = _conv(keras, _conv(keras, x, 32, 3, groups=4, activation="relu"), 32, 1)
    x = layers.Concatenate()([x, residual])
    x = _conv(keras, _conv(keras, x, 32, 1, activation="relu"), 3 * SR_SCALE ** 2, 3)
    return _clipped(keras, _pixel_shuffle(x))


def _linear_block(keras, x, out: int, expand: int, size: int, residual: bool, relu: bool):
    """SESR's collapsible linear block, uncollapsed: kxk conv to ``expand`` (no bias), 1x1
    back, the input added (residual blocks), ReLU."""
    y = _conv(keras, _conv(keras, x, expand, size, use_bias=False), out, 1)
    if residual:
        y = keras.layers.Add()([x, y])
    return keras.layers.ReLU()(y) if relu else y


def _sesr(keras, inputs, classes: int, channels: int, blocks: int, expand: int):
    layers = keras.layers
    anchor = _conv(keras, inputs, 3 * SR_SCALE ** 2, 1)
    first = _linear_block(keras, inputs, channels, expand, 5, False, True)
    x = first
    for _ in range(blocks):
        x = _linear_block(keras, x, channels, expand, 3, True, True)
    x = layers.Add()([x, first])
    x = _linear_block(keras, x, 3 * SR_SCALE ** 2, expand, 5, False, False)
    return _pixel_shuffle(layers.Add()([x, anchor]))


def _srvgg(keras, inputs, classes: int, features: int, convs: int):
    layers = keras.layers
    x = inputs
    for _ in range(convs + 1):
        x = layers.PReLU(shared_axes=[1, 2])(_conv(keras, x, features, 3))
    x = _pixel_shuffle(_conv(keras, x, 3 * SR_SCALE ** 2, 3))
    return layers.Add()([x, layers.UpSampling2D(SR_SCALE, interpolation="nearest")(inputs)])


def _dense_block(keras, x, features: int, grow: int):
    """ESRGAN's residual dense block: five 3x3 convs, each on all earlier outputs."""
    layers = keras.layers
    outputs = [x]
    for _ in range(4):
        y = _conv(keras, layers.Concatenate()(outputs) if len(outputs) > 1 else x, grow, 3)
        outputs.append(layers.LeakyReLU(negative_slope=0.2)(y))
    y = _conv(keras, layers.Concatenate()(outputs), features, 3)
    return layers.Add()([layers.Rescaling(0.2)(y), x])


def _rrdb(keras, inputs, classes: int, features: int, grow: int, blocks: int):
    layers = keras.layers
    lrelu = lambda y: layers.LeakyReLU(negative_slope=0.2)(y)  # noqa: E731
    first = _conv(keras, inputs, features, 3)
    x = first
    for _ in range(blocks):
        y = x
        for _ in range(3):
            y = _dense_block(keras, y, features, grow)
        x = layers.Add()([layers.Rescaling(0.2)(y), x])
    x = layers.Add()([first, _conv(keras, x, features, 3)])
    for _ in range(2):
        x = lrelu(_conv(keras, layers.UpSampling2D(2, interpolation="nearest")(x), features, 3))
    return _conv(keras, lrelu(_conv(keras, x, features, 3)), 3, 3)


def _depth_to_space_layer():
    import keras

    class DepthToSpace(keras.layers.Layer):
        """Pixel shuffle: TensorFlow's depth_to_space (the DEPTH_TO_SPACE op)."""

        def __init__(self, block: int, **kwargs):
            super().__init__(**kwargs)
            self.block = block

        def call(self, x):
            import tensorflow as tf

            return tf.nn.depth_to_space(x, self.block)

        def compute_output_shape(self, shape):
            b = self.block
            return (shape[0], shape[1] * b, shape[2] * b, shape[3] // (b * b))

    return DepthToSpace


def _class_token_layer():
    import keras

    class ClassToken(keras.layers.Layer):
        """Prepends a learned class token and adds learned position embeddings."""

        def __init__(self, dim: int, tokens: int, **kwargs):
            super().__init__(**kwargs)
            self.dim, self.tokens = dim, tokens

        def build(self, input_shape):
            self.token = self.add_weight(shape=(1, 1, self.dim), initializer="random_normal")
            self.position = self.add_weight(shape=(1, self.tokens + 1, self.dim),
                                            initializer="random_normal")

        def call(self, x):
            token = keras.ops.broadcast_to(self.token, (keras.ops.shape(x)[0], 1, self.dim))
            return keras.ops.concatenate([token, x], axis=1) + self.position

    return ClassToken


def _ClassToken(dim: int, tokens: int):  # noqa: N802 - a layer constructor
    return _class_token_layer()(dim, tokens)
