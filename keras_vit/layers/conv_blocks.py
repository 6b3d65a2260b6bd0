"""The pre-activation residual block (basic or bottleneck) of a ResNet."""

from __future__ import annotations

import keras
from keras import ops

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


@keras.saving.register_keras_serializable(package="keras_vit")
class PreActBlock(keras.layers.Layer):
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

    >>> block = keras_vit.layers.PreActBlock(64, strides=2)
    >>> block(np.zeros((2, 56, 56, 256), "float32")).shape
    (2, 28, 28, 256)

    Reference:
    - [He et al., 2016](https://arxiv.org/abs/1603.05027), identity mappings.
    - xxxnell/how-do-vits-work, `models/preresnet_dnn_block.py`.
    """

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
            self.norm_3 = batch_norm("norm_3", policy)
            self.conv_3 = self._conv(self.out_channels, 1, "conv_3")
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

    def _strided(self, conv, x):
        if self.strides > 1:  # symmetric one-pixel padding, as PyTorch's
            x = ops.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
        return conv(x)

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
