"""The paper's optimizers: AdamW for pre-training, SGD+momentum for fine-tuning."""

from __future__ import annotations

import keras

from keras_vit._export import export
from keras_vit.keras_internals import ClipGradientsHook
from keras_vit.keras_internals import optimizer_variable_index

OPTIMIZERS = ("adamw", "adam", "sgd")
export("keras_vit.training.OPTIMIZERS").constant(__name__, "OPTIMIZERS")

# Variables left out of weight decay, matched against variable names: biases,
# LayerNorm/GroupNorm scales and offsets, RMSNorm scales (Keras's
# `RMSNormalization` names its one weight `scale`), the class token and the
# position embedding (the usual choice; the paper does not say).
NO_WEIGHT_DECAY = ("bias", "gamma", "beta", "scale", "token", "embedding")
export("keras_vit.training.NO_WEIGHT_DECAY").constant(__name__, "NO_WEIGHT_DECAY")


class _SummedGradientClipping(ClipGradientsHook):
    """Clips the global norm of the gradient summed over replicas.

    Keras clips in each replica, before the gradients are summed across
    replicas: under a strategy with `R` replicas that bounds each replica's
    share rather than the gradient of the step, so training would depend on
    the number of devices. Here every replica scales its share by the factor
    computed from the summed gradient (one extra all-reduce), which is
    exactly `clip_by_global_norm` of the step's gradient. Keras's private
    clipping step is reached through `keras_internals.ClipGradientsHook`.
    """

    def clip_gradients(self, grads):
        import tensorflow as tf  # Here only: importing the module registers
        # the optimizers for `.keras` files under any backend.

        context = tf.distribute.get_replica_context()
        if (
            not self.global_clipnorm
            or context is None
            or context.num_replicas_in_sync == 1
        ):
            return super().clip_gradients(grads)
        present = [g for g in grads if g is not None]
        summed = context.all_reduce(tf.distribute.ReduceOp.SUM, present)
        norm = tf.linalg.global_norm(summed)
        clip = tf.cast(self.global_clipnorm, norm.dtype)
        scale = clip / tf.maximum(norm, clip)  # 1 while the norm is below.
        return [None if g is None else g * tf.cast(scale, g.dtype) for g in grads]


