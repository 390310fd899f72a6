"""Keras definitions of corpus models that `keras.applications` does not ship.

Each follows its paper / torchvision definition layer for layer (the shapes a latency
depends on; weights are random): ResNet-18/34 (basic blocks, He et al. 2015), Wide
ResNet-50-2 (torchvision: bottleneck v1.5 with twice the inner width), SqueezeNet 1.1
(Iandola et al., the torchvision 1.1 variant) and ViT-Ti/16, ViT-B/16 (Dosovitskiy et al.,
a class token, learned position embeddings, pre-norm blocks).

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
}


def build_network(keras, builder: str, inputs, classes: int):
    """The Keras model ``builder`` names (see `NETWORKS`) on ``inputs``."""
    kind, settings = NETWORKS[builder]
    body = {"resnet": _resnet, "squeezenet": _squeezenet, "vit": _vit}[kind]
    return keras.Model(inputs, body(keras, inputs, classes, **settings), name=builder)


def _conv_bn(keras, x, filters: int, size: int, stride: int = 1, relu: bool = True):
    layers = keras.layers
    x = layers.Conv2D(filters, size, strides=stride, padding="same", use_bias=False)(x)
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
