"""The learnable [class] token of Eq. 1."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._export import export


@export("keras_vit.layers.ClassToken")
@keras.saving.register_keras_serializable(package="keras_vit")
class ClassToken(keras.layers.Layer):
    """Prepends a learnable class token to a sequence of patch embeddings.

    The token starts at zero, as in the reference implementation; its final
    state after the encoder is the image representation `y = LN(z_L^0)`.

    Args:
        initializer: Initializer of the token. Defaults to `"zeros"`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, num_patches, hidden_dim)`.

    Returns:
        Tensor of shape `(batch, num_patches + 1, hidden_dim)`.

    Example:

    >>> tokens = np.zeros((2, 196, 768), "float32")
    >>> keras_vit.layers.ClassToken()(tokens).shape
    (2, 197, 768)

    Reference:
    - [Dosovitskiy et al., 2021](https://arxiv.org/abs/2010.11929), Eq. 1.
    """

    def __init__(self, initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        self.token = self.add_weight(
            name="token", shape=(1, 1, input_shape[-1]), initializer=self.initializer
        )

    def call(self, inputs):
        token = ops.cast(self.token, inputs.dtype)  # (1, 1, D)
        batch_size = ops.shape(inputs)[0]
        token = ops.broadcast_to(token, (batch_size, 1, ops.shape(inputs)[-1]))
        return ops.concatenate([token, inputs], axis=1)  # (B, N + 1, D)

    def compute_output_shape(self, input_shape):
        batch, length, dim = input_shape
        return (batch, None if length is None else length + 1, dim)

    def get_config(self):
        config = super().get_config()
        config["initializer"] = keras.initializers.serialize(self.initializer)
        return config