class _LayerwiseRates:
    """Multiplies the learning rate of each variable by its own factor.

    `lr_multipliers` maps variable paths (`variable.path`) to factors, e.g.
    from `keras_vit.finetune.layer_decay_multipliers`; variables not named
    keep the base rate. The factor scales the rate passed to `update_step`,
    so it works for SGD and Adam alike (scaling gradients would be a no-op
    for Adam, which divides them by their own scale), after clipping and
    before the EMA. Decoupled weight decay keeps the base rate.
    """

    def __init__(self, *args, lr_multipliers: dict[str, float] | None = None, **kw):
        super().__init__(*args, **kw)
        self.lr_multipliers = {
            str(k): float(v) for k, v in (lr_multipliers or {}).items()
        }
        bad = {k: v for k, v in self.lr_multipliers.items() if not v >= 0}
        if bad:
            raise ValueError(f"`lr_multipliers` must be >= 0. Received: {bad}")

    def build(self, variables):
        super().build(variables)
        paths = [getattr(v, "path", None) for v in variables]
        if self.lr_multipliers and not set(paths) & set(self.lr_multipliers):
            # Multipliers that reach no variable would silently do nothing.
            example = next(iter(self.lr_multipliers))
            raise ValueError(
                "`lr_multipliers` names none of the trained variables (e.g. "
                f"{example!r}); build them from the model being trained."
            )
        self._rate_scales = [self.lr_multipliers.get(p, 1.0) for p in paths]

    def update_step(self, gradient, variable, learning_rate):
        if self.lr_multipliers:
            scale = self._rate_scales[optimizer_variable_index(self, variable)]
            if scale != 1.0:
                learning_rate = learning_rate * scale
        return super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        config = super().get_config()
        if self.lr_multipliers:
            config["lr_multipliers"] = dict(self.lr_multipliers)
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class AdamW(_LayerwiseRates, _SummedGradientClipping, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` with replica-independent global-norm clipping."""


@keras.saving.register_keras_serializable(package="keras_vit")
class Adam(_LayerwiseRates, _SummedGradientClipping, keras.optimizers.Adam):
    """`keras.optimizers.Adam` with replica-independent global-norm clipping."""


@keras.saving.register_keras_serializable(package="keras_vit")
class SGD(_LayerwiseRates, _SummedGradientClipping, keras.optimizers.SGD):
    """`keras.optimizers.SGD` with replica-independent global-norm clipping."""


@export("keras_vit.training.make_optimizer")
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
    lr_multipliers: dict[str, float] | None = None,
) -> keras.optimizers.Optimizer:
    """Builds one of the paper's optimizers.

    - `"adamw"`: Adam (β1, β2) with decoupled weight decay (pre-training:
      β = (0.9, 0.999), weight decay 0.1).
    - `"adam"`: Adam without weight decay.
    - `"sgd"`: SGD with momentum (fine-tuning: momentum 0.9, no weight
      decay); a nonzero `weight_decay` is applied decoupled.

    All clip the global norm of each step's gradient (`global_clipnorm`, 1
    in the paper; summed over replicas first, unlike Keras's own clipping
    under a distribution strategy), and can keep a Polyak (exponential
    moving) average of the weights: with `ema_momentum` set, use
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
        lr_multipliers: `{variable path: factor}` of the learning rate, e.g.
            layer-wise decay from `keras_vit.finetune.layer_decay_multipliers`.
            Defaults to `None` (one rate).

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
        lr_multipliers=lr_multipliers,
    )
    if name == "adamw":
        optimizer = AdamW(
            weight_decay=weight_decay, beta_1=beta_1, beta_2=beta_2, **common
        )
    elif name == "adam":
        optimizer = Adam(beta_1=beta_1, beta_2=beta_2, **common)
    else:
        optimizer = SGD(momentum=momentum, weight_decay=weight_decay or None, **common)
    if weight_decay and no_weight_decay:
        optimizer.exclude_from_weight_decay(var_names=list(no_weight_decay))
    return optimizer


@export("keras_vit.training.build_optimizer")
def build_optimizer(model: keras.Model) -> keras.Model:
    """Creates the compiled optimizer's variables now, before the first step.

    Under TensorFlow's default distribution strategy (no `strategy.scope()`,
    the usual case on one CPU or GPU), Keras 3 leaves the optimizer unbuilt
    until the first training step and creates its slot variables inside the
    traced step function. A `tf.function` that creates variables is traced
    a second time, so the whole training step (forward, backward and the
    update of every variable) is traced twice: measured at 2.2 s more for
    the first `train_on_batch` of a ViT-S/16. Building the optimizer first,
    as Keras itself does under an explicit strategy, makes it one trace.
    Nothing else changes: the same variables, created in the current
    strategy scope from `model.trainable_variables`.

    Args:
        model: A compiled model.

    Returns:
        `model`, for chaining.

    Raises:
        ValueError: if `model` is not compiled or not built (its variables
            do not exist yet).

    Example:

    ```python
    model = keras_vit.ViT("Ti/16", image_size=32, num_classes=10)
    model.compile(optimizer="adamw", loss="sparse_categorical_crossentropy")
    build_optimizer(model)  # before fit / train_on_batch
    ```
    """
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        raise ValueError(
            f"build_optimizer: model {model.name!r} is not compiled (no optimizer); "
            "call model.compile(...) first."
        )
    if not model.built:
        raise ValueError(
            f"build_optimizer: model {model.name!r} is not built, so its variables "
            "do not exist yet; build it (e.g. call it on a batch) first."
        )
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    return model
