"""Keras definitions of corpus models that `keras.applications` does not ship.

Each follows its paper / torchvision definition layer for layer (the shapes a latency
depends on; weights are random): ResNet-18/34 (basic blocks, He et al. 2015), Wide
ResNet-50-2 (torchvision: bottleneck v1.5 with twice the inner width), SqueezeNet 1.1
(Iandola et al., the torchvision 1.1 variant), ViT-Ti/16, ViT-B/16 (Dosovitskiy et al.,
a class token, learned position embeddings, pre-norm blocks), and the torchvision
networks AI Hub exports: ShuffleNetV2 x0.5 (Ma et al. 2018), RegNetX-3.2GF and
RegNetY-800MF (Radosavovic et al. 2020; torchvision's stage widths, depths and group
widths, read from its `BlockParams`) and GoogLeNet (Szegedy et al. 2014, torchvision's
variant: BN after every conv, a 3x3 conv in the "5x5" branch; its input transform, three
element-wise ops on the image, left out).

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
}


def build_network(keras, builder: str, inputs, classes: int):
    """The Keras model ``builder`` names (see `NETWORKS`) on ``inputs``."""
    kind, settings = NETWORKS[builder]
    body = {"resnet": _resnet, "squeezenet": _squeezenet, "vit": _vit,
            "shufflenet": _shufflenet, "regnet": _regnet, "googlenet": _googlenet}[kind]
    return keras.Model(inputs, body(keras, inputs, classes, **settings), name=builder)


def _conv_bn(keras, x, filters: int, size: int, stride: int = 1, relu: bool = True,
             groups: int = 1):
    layers = keras.layers
    x = layers.Conv2D(filters, size, strides=stride, padding="same", use_bias=False,
                      groups=groups)(x)
    x = layers.BatchNormalization(epsilon=1e-5)(x)
    return layers.ReLU()(x) if relu else x


def _resnet(keras, inputs, classes: int, blocks, bottleneck: bool, width: int):
    layers = keras.layers
    x = _conv_bn(keras, inputs, 64, 7, 2)
    x = layers.MaxPooling2D(3, 2, padding="same")(x)
    expansion = 4 if bottleneck else 1
    for stage, count in enumerate(blocks):
        planes = 64 * 2 ** stage
        for index in range(count):
            stride = 2 if stage and not index else 1
            x = _resnet_block(keras, x, planes, stride, bottleneck, width, expansion)
    x = layers.GlobalAveragePooling2D()(x)
    return layers.Dense(classes)(x)


def _resnet_block(keras, x, planes: int, stride: int, bottleneck: bool, width: int,
                  expansion: int):
    layers = keras.layers
    out_channels = planes * expansion
    shortcut = x
    if stride != 1 or x.shape[-1] != out_channels:
        shortcut = _conv_bn(keras, x, out_channels, 1, stride, relu=False)
    if bottleneck:  # torchvision v1.5: the stride sits on the 3x3
        y = _conv_bn(keras, x, planes * width, 1)
        y = _conv_bn(keras, y, planes * width, 3, stride)
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
