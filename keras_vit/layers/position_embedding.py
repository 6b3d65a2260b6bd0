"""Learned 1-D position embeddings (Eq. 1), resizable to a new patch grid."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_vit.layers.utils import to_pair
from keras_vit.resample import resample_position_embedding


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
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, num_prefix_tokens + h * w, dim)`.

    Returns:
        Tensor of the same shape: `inputs + table`.

    Example:

    >>> layer = keras_vit.layers.AddPositionEmbedding(grid_size=(14, 14))
    >>> layer(np.zeros((2, 197, 768), "float32")).shape
    (2, 197, 768)
    >>> layer.resampled((24, 24)).shape  # for a 384 px model at patch 16
    (1, 577, 768)

    Reference:
    - [Dosovitskiy et al., 2021](https://arxiv.org/abs/2010.11929), Eq. 1
      and §3.2 (fine-tuning at higher resolution).
    """

    def __init__(
        self,
        grid_size: int | tuple[int, int],
        num_prefix_tokens: int = 1,
        initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.grid_size = to_pair(grid_size, "grid_size")
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
        if length is not None and length != self.num_positions:
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

    def call(self, inputs):
        return inputs + ops.cast(self.embedding, inputs.dtype)  # (B, N, D)

    def resampled(
        self,
        new_grid_size: int | tuple[int, int],
        method: str = "bilinear",
        align_corners: bool = True,
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

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "grid_size": self.grid_size,
                "num_prefix_tokens": self.num_prefix_tokens,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config
