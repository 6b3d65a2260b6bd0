"""Weight-standardised convolution, the convolution of BiT ResNets."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._export import export
from keras_vit.utils import to_pair


@export("keras_vit.layers.StdConv2D")
@keras.saving.register_keras_serializable(package="keras_vit")
class StdConv2D(keras.layers.Layer):
    """A bias-free 2-D convolution with weight standardisation.

    Before each use, every output channel's kernel is standardised over its
    `(height, width, in_channels)` entries: `w = (w - mean) / (std + eps)`
    (population standard deviation), as in the reference hybrid models. With
    GroupNorm after it, this is the "BiT" ResNet-v2 recipe of the paper's
    hybrid (§3.1). Padding is `"same"` (TensorFlow/Flax convention).

    Args:
        filters: Number of output channels.
        kernel_size: Int or `(height, width)`.
        strides: Int or `(height, width)`. Defaults to 1.
        epsilon: Added to the standard deviation. Defaults to 1e-5.
        kernel_initializer: Defaults to `"he_normal"`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Images of shape `(batch, height, width, channels)`.

    Example:

    >>> conv = keras_vit.layers.StdConv2D(64, 7, strides=2)
    >>> conv(np.zeros((1, 224, 224, 3), "float32")).shape
    (1, 112, 112, 64)

    Reference:
    - [Kolesnikov et al., 2020](https://arxiv.org/abs/1912.11370) (BiT).
    """

    def __init__(
        self,
        filters: int,
        kernel_size: int | tuple[int, int],
        strides: int | tuple[int, int] = 1,
        epsilon: float = 1e-5,
        kernel_initializer="he_normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.kernel_size = to_pair(kernel_size, "kernel_size")
        self.strides = to_pair(strides, "strides")
        self.epsilon = float(epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        channels = input_shape[-1]
        self.kernel = self.add_weight(
            name="kernel",
            shape=(*self.kernel_size, channels, self.filters),
            initializer=self.kernel_initializer,
        )
        self.input_spec = keras.InputSpec(ndim=4, axes={-1: channels})

    def standardized_kernel(self):
        """Returns the kernel after weight standardisation, in float32."""
        kernel = ops.cast(self.kernel, "float32")
        mean = ops.mean(kernel, axis=(0, 1, 2), keepdims=True)
        std = ops.std(kernel, axis=(0, 1, 2), keepdims=True)
        return (kernel - mean) / (std + self.epsilon)

    def call(self, inputs):
        kernel = ops.cast(self.standardized_kernel(), inputs.dtype)
        return ops.conv(inputs, kernel, strides=self.strides, padding="same")

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape
        out = [
            None if size is None else -(-size // stride)
            for size, stride in zip((height, width), self.strides, strict=True)
        ]
        return (batch, *out, self.filters)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": self.filters,
                "kernel_size": self.kernel_size,
                "strides": self.strides,
                "epsilon": self.epsilon,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
            }
        )
        return config
