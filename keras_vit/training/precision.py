"""The mixed-precision policy for the hardware a strategy runs on."""

from __future__ import annotations

import keras
import tensorflow as tf

PRECISIONS = (False, True, "float32", "bfloat16", "float16")


def precision_policy(
    mixed_precision: bool | str, strategy: tf.distribute.Strategy | None = None
) -> str:
    """Returns the Keras dtype policy name for a `mixed_precision` setting.

    `True` picks the hardware's fast format: `"mixed_bfloat16"` on TPUs and
    CPUs (bfloat16 keeps float32's exponent range: no loss scaling), and
    `"mixed_float16"` on GPUs, for which `model.compile` wraps the optimizer
    in a `keras.optimizers.LossScaleOptimizer` (dynamic loss scaling).
    Variables stay float32 either way, and the ViT's head computes its
    logits in float32.

    Args:
        mixed_precision: `False`/`"float32"` (full precision), `True`
            (automatic), `"bfloat16"` or `"float16"`.
        strategy: The strategy the model will run under; decides `True`.

    Returns:
        `"float32"`, `"mixed_bfloat16"` or `"mixed_float16"`.

    Example:

    ```python
    keras.config.set_dtype_policy(precision_policy(True, strategy))
    ```
    """
    if mixed_precision not in PRECISIONS:
        raise ValueError(
            f"Unknown mixed_precision={mixed_precision!r}. Use one of {PRECISIONS}."
        )
    if mixed_precision in (False, "float32"):
        return "float32"
    if mixed_precision is True:
        on_tpu = isinstance(strategy, tf.distribute.TPUStrategy)
        on_gpu = bool(tf.config.list_logical_devices("GPU"))
        mixed_precision = "float16" if on_gpu and not on_tpu else "bfloat16"
    return f"mixed_{mixed_precision}"


def set_precision(mixed_precision: bool | str, strategy=None) -> str:
    """Sets Keras's global dtype policy (see `precision_policy`); returns it."""
    policy = precision_policy(mixed_precision, strategy)
    keras.config.set_dtype_policy(policy)
    return policy
