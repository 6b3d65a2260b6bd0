"""The residual blocks of the ResNets (pre- and post-activation) and their pooling."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._export import export
from keras_vit.layers.drop_path import DropPath

# PyTorch's defaults, which the paper's code keeps: BatchNorm2d(eps=1e-5,
# momentum=0.1), i.e. Keras momentum 0.9; convolution kernels drawn from
# U(+-1/sqrt(fan_in)), i.e. variance 1/(3 fan_in).
BATCH_NORM_EPSILON = 1e-5
BATCH_NORM_MOMENTUM = 0.9


def torch_kernel_initializer() -> keras.initializers.Initializer:
    """PyTorch's default convolution/linear kernel initialiser."""
    return keras.initializers.VarianceScaling(1 / 3, "fan_in", "uniform")


def batch_norm(name: str, dtype=None) -> keras.layers.BatchNormalization:
    """A BatchNormalization with PyTorch's epsilon and momentum."""
    return keras.layers.BatchNormalization(
        momentum=BATCH_NORM_MOMENTUM,
        epsilon=BATCH_NORM_EPSILON,
        name=name,
        dtype=dtype,
    )


class _ResidualBlock(keras.layers.Layer):
    """What both residual blocks share: the constructor, convolutions, shapes,
    config.

    Both blocks hold the same layers: `norm_1`, `norm_2`, `conv_1`,
    `conv_2` and, as a bottleneck, `conv_3` and `norm_3` (created in the
    order `_bottleneck_end` names, which is the order of `weights`), a
    `shortcut` made in `build` when the block changes the width or the
    resolution, and `drop_path`. How they are wired is each block's `call`.
    """

    # The bottleneck's last two layers, in the order the branch runs them.
    _bottleneck_end = ("norm_3", "conv_3")

    def __init__(
        self,
        filters: int,
        strides: int = 1,
        bottleneck: bool = True,
        drop_path_rate: float = 0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if int(filters) <= 0:
            raise ValueError(f"`filters` must be positive. Received: filters={filters}")
        if strides not in (1, 2):
            raise ValueError(f"`strides` must be 1 or 2. Received: strides={strides}")
        self.filters = int(filters)
        self.strides = int(strides)
        self.bottleneck = bool(bottleneck)
        self.drop_path_rate = float(drop_path_rate)
        self.out_channels = self.filters * (4 if self.bottleneck else 1)

        policy = self.dtype_policy
        self.norm_1 = batch_norm("norm_1", policy)
        self.norm_2 = batch_norm("norm_2", policy)
        if self.bottleneck:
            self.conv_1 = self._conv(self.filters, 1, "conv_1")
            self.conv_2 = self._conv(self.filters, 3, "conv_2", self.strides)
            last = {
                "norm_3": lambda: batch_norm("norm_3", policy),
                "conv_3": lambda: self._conv(self.out_channels, 1, "conv_3"),
            }
            for name in self._bottleneck_end:
                setattr(self, name, last[name]())
        else:
            self.conv_1 = self._conv(self.filters, 3, "conv_1", self.strides)
            self.conv_2 = self._conv(self.out_channels, 3, "conv_2")
        self.shortcut = None
        self.drop_path = DropPath(self.drop_path_rate, name="drop_path", dtype=policy)

    def _conv(self, filters, size, name, strides=1):
        # Strided 3x3 convolutions are padded by hand in `_strided`.
        padding = "valid" if strides > 1 or size == 1 else "same"
        return keras.layers.Conv2D(
            filters,
            size,
            strides,
            padding=padding,
            use_bias=False,
            kernel_initializer=torch_kernel_initializer(),
            name=name,
            dtype=self.dtype_policy,
        )

    def _strided(self, conv, x):
        if self.strides > 1:  # symmetric one-pixel padding, as PyTorch's
            x = ops.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
        return conv(x)

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape

        def scale(size):
            return None if size is None else -(-size // self.strides)

        return (batch, scale(height), scale(width), self.out_channels)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": self.filters,
                "strides": self.strides,
                "bottleneck": self.bottleneck,
                "drop_path_rate": self.drop_path_rate,
            }
        )
        return config


