"""The mixed-precision policy for the hardware a strategy runs on."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_vit._export import export
from keras_vit.training import hardware

PRECISIONS = (False, True, "auto", "float32", "bfloat16", "float16")


def _accelerator(strategy: tf.distribute.Strategy | None) -> str | None:
    """`"TPU"`, `"GPU"` or `None` (the CPU) for the model's computations."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "TPU"
    if tf.config.list_logical_devices("GPU"):
        return "GPU"
    return None


@export("keras_vit.training.resolve_precision")
def resolve_precision(
    mixed_precision: bool | str, strategy: tf.distribute.Strategy | None = None
) -> tuple[str, str]:
    """The Keras dtype policy for a `mixed_precision` setting, and why.

    `"auto"` (or `True`) picks the hardware's fast format:

    - a TPU strategy: `"mixed_bfloat16"`;
    - a visible GPU: `"mixed_float16"`, for which `model.compile` wraps the
      optimizer in a `keras.optimizers.LossScaleOptimizer` (dynamic loss
      scaling);
    - the CPU: `"mixed_bfloat16"` where it computes bfloat16 natively
      (AVX512_BF16 or AMX-BF16, `keras_vit.training.hardware.native_bfloat16()`,
      capped by `ONEDNN_MAX_CPU_ISA`), else `"float32"`: without them
      bfloat16 is converted to float32 around every matmul, which is slower
      than float32 alone.

    bfloat16 keeps float32's exponent range: no loss scaling. Variables stay
    float32 either way, and the ViT's head computes its logits in float32.
    An explicit `"bfloat16"` or `"float16"` is honoured on any hardware.

    Args:
        mixed_precision: `False`/`"float32"` (full precision), `"auto"`/
            `True` (the hardware's fast format), `"bfloat16"` or
            `"float16"`.
        strategy: The strategy the model will run under; decides `"auto"`.

    Returns:
        `(policy, reason)`: the policy, `"float32"`, `"mixed_bfloat16"` or
        `"mixed_float16"`, and a short reason for a log line, e.g.
        `"auto: this CPU is AVX2, no native bfloat16"` or `"asked for"`.

    Raises:
        ValueError: `mixed_precision` is not one of `PRECISIONS`, or
            `ONEDNN_MAX_CPU_ISA` holds an unknown value.

    Example:

    ```python
    policy, reason = resolve_precision("auto", strategy)
    print(f"precision {policy} ({reason})")
    # precision float32 (auto: this CPU is AVX2, no native bfloat16)
    keras.config.set_dtype_policy(policy)
    ```
    """
    if mixed_precision not in PRECISIONS:
        raise ValueError(
            f"Unknown mixed_precision={mixed_precision!r}. Use one of {PRECISIONS}."
        )
    if mixed_precision in (False, "float32"):
        return "float32", "asked for"
    if mixed_precision in ("bfloat16", "float16"):
        policy = f"mixed_{mixed_precision}"
        if mixed_precision == "bfloat16" and _accelerator(strategy) is None:
            flags = hardware.cpu_flags()
            if not hardware.native_bfloat16(flags):
                cpu = hardware.describe_cpu(flags)
                return policy, (
                    f"asked for; this CPU is {cpu}, no native bfloat16: "
                    "float32 is likely faster"
                )
        return policy, "asked for"
    accelerator = _accelerator(strategy)
    if accelerator == "TPU":
        return "mixed_bfloat16", "auto: TPU"
    if accelerator == "GPU":
        return "mixed_float16", "auto: GPU, with loss scaling"
    flags = hardware.cpu_flags()
    cpu = hardware.describe_cpu(flags)
    if hardware.native_bfloat16(flags):
        return "mixed_bfloat16", f"auto: this CPU is {cpu}, native bfloat16"
    return "float32", f"auto: this CPU is {cpu}, no native bfloat16"


@export("keras_vit.training.precision_policy")
def precision_policy(
    mixed_precision: bool | str, strategy: tf.distribute.Strategy | None = None
) -> str:
    """Returns the Keras dtype policy name for a `mixed_precision` setting.

    The policy of `resolve_precision` (see there): `"auto"`/`True` gives
    `"mixed_bfloat16"` on TPUs and on CPUs with native bfloat16,
    `"mixed_float16"` on GPUs and `"float32"` on other CPUs.

    Args:
        mixed_precision: As for `resolve_precision`.
        strategy: As for `resolve_precision`.

    Returns:
        `"float32"`, `"mixed_bfloat16"` or `"mixed_float16"`.

    Example:

    ```python
    keras.config.set_dtype_policy(precision_policy("auto", strategy))
    ```
    """
    return resolve_precision(mixed_precision, strategy)[0]


@export("keras_vit.training.set_precision")
def set_precision(mixed_precision: bool | str, strategy=None) -> str:
    """Sets Keras's global dtype policy (see `precision_policy`); returns it."""
    policy = precision_policy(mixed_precision, strategy)
    keras.config.set_dtype_policy(policy)
    return policy
