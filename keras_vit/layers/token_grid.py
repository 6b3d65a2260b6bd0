"""Lays a ViT's patch tokens out on their grid: a spatial feature map."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._export import export
from keras_vit.utils import to_pair


@export("keras_vit.layers.TokenGrid")
@keras.saving.register_keras_serializable(package="keras_vit")
class TokenGrid(keras.layers.Layer):
    """Drops the prefix tokens and reshapes the patch tokens to their grid.

    A ViT's sequence is `[prefix tokens, patches]`, the patches in the
    row-major order of the patch embedding. This layer removes the
    `num_prefix_tokens` (class, distillation and register tokens) and
    returns the patches as a map `(batch, h, w, dim)` for dense tasks:
    timm's `forward_intermediates(..., output_fmt="NCHW")` maps, channels
    last. The grid is read in the graph from `grid_source`, the tensor the
    patch embedding ran on (the images, padded images, or a hybrid's ResNet
    map): its height and width floor-divided by `patch_size`, as the
    embedding's convolution computes them. So a dynamic-size model gives
    each batch's grid.

    Args:
        num_prefix_tokens: Tokens before the patches, dropped. Defaults to 0.
        patch_size: The patch size on `grid_source`, an int or `(height,
            width)`. Defaults to 1 (`grid_source` already has the grid's
            height and width).
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tokens `(batch, num_prefix_tokens + h * w, dim)`.
        grid_source: The tensor the patch embedding ran on, `(batch, height,
            width, channels)`; only its shape is read.

    Returns:
        The patch tokens `(batch, height // ph, width // pw, dim)`.

    Example:

    >>> layer = keras_vit.layers.TokenGrid(num_prefix_tokens=5, patch_size=16)
    >>> images = np.zeros((2, 160, 288, 3), "float32")  # a 10 x 18 grid
    >>> layer(np.zeros((2, 5 + 180, 32), "float32"), grid_source=images).shape
    (2, 10, 18, 32)
    """

    def __init__(
        self,
        num_prefix_tokens: int = 0,
        patch_size: int | tuple[int, int] = 1,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if int(num_prefix_tokens) < 0:
            raise ValueError(
                "`num_prefix_tokens` must be >= 0. "
                f"Received: num_prefix_tokens={num_prefix_tokens}"
            )
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.patch_size = to_pair(patch_size, "patch_size")

    def call(self, inputs, grid_source):
        shape = ops.shape(grid_source)
        grid_h = shape[1] // self.patch_size[0]
        grid_w = shape[2] // self.patch_size[1]
        patches = inputs[:, self.num_prefix_tokens :]  # (B, h * w, D)
        return ops.reshape(
            patches, (ops.shape(inputs)[0], grid_h, grid_w, ops.shape(inputs)[-1])
        )  # (B, h, w, D)

    def compute_output_shape(self, input_shape, grid_source_shape=None):
        height, width = (
            (None, None) if grid_source_shape is None else grid_source_shape[1:3]
        )
        grid = [
            None if size is None else size // patch
            for size, patch in zip((height, width), self.patch_size, strict=True)
        ]
        return (input_shape[0], *grid, input_shape[-1])

    def compute_output_spec(self, inputs, grid_source):
        shape = self.compute_output_shape(inputs.shape, grid_source.shape)
        return keras.KerasTensor(shape, dtype=inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"num_prefix_tokens": self.num_prefix_tokens, "patch_size": self.patch_size}
        )
        return config