@export("keras_vit.parkkim.layers.PreActBlock")
@keras.saving.register_keras_serializable(package="keras_vit")
class PreActBlock(_ResidualBlock):
    """A pre-activation residual block: BN-ReLU before every convolution.

    Bottleneck (`bottleneck=True`, 4x expansion):
    `x + conv1x1(relu(bn(conv3x3(relu(bn(conv1x1(relu(bn(x)))))))))`.
    Basic: `x + conv3x3(relu(bn(conv3x3(relu(bn(x))))))`. The first
    convolution with a 3x3 kernel carries the stride. When the block changes
    the width or the resolution, the shortcut is a strided 1x1 convolution of
    the pre-activated input `relu(bn(x))`; otherwise it is `x` itself. No
    convolution has a bias and nothing follows the addition, as in the
    paper's code. Strided 3x3 convolutions pad one pixel on every side
    (PyTorch's geometry), so their outputs line up with the 1x1 shortcut.

    Args:
        filters: The block's width; it outputs `4 * filters` channels as a
            bottleneck, `filters` as a basic block.
        strides: 1, or 2 to halve the resolution. Defaults to 1.
        bottleneck: Bottleneck (default) or basic block.
        drop_path_rate: Stochastic depth of the residual branch. Defaults
            to 0.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, height, width, channels)`.
        training: Python bool; batch statistics and drop path when `True`.

    Example:

    >>> block = keras_vit.parkkim.layers.PreActBlock(64, strides=2)
    >>> block(np.zeros((2, 56, 56, 256), "float32")).shape
    (2, 28, 28, 256)

    Reference:
    - [He et al., 2016](https://arxiv.org/abs/1603.05027), identity mappings.
    - xxxnell/how-do-vits-work, `models/preresnet_dnn_block.py`.
    """

    def build(self, input_shape):
        channels = input_shape[-1]
        # Kernels depend on channels only; the spatial size is left open, as
        # the strided 3x3 convolution sees the padded map.
        outer, inner = (None, None, None, channels), (None, None, None, self.filters)
        if channels != self.out_channels or self.strides != 1:
            self.shortcut = self._conv(self.out_channels, 1, "shortcut", self.strides)
            self.shortcut.build(outer)
        self.norm_1.build(outer)
        self.conv_1.build(outer)
        self.norm_2.build(inner)
        self.conv_2.build(inner)
        if self.bottleneck:
            self.norm_3.build(inner)
            self.conv_3.build(inner)

    def call(self, inputs, training=None):
        x = ops.relu(self.norm_1(inputs, training=training))  # (B, H, W, C)
        shortcut = inputs if self.shortcut is None else self.shortcut(x)
        if self.bottleneck:
            y = self.conv_1(x)  # (B, H, W, F)
            y = ops.relu(self.norm_2(y, training=training))
            y = self._strided(self.conv_2, y)  # (B, H/s, W/s, F)
            y = ops.relu(self.norm_3(y, training=training))
            y = self.conv_3(y)  # (B, H/s, W/s, 4F)
        else:
            y = self._strided(self.conv_1, x)  # (B, H/s, W/s, F)
            y = ops.relu(self.norm_2(y, training=training))
            y = self.conv_2(y)  # (B, H/s, W/s, F)
        return shortcut + self.drop_path(y, training=training)


@export("keras_vit.parkkim.layers.PostActBlock")
@keras.saving.register_keras_serializable(package="keras_vit")
class PostActBlock(_ResidualBlock):
    """A post-activation residual block: BN after every convolution, ReLU last.

    The original ResNet block (He et al., 2016a), as Park & Kim's code
    writes it (`models/resnet_dnn_block.py`). Bottleneck
    (`bottleneck=True`, 4x expansion):
    `relu(shortcut(x) + bn(conv1x1(relu(bn(conv3x3(relu(bn(conv1x1(x)))))))))`.
    Basic: `relu(shortcut(x) + bn(conv3x3(relu(bn(conv3x3(x))))))`. The 3x3
    convolution (the first one of a basic block) carries the stride. When
    the block changes the width or the resolution, the shortcut is a strided
    1x1 convolution of the input followed by a BatchNorm; otherwise it is
    `x` itself. No convolution has a bias. Strided 3x3 convolutions pad one
    pixel on every side (PyTorch's geometry), so their outputs line up with
    the 1x1 shortcut.

    Args:
        filters: The block's width; it outputs `4 * filters` channels as a
            bottleneck, `filters` as a basic block.
        strides: 1, or 2 to halve the resolution. Defaults to 1.
        bottleneck: Bottleneck (default) or basic block.
        drop_path_rate: Stochastic depth of the residual branch (before the
            addition). Defaults to 0.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, height, width, channels)`.
        training: Python bool; batch statistics and drop path when `True`.

    Example:

    >>> block = keras_vit.parkkim.layers.conv_blocks.PostActBlock(64, strides=2)
    >>> block(np.zeros((2, 56, 56, 256), "float32")).shape
    (2, 28, 28, 256)

    Reference:
    - [He et al., 2016](https://arxiv.org/abs/1512.03385).
    - xxxnell/how-do-vits-work, `models/resnet_dnn_block.py`.
    """

    # Convolution, then BatchNorm: post-activation.
    _bottleneck_end = ("conv_3", "norm_3")
    shortcut_norm = None  # made in `build` with `shortcut`

    def build(self, input_shape):
        channels = input_shape[-1]
        outer, inner = (None, None, None, channels), (None, None, None, self.filters)
        if channels != self.out_channels or self.strides != 1:
            self.shortcut = self._conv(self.out_channels, 1, "shortcut", self.strides)
            self.shortcut_norm = batch_norm("shortcut_norm", self.dtype_policy)
            self.shortcut.build(outer)
            self.shortcut_norm.build((None, None, None, self.out_channels))
        self.conv_1.build(outer)
        self.norm_1.build(inner)
        self.conv_2.build(inner)
        if self.bottleneck:
            self.norm_2.build(inner)
            self.conv_3.build(inner)
            self.norm_3.build((None, None, None, self.out_channels))
        else:
            self.norm_2.build((None, None, None, self.out_channels))

    def call(self, inputs, training=None):
        shortcut = inputs
        if self.shortcut is not None:
            shortcut = self.shortcut_norm(self.shortcut(inputs), training=training)
        if self.bottleneck:
            y = ops.relu(self.norm_1(self.conv_1(inputs), training=training))
            y = self._strided(self.conv_2, y)  # (B, H/s, W/s, F)
            y = ops.relu(self.norm_2(y, training=training))
            y = self.norm_3(self.conv_3(y), training=training)  # (B, H/s, W/s, 4F)
        else:
            y = self._strided(self.conv_1, inputs)  # (B, H/s, W/s, F)
            y = ops.relu(self.norm_1(y, training=training))
            y = self.norm_2(self.conv_2(y), training=training)  # (B, H/s, W/s, F)
        return ops.relu(shortcut + self.drop_path(y, training=training))


