"""Learned 1-D position embeddings (Eq. 1), resizable to a new patch grid.

Static models add the table as it is. A dynamic-size model keeps the table
of its `grid_size` (the checkpoint's grid) and interpolates it in the graph
to the grid of each batch it receives, with the same weight matrices the
NumPy resampler uses (`keras_vit.resample.weight_matrix`).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_vit._export import export
from keras_vit.resample import resample_position_embedding
from keras_vit.resample import resolve_method
from keras_vit.resample import weight_matrix
from keras_vit.utils import to_pair


@export("keras_vit.layers.AddPositionEmbedding")
@keras.saving.register_keras_serializable(package="keras_vit")
class AddPositionEmbedding(keras.layers.Layer):
    """Adds a learned position embedding to a token sequence.

    The table has one row per prefix token (the class token) followed by one
    row per patch of a `grid_size` grid in row-major order, as in the original
    checkpoints' `Transformer/posembed_input/pos_embedding`.

    Args:
        grid_size: The patch grid `(height, width)` (or an int for a square
            grid) the sequence comes from.
        num_prefix_tokens: Tokens before the patches (1 with a class token,
            0 without). Defaults to 1.
        initializer: Initializer of the table. Defaults to a normal
            distribution with standard deviation 0.02, as in the reference.
        dynamic: Accept any grid at run time: the table (of `grid_size`) is
            resampled in the graph to the grid of the feature map passed as
            `grid_source`. Defaults to `False` (a fixed grid).
        patch_size: With `dynamic`, the patch size on `grid_source`: the grid
            is `grid_source`'s height and width floor-divided by it, as the
            patch embedding's convolution computes it.
        resample_method: With `dynamic`, how the table is resampled:
            `"bilinear"` (default; corners aligned, as the reference and
            `keras_vit.with_image_size`), or another method or named mode
            of `keras_vit.resample` (`"timm"`, `"huggingface"`).
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, num_prefix_tokens + h * w, dim)`.
        grid_source: With `dynamic`, the tensor the patch embedding ran on,
            `(batch, height, width, channels)`.

    Returns:
        Tensor of the same shape: `inputs + table`.

    Example:

    >>> layer = keras_vit.layers.AddPositionEmbedding(grid_size=(14, 14))
    >>> layer(np.zeros((2, 197, 768), "float32")).shape
    (2, 197, 768)
    >>> layer.resampled((24, 24)).shape  # for a 384 px model at patch 16
    (1, 577, 768)
    >>> dynamic = keras_vit.layers.AddPositionEmbedding(
    ...     (14, 14), dynamic=True, patch_size=16)
    >>> images = np.zeros((2, 160, 288, 3), "float32")  # a 10 x 18 grid
    >>> dynamic(np.zeros((2, 181, 768), "float32"), grid_source=images).shape
    (2, 181, 768)

    Reference:
    - [Dosovitskiy et al., 2021](https://arxiv.org/abs/2010.11929), Eq. 1
      and §3.2 (fine-tuning at higher resolution).
    """

    def __init__(
        self,
        grid_size: int | tuple[int, int],
        num_prefix_tokens: int = 1,
        initializer=None,
        dynamic: bool = False,
        patch_size: int | tuple[int, int] | None = None,
        resample_method: str = "bilinear",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.grid_size = to_pair(grid_size, "grid_size")
        self.dynamic = bool(dynamic)
        if self.dynamic and patch_size is None:
            raise ValueError("`dynamic=True` needs the `patch_size` of the grid.")
        self.patch_size = (
            None if patch_size is None else to_pair(patch_size, "patch_size")
        )
        self.resample_method = resample_method
        self._method = resolve_method(resample_method, None)
        if int(num_prefix_tokens) < 0:
            raise ValueError(
                "`num_prefix_tokens` must be >= 0. "
                f"Received: num_prefix_tokens={num_prefix_tokens}"
            )
        self.num_prefix_tokens = int(num_prefix_tokens)
        if initializer is None:
            initializer = keras.initializers.RandomNormal(stddev=0.02)
        self.initializer = keras.initializers.get(initializer)

    @property
    def num_positions(self) -> int:
        return self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]

    def build(self, input_shape):
        length = input_shape[1]
        if not self.dynamic and length is not None and length != self.num_positions:
            raise ValueError(
                f"AddPositionEmbedding with grid_size={self.grid_size} and "
                f"num_prefix_tokens={self.num_prefix_tokens} expects "
                f"{self.num_positions} tokens. Received: input_shape="
                f"{input_shape}"
            )
        self.embedding = self.add_weight(
            name="embedding",
            shape=(1, self.num_positions, input_shape[-1]),
            initializer=self.initializer,
        )

    def call(self, inputs, grid_source=None):
        if not self.dynamic:
            return inputs + ops.cast(self.embedding, inputs.dtype)  # (B, N, D)
        if grid_source is None:
            raise ValueError("A dynamic AddPositionEmbedding needs `grid_source`.")
        shape = ops.shape(grid_source)
        grid_h = shape[1] // self.patch_size[0]
        grid_w = shape[2] // self.patch_size[1]
        return inputs + ops.cast(self.table_for(grid_h, grid_w), inputs.dtype)

    def table_for(self, grid_h, grid_w):
        """The table resampled in the graph to a `(grid_h, grid_w)` grid.

        `grid_h` and `grid_w` may be tensors. Returns `(1, prefix + h * w, D)`
        float32.
        """
        method, align_corners = self._method
        old_h, old_w = self.grid_size
        table = ops.cast(self.embedding, "float32")  # (1, prefix + h*w, D)
        prefix = table[:, : self.num_prefix_tokens]  # (1, prefix, D)
        grid = ops.reshape(table[0, self.num_prefix_tokens :], (old_h, old_w, -1))
        rows = weight_matrix(old_h, grid_h, method, align_corners, xp=ops)
        cols = weight_matrix(old_w, grid_w, method, align_corners, xp=ops)
        grid = ops.einsum("ih,hwd,jw->ijd", rows, grid, cols)  # (gh, gw, D)
        grid = ops.reshape(grid, (1, -1, ops.shape(table)[-1]))  # (1, gh*gw, D)
        return ops.concatenate([prefix, grid], axis=1)

    def resampled(
        self,
        new_grid_size: int | tuple[int, int],
        method: str = "bilinear",
        align_corners: bool | None = None,
    ) -> np.ndarray:
        """Returns this layer's table resampled to `new_grid_size`.

        Prefix rows are kept; the grid is interpolated as in the reference
        (bilinear, corners aligned) unless `method`/`align_corners` say
        otherwise. See `keras_vit.resample_position_embedding`.
        """
        return resample_position_embedding(
            self.embedding.numpy(),
            new_grid_size,
            old_grid_size=self.grid_size,
            num_prefix_tokens=self.num_prefix_tokens,
            method=method,
            align_corners=align_corners,
        )

    def compute_output_shape(self, input_shape, grid_source_shape=None):
        return input_shape

    def compute_output_spec(self, inputs, grid_source=None):
        return keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "grid_size": self.grid_size,
                "num_prefix_tokens": self.num_prefix_tokens,
                "initializer": keras.initializers.serialize(self.initializer),
                "dynamic": self.dynamic,
                "patch_size": self.patch_size,
                "resample_method": self.resample_method,
            }
        )
        return config
