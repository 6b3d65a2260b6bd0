"""LayerScale: a learned per-channel scale of a residual branch (CaiT)."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._export import export


@export("keras_vit.layers.LayerScale")
@keras.saving.register_keras_serializable(package="keras_vit")
class LayerScale(keras.layers.Layer):
    """Multiplies each channel of its input by a learned factor.

    `y = x * gamma` with `gamma` of shape `(dim,)`, every entry starting at
    `init_value`. Applied to the attention and MLP branches of a block before
    the residual addition, it lets deep models (DeiT III, DINOv2) start close
    to the identity function; timm's `LayerScale`.

    Args:
        init_value: The initial value of every factor, e.g. `1e-5`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(..., dim)`.

    Returns:
        A tensor of the same shape.

    Example:

    >>> layer = keras_vit.layers.LayerScale(1e-5)
    >>> layer(np.ones((2, 197, 384), "float32"))[0, 0, :2]
    array([1.e-05, 1.e-05], dtype=float32)

    Reference:
    - [Touvron et al., 2021](https://arxiv.org/abs/2103.17239) (CaiT), §2.
    """

    def __init__(self, init_value: float = 1e-5, **kwargs):
        super().__init__(**kwargs)
        self.init_value = float(init_value)

    def build(self, input_shape):
        self.gamma = self.add_weight(
            name="gamma",
            shape=(input_shape[-1],),
            initializer=keras.initializers.Constant(self.init_value),
        )

    def call(self, inputs):
        return inputs * ops.cast(self.gamma, inputs.dtype)  # (..., D)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config["init_value"] = self.init_value
        return config
