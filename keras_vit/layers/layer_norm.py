"""Layer normalization with a closed-form backward pass for training, and the
one place a norm of a kind (`"layer"` or `"rms"`) is made: `norm_layer`."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._export import export
from keras_vit.layers import custom_grads
from keras_vit.layers.config import use_closed_form_layer_norm
from keras_vit.layers.kinds import NORM_KINDS

# The epsilon of every LayerNorm of the paper's ViT (and of its checkpoints).
LAYER_NORM_EPSILON = 1e-6


@export("keras_vit.layers.LayerNorm")
@keras.saving.register_keras_serializable(package="keras_vit")
class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` over the last axis, faster to train.

    The same layer (arguments, weights `gamma` and `beta`, float32 statistics
    under mixed precision, outputs in the compute dtype). In a training call
    on TensorFlow its gradient is computed in closed form,

        dx = (g - mean(g) - x_hat * mean(g * x_hat)) / sigma,  g = dy * gamma,

    with `x_hat` and `1 / sigma` kept from the forward pass: 20-30% less
    time for the forward and backward passes than differentiating Keras'
    op graph (layer norms are about a fifth of a ViT-Ti/16 training step's
    non-matmul time). Inference calls Keras' op unchanged. The switch
    `keras_vit.layers.closed_form_layer_norm` turns this on or off (on by
    default on TensorFlow only).

    Args:
        axis: Must be the last axis, -1 (the default).
        epsilon, center, scale, rms_scaling, beta_initializer,
        gamma_initializer, beta_regularizer, gamma_regularizer,
        beta_constraint, gamma_constraint: As in
            `keras.layers.LayerNormalization`.
        **kwargs: Base layer arguments (`name`, `dtype`, ...).

    Example:

    >>> norm = LayerNorm(epsilon=1e-6)
    >>> y = norm(keras.random.normal((2, 5, 8)), training=True)  # (2, 5, 8)
    """

    def __init__(
        self,
        axis=-1,
        epsilon=1e-3,
        center=True,
        scale=True,
        rms_scaling=False,
        beta_initializer="zeros",
        gamma_initializer="ones",
        beta_regularizer=None,
        gamma_regularizer=None,
        beta_constraint=None,
        gamma_constraint=None,
        **kwargs,
    ):
        if axis not in (-1, [-1], (-1,)):
            raise ValueError(
                f"LayerNorm normalizes the last axis only. Received: axis={axis}"
            )
        super().__init__(
            axis=axis,
            epsilon=epsilon,
            center=center,
            scale=scale,
            rms_scaling=rms_scaling,
            beta_initializer=beta_initializer,
            gamma_initializer=gamma_initializer,
            beta_regularizer=beta_regularizer,
            gamma_regularizer=gamma_regularizer,
            beta_constraint=beta_constraint,
            gamma_constraint=gamma_constraint,
            **kwargs,
        )

    def call(self, inputs, training=None):
        closed_form = use_closed_form_layer_norm()
        closed_form = closed_form and self.center and self.scale
        if not (training and closed_form and not self.rms_scaling):
            return super().call(inputs)
        # Tensors, not the variables: the gradient then flows through the
        # function's inputs (TensorFlow's custom gradients need that).
        gamma, beta = ops.copy(self.gamma), ops.copy(self.beta)  # (D,) float32
        outputs = custom_grads.layer_norm(inputs, gamma, beta, self.epsilon)
        return ops.cast(outputs, self.compute_dtype)


def norm_layer(
    kind: str, epsilon: float, *, closed_form: bool = True, **kwargs
) -> keras.layers.Layer:
    """A norm over the last axis, of `kind` (`keras_vit.EncoderOptions.norm`).

    `"layer"`: a LayerNorm (`LayerNorm`, or with `closed_form=False` Keras's
    own `keras.layers.LayerNormalization`, as the encoder's final norms
    have always been built); weights `gamma`, `beta`. `"rms"`:
    `keras.layers.RMSNormalization`, `x * rsqrt(mean(x^2) + epsilon) *
    scale` computed in float32 (timm's `RmsNorm`: the epsilon is added to
    the mean square, inside the root); one weight, `scale`, no bias.

    Args:
        kind: `"layer"` or `"rms"`.
        epsilon: Added to the variance (or the mean square).
        closed_form: `"layer"` only: `LayerNorm` (its closed-form backward
            pass) rather than `keras.layers.LayerNormalization`.
        **kwargs: Base layer arguments (`name`, `dtype`, ...).

    Example:

    >>> norm_layer("rms", 1e-5, name="norm")(keras.random.normal((2, 5, 8)))
    """
    if kind == "rms":
        return keras.layers.RMSNormalization(epsilon=epsilon, **kwargs)
    if kind != "layer":
        raise ValueError(f"`norm` must be one of {NORM_KINDS}. Received: {kind!r}")
    if closed_form:
        return LayerNorm(epsilon=epsilon, **kwargs)
    return keras.layers.LayerNormalization(epsilon=epsilon, **kwargs)
