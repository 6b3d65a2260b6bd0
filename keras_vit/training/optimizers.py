"""The paper's optimizers: AdamW for pre-training, SGD+momentum for fine-tuning."""

from __future__ import annotations

import keras

from keras_vit.training.schedules import WarmupDecay

OPTIMIZERS = ("adamw", "adam", "sgd")

# Variables left out of weight decay, matched against variable names: biases,
# LayerNorm/GroupNorm scales and offsets, the class token and the position
# embedding (the usual choice; the paper does not say).
NO_WEIGHT_DECAY = ("bias", "gamma", "beta", "token", "embedding")


def make_optimizer(
    name: str,
    learning_rate: float | keras.optimizers.schedules.LearningRateSchedule,
    *,
    weight_decay: float = 0.0,
    momentum: float = 0.9,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    global_clipnorm: float | None = 1.0,
    ema_momentum: float | None = None,
    no_weight_decay: tuple[str, ...] = NO_WEIGHT_DECAY,
) -> keras.optimizers.Optimizer:
    """Builds one of the paper's optimizers.

    - `"adamw"`: Adam (β1, β2) with decoupled weight decay (pre-training:
      β = (0.9, 0.999), weight decay 0.1).
    - `"adam"`: Adam without weight decay.
    - `"sgd"`: SGD with momentum (fine-tuning: momentum 0.9, no weight
      decay); a nonzero `weight_decay` is applied decoupled.

    All clip the gradients' global norm (`global_clipnorm`, 1 in the
    paper), and can keep a Polyak (exponential moving) average of the
    weights: with `ema_momentum` set, use
    `keras.callbacks.SwapEMAWeights(swap_on_epoch=True)` so that validation
    and checkpoints see the averaged weights; `model.fit` writes them into
    the model when it ends.

    Args:
        name: `"adamw"`, `"adam"` or `"sgd"`.
        learning_rate: A float or a schedule (see `WarmupDecay`).
        weight_decay: Decoupled weight decay (Keras multiplies it by the
            learning rate). Defaults to 0.
        momentum: SGD momentum. Defaults to 0.9.
        beta_1: Adam's β1. Defaults to 0.9.
        beta_2: Adam's β2. Defaults to 0.999.
        global_clipnorm: Clip gradients to this global norm; `None` turns
            clipping off. Defaults to 1.0.
        ema_momentum: Polyak averaging factor, e.g. 0.9999; `None` (default)
            turns it off.
        no_weight_decay: Variable-name patterns excluded from weight decay.

    Returns:
        A `keras.optimizers.Optimizer`.

    Example:

    ```python
    schedule = WarmupDecay(0.03, total_steps=10_000, warmup_steps=500)
    optimizer = make_optimizer("sgd", schedule, ema_momentum=0.9999)
    ```
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"Unknown optimizer {name!r}. Known: {OPTIMIZERS}.")
    if ema_momentum is not None and not 0.0 <= float(ema_momentum) < 1.0:
        raise ValueError(f"`ema_momentum` must be in [0, 1). Received: {ema_momentum}")
    if global_clipnorm is not None and float(global_clipnorm) <= 0:
        raise ValueError(f"`global_clipnorm` must be > 0. Received: {global_clipnorm}")
    common = dict(
        learning_rate=learning_rate,
        global_clipnorm=global_clipnorm,
        use_ema=ema_momentum is not None,
        ema_momentum=0.99 if ema_momentum is None else float(ema_momentum),
    )
    if name == "adamw":
        optimizer = keras.optimizers.AdamW(
            weight_decay=weight_decay, beta_1=beta_1, beta_2=beta_2, **common
        )
    elif name == "adam":
        optimizer = keras.optimizers.Adam(beta_1=beta_1, beta_2=beta_2, **common)
    else:
        optimizer = keras.optimizers.SGD(
            momentum=momentum, weight_decay=weight_decay or None, **common
        )
    if weight_decay and no_weight_decay:
        optimizer.exclude_from_weight_decay(var_names=list(no_weight_decay))
    return optimizer


__all__ = ["NO_WEIGHT_DECAY", "OPTIMIZERS", "WarmupDecay", "make_optimizer"]
