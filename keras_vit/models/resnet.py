"""The BiT ResNet that feeds the hybrid ViTs (paper §3.1).

Weight-standardised convolutions, GroupNorm with 32 groups (eps 1e-6) and
bottleneck units, as in the reference hybrid. Layer names follow the original
checkpoint keys with `/` replaced by `_`: `conv_root`, `gn_root`,
`block1_unit1_conv1`, `block1_unit1_gn_proj`, ...
"""

from __future__ import annotations

import keras

from keras_vit.layers import StdConv2D
from keras_vit.models import layout as names
from keras_vit.models.variants import ResNetSpec

GROUP_NORM_GROUPS = 32
GROUP_NORM_EPSILON = 1e-6


def _group_norm(name: str, zero_init: bool = False) -> keras.layers.Layer:
    return keras.layers.GroupNormalization(
        groups=GROUP_NORM_GROUPS,
        epsilon=GROUP_NORM_EPSILON,
        gamma_initializer="zeros" if zero_init else "ones",
        name=name,
    )


def _bottleneck(x, features: int, strides: int, name: str):
    """`relu(proj(x) + gn3(conv3(relu(gn2(conv2(relu(gn1(conv1(x)))))))))`."""
    residual = x
    if x.shape[-1] != 4 * features or strides != 1:
        residual = StdConv2D(4 * features, 1, strides, name=f"{name}_conv_proj")(x)
        residual = _group_norm(f"{name}_gn_proj")(residual)
    y = StdConv2D(features, 1, name=f"{name}_conv1")(x)
    y = keras.layers.ReLU(name=f"{name}_relu1")(_group_norm(f"{name}_gn1")(y))
    y = StdConv2D(features, 3, strides, name=f"{name}_conv2")(y)
    y = keras.layers.ReLU(name=f"{name}_relu2")(_group_norm(f"{name}_gn2")(y))
    y = StdConv2D(4 * features, 1, name=f"{name}_conv3")(y)
    # Zero-initialised last scale: each unit starts as its shortcut.
    y = _group_norm(f"{name}_gn3", zero_init=True)(y)
    y = keras.layers.Add(name=f"{name}_add")([residual, y])
    return keras.layers.ReLU(name=f"{name}_out")(y)


def resnet_features(x, spec: ResNetSpec):
    """Applies the BiT ResNet stem and stages of `spec` to images `x`.

    Args:
        x: Symbolic images `(batch, height, width, channels)`.
        spec: The backbone's `ResNetSpec`.

    Returns:
        The feature map `(batch, height / stride, width / stride, channels)`
        with `spec.out_channels` channels.
    """
    x = StdConv2D(spec.width, 7, strides=2, name=names.ROOT_CONV)(x)
    x = keras.layers.ReLU(name="relu_root")(_group_norm(names.ROOT_NORM)(x))
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="pool_root")(x)
    for stage, units in enumerate(spec.layers):
        features = spec.width * 2**stage
        for unit in range(units):
            strides = 2 if stage > 0 and unit == 0 else 1
            x = _bottleneck(x, features, strides, names.unit_name(stage + 1, unit + 1))
    return x
