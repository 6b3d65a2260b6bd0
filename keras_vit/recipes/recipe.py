"""What a training recipe is to the run engine: the steps where recipes differ.

`keras_vit.recipes.engine.run(recipe, config)` runs every recipe the same
way (see the engine); a `Recipe` gives it the recipe's own steps, as
functions: its splits (`data`), its model (`model`, `loss`), what it
watches (`monitors`) and how it ends (`finish`). This module imports no
framework, so that a recipe's module (`recipes.train`) defines its `Recipe`
where `--help` reads it.

Example:

```python
RECIPE = Recipe(
    name="train",
    finishing=lambda config: "final.keras, results.json",
    data=my_splits,  # (config, run) -> Sources
    model=my_model,  # (config, run, sources) -> keras.Model
    monitors=my_monitors,  # (config, run, sources, streams) -> Monitors
    finish=my_finish,  # (config, run, model, sources, streams, trained) -> dict
    loss=my_loss,  # config -> {"loss": ..., "metrics": [...]}
    metric="accuracy",
)
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Annotations only: this module imports no framework.
    import keras
    import tensorflow as tf

    from keras_vit.data import ImageSource
    from keras_vit.recipes.configs.base import RunConfig
    from keras_vit.recipes.rundir import Setup


@dataclasses.dataclass(frozen=True)
class Sources:
    """A run's splits (`keras_vit.data.ImageSource`); `None`: the config has none."""

    train: ImageSource
    validation: ImageSource | None = None
    test: ImageSource | None = None


@dataclasses.dataclass(frozen=True)
class Streams:
    """The streams of a run's `Sources`, fed to its model.

    Attributes:
        steps: Steps per epoch.
        train: The seeded training stream, from the resumed epoch.
        validation: Evaluated each epoch, or `None`.
        test: Evaluated once at the end, or `None`.
        preprocessing: The model's input contract that prepared them.
    """

    steps: int
    train: tf.data.Dataset
    validation: tf.data.Dataset | None = None
    test: tf.data.Dataset | None = None
    preprocessing: object = None


@dataclasses.dataclass(frozen=True)
class Monitors:
    """What a recipe watches while it trains, besides the crash-safe set."""

    training: keras.callbacks.Callback | None = None  # A `TrainingMonitor`.
    fewshot: keras.callbacks.Callback | None = None


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What one training recipe does at the steps of `run` where recipes differ.

    Attributes:
        name: Its name in what it prints (`[train] ...`).
        finishing: `config -> str`: what it does after training, for the
            line of a run resumed after its last epoch.
        data: `(config, run) -> Sources`: its splits, loaded and checked.
        model: `(config, run, sources) -> keras.Model`, called in the
            strategy's scope: the model, built and initialised.
        monitors: `(config, run, sources, streams) -> Monitors`.
        finish: `(config, run, model, sources, streams, trained) -> dict`:
            evaluates and saves, then calls `rundir.finished`; what it
            returns joins `run`'s result.
        loss: `config -> dict`: `model.compile`'s `loss` and `metrics`,
            made in the strategy's scope; `{}` for a model with its own loss.
        metric: The training metric the checkpoints follow (the validation
            one when there is a validation split).
        augmentation: Config fields passed to `keras_vit.data.Augmentation`
            besides those every config has (e.g. `"mixup_alpha"`).
    """

    name: str
    finishing: Callable[[RunConfig], str]
    data: Callable[[RunConfig, Setup], Sources]
    model: Callable[[RunConfig, Setup, Sources], keras.Model]
    monitors: Callable[[RunConfig, Setup, Sources, Streams], Monitors]
    finish: Callable[..., dict]
    loss: Callable[[RunConfig], dict] = lambda config: {}
    metric: str = "loss"
    augmentation: tuple[str, ...] = ()
