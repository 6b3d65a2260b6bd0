"""Splits images into patches and projects each one linearly (Eq. 1)."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._export import export
from keras_vit.utils import to_pair


@export("keras_vit.layers.PatchEmbedding")
@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEmbedding(keras.layers.Layer):
    """Cuts an image into non-overlapping patches and embeds each one.

    This is the linear projection `E` of Eq. 1 in the paper, written as a
    convolution whose kernel size and stride equal the patch size. The kernel
    is stored in `(patch_h, patch_w, channels, hidden_dim)` (HWIO) layout,
    which is exactly the layout of the original checkpoints' `embedding`
    kernel.

    Args:
        hidden_dim: Width `D` of each patch embedding.
        patch_size: Patch size, an int or a `(height, width)` pair.
        kernel_initializer: Initializer of the projection kernel. Defaults to
            `"lecun_normal"`, as in the reference implementation.
        bias_initializer: Initializer of the projection bias. Defaults to
            `"zeros"`.
        use_bias: Whether the projection has a bias (Perception Encoder's,
            followed by a LayerNorm, has none). Defaults to `True`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Images of shape `(batch, height, width, channels)`. `height`
            and `width` must be multiples of the patch size.

    Returns:
        Tensor of shape `(batch, (height // ph) * (width // pw), hidden_dim)`,
        patches in row-major order.

    Example:

    >>> images = np.zeros((2, 224, 224, 3), "float32")
    >>> keras_vit.layers.PatchEmbedding(768, 16)(images).shape
    (2, 196, 768)

    Reference:
    - [Dosovitskiy et al., 2021](https://arxiv.org/abs/2010.11929), Eq. 1.
    """

    def __init__(
        self,
        hidden_dim: int,
        patch_size: int | tuple[int, int],
        kernel_initializer="lecun_normal",
        bias_initializer="zeros",
        use_bias: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.use_bias = bool(use_bias)
        if int(hidden_dim) <= 0:
            raise ValueError(
                f"`hidden_dim` must be positive. Received: hidden_dim={hidden_dim}"
            )
        self.hidden_dim = int(hidden_dim)
        self.patch_size = to_pair(patch_size, "patch_size")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        if len(input_shape) != 4:
            raise ValueError(
                "PatchEmbedding expects images of shape (batch, height, width, "
                f"channels). Received: input_shape={input_shape}"
            )
        height, width, channels = input_shape[1:]
        self._check_image_size(height, width)
        if channels is None:
            raise ValueError(
                "The channel dimension of the images must be known. "
                f"Received: input_shape={input_shape}"
            )
        self.kernel = self.add_weight(
            name="kernel",
            shape=(*self.patch_size, channels, self.hidden_dim),
            initializer=self.kernel_initializer,
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias",
                shape=(self.hidden_dim,),
                initializer=self.bias_initializer,
            )
        self.input_spec = keras.InputSpec(ndim=4, axes={-1: channels})

    def _check_image_size(self, height, width):
        for size, patch, axis in zip(
            (height, width), self.patch_size, ("height", "width"), strict=True
        ):
            if size is not None and size % patch:
                raise ValueError(
                    f"The image {axis} ({size}) is not divisible by the patch "
                    f"{axis} ({patch}). Choose an image size that is a multiple "
                    f"of the patch size {self.patch_size}."
                )

    def call(self, inputs):
        kernel = ops.cast(self.kernel, self.compute_dtype)
        x = ops.conv(inputs, kernel, strides=self.patch_size, padding="valid")
        if self.bias is not None:
            x = x + ops.cast(self.bias, x.dtype)  # (B, h, w, D)
        batch_size, grid_h, grid_w = ops.shape(x)[0], ops.shape(x)[1], ops.shape(x)[2]
        return ops.reshape(x, (batch_size, grid_h * grid_w, self.hidden_dim))

    def compute_output_shape(self, input_shape):
        batch, height, width = input_shape[:3]
        if height is None or width is None:
            return (batch, None, self.hidden_dim)
        grid_h = height // self.patch_size[0]
        grid_w = width // self.patch_size[1]
        return (batch, grid_h * grid_w, self.hidden_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_dim": self.hidden_dim,
                "patch_size": self.patch_size,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "use_bias": self.use_bias,
            }
        )
        return config
