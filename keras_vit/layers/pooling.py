"""Reduces the encoder's token sequence to one image representation."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._export import export
from keras_vit.layers.kinds import POOLING_MODES


@export("keras_vit.layers.TokenPooling")
@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """Pools a token sequence: the class token, or the mean of the patches.

    Args:
        mode: `"token"` takes the first token (`y = LN(z_L^0)`, the paper's
            representation); `"gap"` averages the patch tokens, leaving out
            the prefix tokens (the reference's `gap` classifier).
        num_prefix_tokens: Tokens before the patches (1 with a class token).
            Defaults to 1.
        index: With `"token"`, which token to take: 0 (default) is the class
            token; 1 is the distillation token of a DeiT model.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, tokens, dim)`.

    Returns:
        Tensor of shape `(batch, dim)`.

    Example:

    >>> tokens = np.arange(12, dtype="float32").reshape(1, 3, 4)
    >>> keras_vit.layers.TokenPooling("gap")(tokens)  # mean of tokens 1, 2
    array([[ 6.,  7.,  8.,  9.]], dtype=float32)
    """

    def __init__(
        self, mode: str = "token", num_prefix_tokens: int = 1, index: int = 0, **kwargs
    ):
        super().__init__(**kwargs)
        if mode not in POOLING_MODES:
            raise ValueError(
                f"`mode` must be one of {POOLING_MODES}. Received: mode={mode!r}"
            )
        if mode == "token" and num_prefix_tokens < 1:
            raise ValueError(
                "Token pooling needs a class token (num_prefix_tokens >= 1). "
                "Use mode='gap' for models without one."
            )
        if mode == "token" and not 0 <= int(index) < max(int(num_prefix_tokens), 1):
            raise ValueError(
                f"`index` must pick a prefix token (0 to {num_prefix_tokens - 1}). "
                f"Received: index={index}"
            )
        self.mode = mode
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.index = int(index)

    def call(self, inputs):
        if self.mode == "token":
            return inputs[:, self.index]  # (B, D)
        return ops.mean(inputs[:, self.num_prefix_tokens :], axis=1)  # (B, D)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "mode": self.mode,
                "num_prefix_tokens": self.num_prefix_tokens,
                "index": self.index,
            }
        )
        return config
