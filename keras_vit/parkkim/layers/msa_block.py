"""AlterNet's pre-activation MSA block, the stand-in for a convolution block."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._export import export
from keras_vit.layers.drop_path import DropPath
from keras_vit.parkkim.layers.conv_blocks import batch_norm
from keras_vit.parkkim.layers.conv_blocks import torch_kernel_initializer
from keras_vit.parkkim.layers.local_attention import WindowAttention2D


@export("keras_vit.parkkim.layers.PreActAttentionBlock")
@keras.saving.register_keras_serializable(package="keras_vit")
class PreActAttentionBlock(keras.layers.Layer):
    """A residual block whose branch is windowed multi-head self-attention.

    `x + attention(bn_2(conv1x1(gelu(bn_1(x)))))`: the input is
    pre-activated (BatchNorm, then GELU), reduced by a bias-free 1x1
    convolution to `channels / expansion` channels and BatchNorm'ed, and
    `WindowAttention2D` maps it back to the block's output width. There is
    no MLP sub-block: in AlterNet the convolution block before each MSA
    block plays that part. When the width changes, the shortcut is a 1x1
    convolution of the pre-activated input. The block keeps the resolution.

    Args:
        filters: The block's width; it outputs `4 * filters` channels as a
            bottleneck, `filters` otherwise, like `PreActBlock`.
        num_heads: Number of attention heads.
        head_dim: Width of each head. Defaults to 64.
        window_size: Side of the attention windows. Defaults to 7.
        bottleneck: Bottleneck (4x expansion, default) or basic width.
        dropout_rate: Dropout after the attention's output projection.
        drop_path_rate: Stochastic depth of the residual branch.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, height, width, channels)`.
        training: Python bool; batch statistics, dropout and drop path.
        return_attention_scores: If `True`, return `(outputs, scores)` with
            the scores of `WindowAttention2D`.

    Example:

    >>> block = keras_vit.parkkim.layers.PreActAttentionBlock(256, num_heads=12)
    >>> block(np.zeros((2, 14, 14, 1024), "float32")).shape
    (2, 14, 14, 1024)

    Reference:
    - [Park & Kim, 2022](https://arxiv.org/abs/2202.06709), AlterNet.
    - xxxnell/how-do-vits-work, `models/alternet.py` (`AttentionBlockB`,
      the paper's default, pre-activation MSA block).
    """

    def __init__(
        self,
        filters: int,
        num_heads: int,
        head_dim: int = 64,
        window_size: int = 7,
        bottleneck: bool = True,
        dropout_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if int(filters) <= 0:
            raise ValueError(f"`filters` must be positive. Received: filters={filters}")
        self.filters = int(filters)
        self.num_heads = int(num_heads)
        self.head_dim = int(head_dim)
        self.window_size = int(window_size)
        self.bottleneck = bool(bottleneck)
        self.dropout_rate = float(dropout_rate)
        self.drop_path_rate = float(drop_path_rate)
        self.expansion = 4 if self.bottleneck else 1
        self.out_channels = self.filters * self.expansion

        policy = self.dtype_policy
        self.norm_1 = batch_norm("norm_1", policy)
        self.norm_2 = batch_norm("norm_2", policy)
        self.attention = WindowAttention2D(
            self.num_heads,
            self.head_dim,
            self.out_channels,
            window_size=self.window_size,
            dropout_rate=self.dropout_rate,
            name="attention",
            dtype=policy,
        )
        self.drop_path = DropPath(self.drop_path_rate, name="drop_path", dtype=policy)
        self.shortcut = None

    def _conv1x1(self, filters, name):
        return keras.layers.Conv2D(
            filters,
            1,
            use_bias=False,
            kernel_initializer=torch_kernel_initializer(),
            name=name,
            dtype=self.dtype_policy,
        )

    def build(self, input_shape):
        channels = input_shape[-1]
        if channels % self.expansion:
            raise ValueError(
                f"{self.name}: the input width {channels} is not a multiple of "
                f"the expansion {self.expansion}."
            )
        width = channels // self.expansion
        if channels != self.out_channels:
            self.shortcut = self._conv1x1(self.out_channels, "shortcut")
            self.shortcut.build(input_shape)
        self.reduce = self._conv1x1(width, "reduce")
        self.norm_1.build(input_shape)
        self.reduce.build(input_shape)
        inner = (*input_shape[:-1], width)
        self.norm_2.build(inner)
        self.attention.build(inner)

    def call(self, inputs, training=None, return_attention_scores=False):
        x = ops.gelu(self.norm_1(inputs, training=training), approximate=False)
        shortcut = inputs if self.shortcut is None else self.shortcut(x)
        x = self.norm_2(self.reduce(x), training=training)  # (B, H, W, C / e)
        if return_attention_scores:
            x, scores = self.attention(
                x, training=training, return_attention_scores=True
            )
        else:
            x = self.attention(x, training=training)  # (B, H, W, 4F or F)
        outputs = shortcut + self.drop_path(x, training=training)
        if return_attention_scores:
            return outputs, scores
        return outputs

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.out_channels)

    def compute_output_spec(self, inputs, training=None, return_attention_scores=False):
        width = inputs.shape[-1] // self.expansion
        reduced = keras.KerasTensor((*inputs.shape[:-1], width), self.compute_dtype)
        return self.attention.compute_output_spec(
            reduced, return_attention_scores=return_attention_scores
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": self.filters,
                "num_heads": self.num_heads,
                "head_dim": self.head_dim,
                "window_size": self.window_size,
                "bottleneck": self.bottleneck,
                "dropout_rate": self.dropout_rate,
                "drop_path_rate": self.drop_path_rate,
            }
        )
        return config
