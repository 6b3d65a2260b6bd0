"""Learning-rate schedule: linear warm-up, then linear or cosine decay."""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_vit._export import export

DECAYS = ("cosine", "linear", "constant")


@export("keras_vit.training.WarmupDecay")
@keras.saving.register_keras_serializable(package="keras_vit")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to a peak, then cosine or linear decay (paper, §4.1).

    For optimizer step `s` (counted from 0, before the update):

    - `s < warmup_steps`: `peak * (s + 1) / warmup_steps`;
    - after: `end + (peak - end) * f(p)` with progress
      `p = (s - warmup_steps) / (total_steps - warmup_steps)` clipped to
      `[0, 1]` and `f(p) = (1 + cos(pi p)) / 2` (cosine), `1 - p` (linear) or
      `1` (constant).

    Args:
        peak_learning_rate: The rate at the end of the warm-up.
        total_steps: Steps of the whole run (warm-up included).
        warmup_steps: Steps of the linear warm-up. Defaults to 0.
        decay: `"cosine"` (default), `"linear"` or `"constant"`.
        end_learning_rate: The rate at `total_steps`. Defaults to 0.

    Example:

    ```python
    schedule = WarmupDecay(1e-3, total_steps=10_000, warmup_steps=500)
    optimizer = keras.optimizers.AdamW(learning_rate=schedule)
    ```
    """

    def __init__(
        self,
        peak_learning_rate: float,
        total_steps: int,
        warmup_steps: int = 0,
        decay: str = "cosine",
        end_learning_rate: float = 0.0,
    ):
        if decay not in DECAYS:
            raise ValueError(f"Unknown decay {decay!r}. Known: {DECAYS}.")
        if int(total_steps) <= 0 or not 0 <= int(warmup_steps) <= int(total_steps):
            raise ValueError(
                "Need total_steps > 0 and 0 <= warmup_steps <= total_steps. "
                f"Received: total_steps={total_steps}, warmup_steps={warmup_steps}"
            )
        if float(peak_learning_rate) < 0 or float(end_learning_rate) < 0:
            raise ValueError("Learning rates must be >= 0.")
        self.peak_learning_rate = float(peak_learning_rate)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.decay = decay
        self.end_learning_rate = float(end_learning_rate)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        peak, end = self.peak_learning_rate, self.end_learning_rate
        warmup = peak * (step + 1.0) / max(self.warmup_steps, 1)
        progress = (step - self.warmup_steps) / max(
            self.total_steps - self.warmup_steps, 1
        )
        progress = ops.clip(progress, 0.0, 1.0)
        if self.decay == "cosine":
            factor = 0.5 * (1.0 + ops.cos(math.pi * progress))
        elif self.decay == "linear":
            factor = 1.0 - progress
        else:
            factor = ops.ones_like(progress)
        decayed = end + (peak - end) * factor
        return ops.where(step < self.warmup_steps, warmup, decayed)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay": self.decay,
            "end_learning_rate": self.end_learning_rate,
        }