@export("keras_vit.parkkim.layers.PaddedMaxPooling2D")
@keras.saving.register_keras_serializable(package="keras_vit")
class PaddedMaxPooling2D(keras.layers.Layer):
    """Max pooling with symmetric padding that never wins: PyTorch's `MaxPool2d`.

    `torch.nn.MaxPool2d(3, 2, padding=1)`, the ResNet stem's pooling, pads
    one pixel on every side with `-inf`; Keras's `padding="same"` pads
    `(0, 1)` for a 3x3 window with stride 2 on an even map, which shifts every
    window by one pixel. This layer pads `padding` pixels on every side with
    `-inf` (so a padded value is never the maximum) and pools without
    further padding, giving `floor((size + 2 * padding - pool_size) /
    strides) + 1` outputs per axis, as PyTorch.

    Args:
        pool_size: Side of the square window. Defaults to 3.
        strides: Step of the window. Defaults to 2.
        padding: Pixels added on every side; at most `pool_size // 2`.
            Defaults to 1.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, height, width, channels)`.

    Example:

    >>> pool = keras_vit.parkkim.layers.conv_blocks.PaddedMaxPooling2D(3, 2, 1)
    >>> pool(np.zeros((1, 112, 112, 64), "float32")).shape
    (1, 56, 56, 64)

    Reference:
    - PyTorch, `torch.nn.MaxPool2d`.
    """

    def __init__(
        self, pool_size: int = 3, strides: int = 2, padding: int = 1, **kwargs
    ):
        super().__init__(**kwargs)
        if int(pool_size) <= 0 or int(strides) <= 0:
            raise ValueError(
                "`pool_size` and `strides` must be positive. Received: "
                f"pool_size={pool_size}, strides={strides}"
            )
        if not 0 <= int(padding) <= int(pool_size) // 2:
            raise ValueError(
                f"`padding` must be in [0, pool_size // 2] (PyTorch's rule). "
                f"Received: padding={padding}, pool_size={pool_size}"
            )
        self.pool_size = int(pool_size)
        self.strides = int(strides)
        self.padding = int(padding)
        self.pool = keras.layers.MaxPooling2D(
            self.pool_size, self.strides, padding="valid", dtype=self.dtype_policy
        )

    def call(self, inputs):
        p = self.padding
        if p:
            x = ops.pad(
                inputs, ((0, 0), (p, p), (p, p), (0, 0)), constant_values=-float("inf")
            )  # (B, H + 2p, W + 2p, C)
        else:
            x = inputs
        return self.pool(x)

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape

        def scale(size):
            if size is None:
                return None
            return (size + 2 * self.padding - self.pool_size) // self.strides + 1

        return (batch, scale(height), scale(width), channels)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "pool_size": self.pool_size,
                "strides": self.strides,
                "padding": self.padding,
            }
        )
        return config
