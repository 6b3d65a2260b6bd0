"""Windowed multi-head self-attention over a feature map, as in AlterNet."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_vit._export import export
from keras_vit.parkkim.layers.conv_blocks import torch_kernel_initializer


def window_shape(height: int, width: int, window_size: int) -> tuple[int, int]:
    """The attention window on a `height x width` map: `window_size` per side,
    or the whole side where the map is no larger than the window."""
    return min(window_size, height), min(window_size, width)


def relative_position_index(window_height: int, window_width: int) -> np.ndarray:
    """`(T, T)` indices into the flattened `(2h-1, 2w-1)` bias table.

    Entry `[q, k]` is the index of the offset `position(k) - position(q)`
    for the `T = h * w` positions of a window in row-major order.
    """
    rows, cols = np.divmod(np.arange(window_height * window_width), window_width)
    d_row = rows[None, :] - rows[:, None] + window_height - 1
    d_col = cols[None, :] - cols[:, None] + window_width - 1
    return (d_row * (2 * window_width - 1) + d_col).astype("int32")


@export("keras_vit.parkkim.layers.WindowAttention2D")
@keras.saving.register_keras_serializable(package="keras_vit")
class WindowAttention2D(keras.layers.Layer):
    """Multi-head self-attention inside non-overlapping windows of a map.

    The map is cut into `window_size x window_size` windows (the whole map
    where it is no larger than the window: global attention), and every
    position attends to the positions of its window:
    `softmax(q k^T / sqrt(head_dim) + B) v`, where `B` is a learned bias
    indexed by the relative offset of query and key, one `(2w-1, 2w-1)`
    table shared by all heads (as the paper's code). Queries, keys and values
    are bias-free 1x1 projections to `num_heads * head_dim` channels; the
    output projection (with bias) maps the heads to `output_dim` channels,
    followed by dropout. The window grid is fixed when the layer is built, so
    the height and width must be known then and be multiples of the window.

    Args:
        num_heads: Number of attention heads.
        head_dim: Width of each head.
        output_dim: Channels of the output.
        window_size: Side of the square windows. Defaults to 7.
        dropout_rate: Dropout after the output projection. Defaults to 0.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, height, width, channels)`.
        training: Python bool; dropout is only active when `True`.
        return_attention_scores: If `True`, also return the attention
            probabilities `(batch, windows, heads, T, T)` in float32, with
            windows in row-major order and `T` positions per window.

    Example:

    >>> layer = keras_vit.parkkim.layers.WindowAttention2D(4, 32, 256, window_size=7)
    >>> layer(np.zeros((2, 14, 14, 64), "float32")).shape  # 2x2 windows
    (2, 14, 14, 256)

    Reference:
    - [Park & Kim, 2022](https://arxiv.org/abs/2202.06709), AlterNet.
    - xxxnell/how-do-vits-work, `models/alternet.py` (`LocalAttention`) and
      `models/attentions.py` (`Attention2d`).
    """

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        output_dim: int,
        window_size: int = 7,
        dropout_rate: float = 0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for key, value in (
            ("num_heads", num_heads),
            ("head_dim", head_dim),
            ("output_dim", output_dim),
            ("window_size", window_size),
        ):
            if int(value) <= 0:
                raise ValueError(f"`{key}` must be positive. Received: {key}={value}")
        if not 0.0 <= dropout_rate < 1.0:
            raise ValueError(
                "`dropout_rate` must be in [0, 1). Received: "
                f"dropout_rate={dropout_rate}"
            )
        self.num_heads = int(num_heads)
        self.head_dim = int(head_dim)
        self.output_dim = int(output_dim)
        self.window_size = int(window_size)
        self.dropout_rate = float(dropout_rate)

        policy = self.dtype_policy
        inner = self.num_heads * self.head_dim
        init = torch_kernel_initializer()
        self.query = keras.layers.Dense(
            inner, use_bias=False, kernel_initializer=init, name="query", dtype=policy
        )
        self.key_value = keras.layers.Dense(
            2 * inner,
            use_bias=False,
            kernel_initializer=init,
            name="key_value",
            dtype=policy,
        )
        self.output_projection = keras.layers.Dense(
            self.output_dim,
            kernel_initializer=init,
            name="output_projection",
            dtype=policy,
        )
        self.output_dropout = keras.layers.Dropout(
            self.dropout_rate, name="output_dropout", dtype=policy
        )

    def build(self, input_shape):
        _, height, width, _ = input_shape
        if height is None or width is None:
            raise ValueError(
                f"{self.name} needs a known height and width. Received: "
                f"input_shape={input_shape}"
            )
        self.window = window_shape(height, width, self.window_size)
        if height % self.window[0] or width % self.window[1]:
            raise ValueError(
                f"window_size={self.window_size} does not tile the "
                f"{height}x{width} map of {self.name}."
            )
        rows, cols = self.window
        self.relative_position_bias = self.add_weight(
            name="relative_position_bias",
            shape=(2 * rows - 1, 2 * cols - 1),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
        )
        self._bias_index = relative_position_index(rows, cols)
        self.query.build(input_shape)
        self.key_value.build(input_shape)
        self.output_projection.build(
            (*input_shape[:-1], self.num_heads * self.head_dim)
        )

    def call(self, inputs, training=None, return_attention_scores=False):
        heads, head_dim = self.num_heads, self.head_dim
        _, height, width, _ = inputs.shape
        rows, cols = self.window
        grid = (height // rows, width // cols)
        tokens = rows * cols
        dtype = keras.backend.standardize_dtype(inputs.dtype)

        # (B, nH, h, nW, w, parts, heads, Dh) -> (parts, B*windows, heads, T, Dh)
        def to_windows(x, parts):
            x = ops.reshape(
                x, (-1, grid[0], rows, grid[1], cols, parts, heads, head_dim)
            )
            x = ops.transpose(x, (5, 0, 1, 3, 6, 2, 4, 7))
            return ops.reshape(x, (parts, -1, heads, tokens, head_dim))

        query = to_windows(self.query(inputs), 1)[0]  # (B', heads, T, Dh)
        key, value = ops.unstack(to_windows(self.key_value(inputs), 2), 2, axis=0)
        query = query * ops.cast(head_dim**-0.5, dtype)
        logits = ops.einsum("bhqd,bhkd->bhqk", query, key)  # (B', heads, T, T)
        table = ops.reshape(ops.cast(self.relative_position_bias, "float32"), (-1,))
        bias = ops.take(table, self._bias_index)  # (T, T)
        scores = ops.softmax(ops.cast(logits, "float32") + bias, axis=-1)
        context = ops.einsum("bhqk,bhkd->bhqd", ops.cast(scores, dtype), value)

        # (B', heads, T, Dh) -> (B, H, W, heads * Dh)
        context = ops.reshape(
            context, (-1, grid[0], grid[1], heads, rows, cols, head_dim)
        )
        context = ops.transpose(context, (0, 1, 4, 2, 5, 3, 6))
        context = ops.reshape(context, (-1, height, width, heads * head_dim))
        outputs = self.output_projection(context)  # (B, H, W, output_dim)
        outputs = self.output_dropout(outputs, training=training)
        if return_attention_scores:
            windows = grid[0] * grid[1]
            return outputs, ops.reshape(scores, (-1, windows, heads, tokens, tokens))
        return outputs

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.output_dim)

    def compute_output_spec(self, inputs, training=None, return_attention_scores=False):
        shape = (*inputs.shape[:-1], self.output_dim)
        outputs = keras.KerasTensor(shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return outputs
        batch, height, width, _ = inputs.shape
        rows, cols = window_shape(height, width, self.window_size)
        windows = (height // rows) * (width // cols)
        scores_shape = (batch, windows, self.num_heads, rows * cols, rows * cols)
        return outputs, keras.KerasTensor(scores_shape, "float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "head_dim": self.head_dim,
                "output_dim": self.output_dim,
                "window_size": self.window_size,
                "dropout_rate": self.dropout_rate,
            }
        )
        return config
