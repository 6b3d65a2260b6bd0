"""The data a training run feeds its model: seeded streams and few-shot pools.

Every stream ends with the model's input contract (`preprocessing`,
`keras_vit.models.preprocessing_of(model)`; `None` for the paper's `[-1,
1]`). The training stream is seeded by the config and starts at the
resumed epoch, so that a resumed run sees what an uninterrupted one would.

Example:

```python
source, steps, stream = training_data(config, start_epoch=0)
images, labels = next(iter(stream))  # one global batch
```
"""

from __future__ import annotations

import numpy as np

from keras_vit import data
from keras_vit.analysis.fewshot import FewShotCallback
from keras_vit.analysis.fewshot import few_shot_pools
from keras_vit.recipes.configs.base import RunConfig


def training_source(config: RunConfig):
    """The training split of `config`'s dataset (`keras_vit.data.ImageSource`)."""
    return data.load_source(
        config.dataset, config.train_split, config.data_dir, seed=config.seed
    )


def steps_per_epoch(config: RunConfig, source) -> int:
    """`config.steps_per_epoch`, or the whole global batches in `source`."""
    return config.steps_per_epoch or data.full_batches(
        source.num_examples, config.global_batch_size
    )


def training_data(
    config: RunConfig,
    start_epoch: int,
    *,
    source=None,
    preprocessing=None,
    **augmentation,
):
    """`(source, steps_per_epoch, dataset)`: the seeded training stream.

    Args:
        config: The run's config (data and augmentation fields).
        start_epoch: The first epoch the stream produces (a resumed run's).
            A run whose training had ended (`start_epoch >= epochs`) gets
            the last epoch's stream: it only gives shapes (the multi-worker
            build), since `fit` then trains nothing.
        source: The training source, already loaded (`training_source`);
            `None` loads it.
        preprocessing: The model's input contract (`preprocessing_of(model)`),
            whose normalisation ends every example; `None` for the paper's
            `[-1, 1]`.
        **augmentation: Recipe-specific `keras_vit.data.Augmentation`
            fields (e.g. `mixup_alpha`).
    """
    if source is None:
        source = training_source(config)
    steps = steps_per_epoch(config, source)
    first = min(start_epoch, config.epochs - 1)
    stream = _stream(config, source, steps, first, augmentation, preprocessing)
    return source, steps, stream


def first_batch(
    config: RunConfig, source, steps: int, *, preprocessing=None, **augmentation
):
    """The first training batch of the run's first epoch, or `None`.

    The same batch whether the run was resumed or not (a monitor's probe
    and example images); `None` for an empty stream. `preprocessing` is the
    model's input contract, as for `training_data`.
    """
    stream = _stream(config, source, steps, 0, augmentation, preprocessing)
    for batch in stream.take(1):
        return batch
    return None


def _stream(
    config: RunConfig,
    source,
    steps: int,
    start_epoch: int,
    augmentation,
    preprocessing=None,
):
    return data.train_dataset(
        source,
        image_size=config.image_size,
        global_batch_size=config.global_batch_size,
        epochs=config.epochs,
        start_epoch=start_epoch,
        steps_per_epoch=steps,
        seed=config.seed,
        channels=config.channels,
        augmentation=data.Augmentation(
            crop_area_range=config.crop_area_range,
            crop_aspect_range=config.crop_aspect_range,
            flip=config.random_flip,
            randaugment_ops=config.randaugment_ops,
            randaugment_magnitude=config.randaugment_magnitude,
            **augmentation,
        ),
        shuffle_buffer=config.shuffle_buffer,
        preprocessing=preprocessing,
    )


def check_disjoint(run, train_source, other_sources) -> None:
    """Raises `ValueError` when the training split shares files with another.

    Also records every split's unreadable files in `run.skipped_files` (the
    run's `keras_vit.recipes.rundir.Setup`).
    """
    skipped = set(train_source.skipped)
    for other in other_sources:
        if other is not None:
            data.check_disjoint(train_source, other)
            skipped.update(other.skipped)
    run.skipped_files = sorted(skipped)


def eval_data(config: RunConfig, source, on_tpu: bool, preprocessing=None):
    """The evaluation stream of `source` (`None` for none), by the model's
    contract `preprocessing` (its resize filter, crop and normalisation), the
    crop replaced by `eval_crop_fraction` when the config sets one (a
    `TrainConfig`: a config with evaluation splits)."""
    if source is None:
        return None
    return data.eval_dataset(
        source,
        image_size=config.image_size,
        global_batch_size=config.eval_batch_size or config.global_batch_size,
        crop_fraction=config.eval_crop_fraction,
        channels=config.channels,
        drop_remainder=on_tpu,  # TPUs need static shapes.
        cache=_fits_in_memory(source.num_examples, config),
        preprocessing=preprocessing,
    )


def _fits_in_memory(num_examples: int, config: RunConfig) -> bool:
    """Whether the decoded float32 eval set is small enough to cache (2 GiB)."""
    height, width = (
        (config.image_size, config.image_size)
        if isinstance(config.image_size, int)
        else config.image_size
    )
    return num_examples * height * width * config.channels * 4 <= 2 * 1024**3


def fewshot_callback(
    config: RunConfig,
    *,
    dataset: str,
    train_split: str,
    test_split: str,
    max_test_examples: int | None,
    say,
    preprocessing=None,
):
    """The few-shot linear evaluation callback: pools drawn and held once.

    The pools' images are prepared by `preprocessing`, the model's input
    contract (the paper's for `None`).
    """
    train, test, _ = few_shot_pools(
        dataset,
        train_split=train_split,
        test_split=test_split,
        image_size=config.image_size,
        channels=config.channels,
        shots=config.fewshot_shots,
        seed=config.seed,
        data_dir=config.data_dir,
        max_test_examples=max_test_examples,
        preprocessing=preprocessing,
    )
    pools = []
    for part in (train, test):
        batches = [(x.numpy(), np.argmax(y.numpy(), axis=-1)) for x, y in part]
        pools.append(tuple(np.concatenate(a) for a in zip(*batches, strict=True)))
    say(
        f"Few-shot: {len(pools[0][0])} drawn train images, {len(pools[1][0])} test "
        f"images, every {config.fewshot_every} epoch(s)."
    )
    return FewShotCallback(
        pools[0],
        pools[1],
        shots=config.fewshot_shots,
        every_n_epochs=config.fewshot_every,
        seed=config.seed,
    )
