"""Stochastic depth: drops a whole residual branch per example."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._export import export


@export("keras_vit.layers.DropPath")
@keras.saving.register_keras_serializable(package="keras_vit")
class DropPath(keras.layers.Layer):
    """Zeroes a residual branch for a random subset of examples.

    During training each example's branch is kept with probability
    `1 - rate` and scaled by `1 / (1 - rate)`; at inference it is the identity.

    Args:
        rate: Probability of dropping the branch. Defaults to 0.
        seed: Optional int seed for reproducible masks.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, ...)`.
        training: Python bool; the layer only drops when `True`.

    Example:

    >>> layer = keras_vit.layers.DropPath(0.5, seed=0)
    >>> x = np.ones((4, 3, 2), "float32")
    >>> np.testing.assert_array_equal(layer(x), x)  # inference: identity

    Reference:
    - [Huang et al., 2016](https://arxiv.org/abs/1603.09382).
    """

    def __init__(self, rate: float = 0.0, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"`rate` must be in [0, 1). Received: rate={rate}")
        self.rate = float(rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, inputs, training=None):
        if not training or self.rate == 0.0:
            return inputs
        keep = 1.0 - self.rate
        shape = (ops.shape(inputs)[0],) + (1,) * (len(inputs.shape) - 1)
        noise = keras.random.uniform(shape, seed=self.seed_generator)
        mask = ops.cast(noise < keep, inputs.dtype)  # (B, 1, ..., 1)
        return inputs * mask / ops.cast(keep, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "seed": self.seed})
        return config
