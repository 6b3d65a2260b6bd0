"""Learned register tokens (Darcet et al., 2024), inserted after the class token."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._export import export


@export("keras_vit.layers.RegisterTokens")
@keras.saving.register_keras_serializable(package="keras_vit")
class RegisterTokens(keras.layers.Layer):
    """Inserts `num_tokens` learned tokens after the leading tokens of a sequence.

    `[t_0 .. t_{k-1}, patches]` becomes `[t_0 .. t_{k-1}, r_1 .. r_n,
    patches]`, where `k = num_leading` (1 after a class token). The registers
    get no position embedding (the layer runs after it is added, as in
    DINOv2) and are left out of pooling and of the analyses, like every
    prefix token (`keras_vit.models.ViTLayout.num_prefix_tokens` counts them).

    Args:
        num_tokens: How many registers, e.g. 4.
        num_leading: Tokens kept in front of the registers. Defaults to 1.
        initializer: Initializer of the registers. Defaults to a normal
            distribution with standard deviation 1e-6, as timm's `reg_token`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, tokens, dim)`.

    Returns:
        Tensor of shape `(batch, tokens + num_tokens, dim)`.

    Example:

    >>> tokens = np.zeros((2, 1 + 256, 384), "float32")  # class token + patches
    >>> keras_vit.layers.RegisterTokens(4)(tokens).shape
    (2, 261, 384)

    Reference:
    - [Darcet et al., 2024](https://arxiv.org/abs/2309.16588), "Vision
      Transformers Need Registers".
    """

    def __init__(
        self, num_tokens: int, num_leading: int = 1, initializer=None, **kwargs
    ):
        super().__init__(**kwargs)
        if int(num_tokens) <= 0:
            raise ValueError(
                f"`num_tokens` must be positive. Received: num_tokens={num_tokens}"
            )
        if int(num_leading) < 0:
            raise ValueError(
                f"`num_leading` must be >= 0. Received: num_leading={num_leading}"
            )
        self.num_tokens = int(num_tokens)
        self.num_leading = int(num_leading)
        if initializer is None:
            initializer = keras.initializers.RandomNormal(stddev=1e-6)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        self.tokens = self.add_weight(
            name="tokens",
            shape=(1, self.num_tokens, input_shape[-1]),
            initializer=self.initializer,
        )

    def call(self, inputs):
        batch_size, dim = ops.shape(inputs)[0], ops.shape(inputs)[-1]
        tokens = ops.cast(self.tokens, inputs.dtype)  # (1, R, D)
        tokens = ops.broadcast_to(tokens, (batch_size, self.num_tokens, dim))
        lead = self.num_leading
        parts = [inputs[:, :lead], tokens, inputs[:, lead:]]
        return ops.concatenate(parts, axis=1)  # (B, N + R, D)

    def compute_output_shape(self, input_shape):
        batch, length, dim = input_shape
        return (batch, None if length is None else length + self.num_tokens, dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_tokens": self.num_tokens,
                "num_leading": self.num_leading,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config
