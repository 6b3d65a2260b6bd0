"""`tf.data` pipelines for training and evaluation.

Batch size and distribution: both pipelines batch with the **global** batch
size (the sum over all replicas and workers). Under a `tf.distribute`
strategy, `model.fit` and `model.evaluate` hand the dataset to
`strategy.experimental_distribute_dataset`, which splits every global batch
into `num_replicas_in_sync` per-replica batches of
`per_replica_batch_size(global_batch_size, num_replicas)` examples (with
several workers, each worker also reads only its shard of the data). Keras
scales each replica's loss by `1 / num_replicas_in_sync` and the gradients
are summed across replicas, so a step is the mean over the global batch,
whatever the number of devices.

Reproducibility: the training stream is a pure function of `(seed, epoch,
position)`. Every epoch shuffles with a seed derived from `(seed, epoch)` and
every image's crop, flip and RandAugment use seeds derived from `(seed, epoch,
index)`. The stream starts at `start_epoch`, so a run resumed at epoch `k`
reads exactly what an uninterrupted run reads from epoch `k` on.
"""

from __future__ import annotations

import tensorflow as tf

from keras_vit.data import augment
from keras_vit.data.datasets import ImageSource
from keras_vit.data.randaugment import RandAugment
from keras_vit.data.transforms import decode_image, eval_resize, to_model_range
from keras_vit.layers.utils import to_pair

AUTOTUNE = tf.data.AUTOTUNE
_GRAPH_SEED = 87_178_291
_RANDAUGMENT_STREAM = 0x5A4D  # Folded into an example's seed for RandAugment.


def per_replica_batch_size(global_batch_size: int, num_replicas: int) -> int:
    """The batch each replica computes on: `global_batch_size / num_replicas`.

    Args:
        global_batch_size: Examples per step over all replicas and workers.
        num_replicas: `strategy.num_replicas_in_sync`.

    Returns:
        The per-replica batch size.

    Raises:
        ValueError: if the global batch does not divide evenly, which would
            give replicas unequal batches (and a step that is no longer the
            plain mean over the global batch).

    Example:

    >>> per_replica_batch_size(512, 8)
    64
    """
    global_batch_size, num_replicas = int(global_batch_size), int(num_replicas)
    if global_batch_size <= 0 or num_replicas <= 0:
        raise ValueError(
            "Batch size and replica count must be positive. Received: "
            f"global_batch_size={global_batch_size}, num_replicas={num_replicas}"
        )
    if global_batch_size % num_replicas:
        suggestion = num_replicas * max(1, global_batch_size // num_replicas)
        raise ValueError(
            f"The global batch size {global_batch_size} is not divisible by the "
            f"{num_replicas} replicas of the strategy. Use a multiple of "
            f"{num_replicas}, e.g. {suggestion}."
        )
    return global_batch_size // num_replicas


def full_batches(num_examples: int, global_batch_size: int) -> int:
    """Full global batches in one pass over `num_examples` (the rest is dropped)."""
    steps = int(num_examples) // int(global_batch_size)
    if steps <= 0:
        raise ValueError(
            f"The global batch size {global_batch_size} is larger than the "
            f"{num_examples} training examples; use a smaller batch."
        )
    return steps


def train_dataset(
    source: ImageSource,
    *,
    image_size: int | tuple[int, int],
    global_batch_size: int,
    epochs: int,
    start_epoch: int = 0,
    steps_per_epoch: int | None = None,
    seed: int = 0,
    channels: int = 3,
    area_range: tuple[float, float] = (0.05, 1.0),
    aspect_ratio_range: tuple[float, float] = (3 / 4, 4 / 3),
    flip: bool = True,
    randaugment_ops: int = 0,
    randaugment_magnitude: float = 0.5,
    mixup_alpha: float = 0.0,
    cutmix_factor: float = 0.0,
    shuffle_buffer: int = 10_000,
) -> tf.data.Dataset:
    """The training stream: shuffled, augmented, batched, prefetched.

    Yields `steps_per_epoch` batches for each epoch in `[start_epoch,
    epochs)`, then ends: pass the same `steps_per_epoch=` to `model.fit`.
    Each epoch is a fresh shuffle of the source cut to whole batches, so
    batches never straddle epochs.

    Per image: decode (for encoded sources), Inception crop, bilinear resize
    to `image_size`, flip, optional RandAugment, scale to `[-1, 1]`; labels
    one-hot. Per batch: optional MixUp/CutMix. Maps run in parallel
    (`AUTOTUNE`) with a deterministic output order; batches are prefetched.

    Args:
        source: An `ImageSource` (see `keras_vit.data.load_source`).
        image_size: Output size, an int or `(height, width)`.
        global_batch_size: Examples per step over all replicas.
        epochs: The epoch the stream ends before.
        start_epoch: The first epoch to produce; set it to the epoch a
            resumed run starts from. Defaults to 0.
        steps_per_epoch: Batches per epoch. Defaults to the number of whole
            global batches in the source; a larger value reads the source
            several times per epoch (for step-based schedules).
        seed: Seed of the shuffles and augmentations.
        channels: Channels of the output images (grayscale sources are
            repeated to 3 channels). Defaults to 3.
        area_range: Inception-crop area fractions; `(1.0, 1.0)` disables the
            crop. Defaults to `(0.05, 1.0)`.
        aspect_ratio_range: Inception-crop aspect ratios.
        flip: Random left-right flips. Defaults to `True`.
        randaugment_ops: Operations per image of keras_vit's stateless
            `RandAugment` (see `keras_vit.data.randaugment`), seeded per
            image like the crop; 0 (default) turns RandAugment off.
        randaugment_magnitude: RandAugment strength in `[0, 1]`: the
            reference's 0-10 level divided by 10 (1 is the strongest).
        mixup_alpha: MixUp's Beta parameter; 0 (default) turns it off.
        cutmix_factor: `keras.layers.CutMix`'s factor; 0 (default) turns it
            off.
        shuffle_buffer: Examples in the shuffle buffer (capped at the
            source's size, which makes it a full shuffle).

    Returns:
        A `tf.data.Dataset` of `(images, labels)`: `float32 (global_batch_size,
        height, width, channels)` in `[-1, 1]` and `float32
        (global_batch_size, num_classes)`.

    Example:

    ```python
    source = keras_vit.data.load_source("digits", "train")
    dataset = train_dataset(source, image_size=32, global_batch_size=64,
                            epochs=10, flip=False, area_range=(0.5, 1.0))
    ```
    """
    image_size = _pair(image_size)
    if not 0 <= int(start_epoch) <= int(epochs):
        raise ValueError(
            f"`start_epoch` must be in [0, epochs]. Received: start_epoch="
            f"{start_epoch}, epochs={epochs}"
        )
    # An epoch is `steps` whole batches, so batches never straddle epochs and
    # epoch `k` always starts at batch `k * steps`. It reads the source in
    # `passes` full passes (more than one when it is longer than the source),
    # each shuffled with its own seed.
    steps = (
        full_batches(source.num_examples, global_batch_size)
        if steps_per_epoch is None
        else int(steps_per_epoch)
    )
    if steps <= 0:
        raise ValueError(f"`steps_per_epoch` must be positive. Received: {steps}")
    examples_per_epoch = steps * int(global_batch_size)
    passes = -(-examples_per_epoch // source.num_examples)  # ceil
    base_seed = tf.constant([int(seed), 0x5EED], tf.int64)
    buffer = max(1, min(int(shuffle_buffer), source.num_examples))
    num_classes = source.num_classes
    randaugment = (
        RandAugment(randaugment_ops, randaugment_magnitude) if randaugment_ops else None
    )

    def one_pass(epoch_seed, index):
        # Fix this function's graph-level seed: the shuffle order then depends
        # on `seed`, the epoch and the pass only, not on the process's global
        # TF seed (and TF's seed helper fails on a tensor op seed when that
        # global seed is 0).
        tf.compat.v1.set_random_seed(_GRAPH_SEED)
        pass_seed = tf.random.experimental.stateless_fold_in(epoch_seed, index)
        shuffle_seed = tf.random.stateless_uniform(
            (), pass_seed, minval=0, maxval=2**62, dtype=tf.int64
        )
        return source.dataset.shuffle(
            buffer, seed=shuffle_seed, reshuffle_each_iteration=False
        )

    def one_epoch(epoch):
        epoch_seed = tf.random.experimental.stateless_fold_in(base_seed, epoch)
        examples = tf.data.Dataset.range(passes).flat_map(
            lambda index: one_pass(epoch_seed, index)
        )
        return (
            examples.take(examples_per_epoch)
            .enumerate()
            .map(
                lambda index, example: (
                    *example,
                    tf.random.experimental.stateless_fold_in(epoch_seed, -1 - index),
                )
            )
        )

    def transform(image, label, example_seed):
        if source.encoded:
            image = decode_image(image)
        image = _match_channels(image, channels)
        image = augment.train_transform(
            image, example_seed, image_size, area_range, aspect_ratio_range, flip
        )
        if randaugment is not None:
            image = randaugment(image, _randaugment_seed(example_seed))
        return image, tf.one_hot(label, num_classes)

    dataset = tf.data.Dataset.range(int(start_epoch), int(epochs)).flat_map(one_epoch)
    dataset = dataset.map(transform, num_parallel_calls=AUTOTUNE)
    if source.may_fail_to_decode:
        dataset = dataset.ignore_errors(log_warning=True)
    dataset = dataset.map(
        lambda image, label: (to_model_range(image), label),
        num_parallel_calls=AUTOTUNE,
    )
    dataset = dataset.batch(int(global_batch_size), drop_remainder=True)
    if mixup_alpha or cutmix_factor:
        # One call at a time: the layers' generators then give a fixed
        # sequence of mixes for a given seed.
        dataset = dataset.map(augment.BatchMixer(mixup_alpha, cutmix_factor, seed))
    return dataset.prefetch(AUTOTUNE)


def eval_dataset(
    source: ImageSource,
    *,
    image_size: int | tuple[int, int],
    global_batch_size: int,
    crop_fraction: float = 1.0,
    channels: int = 3,
    drop_remainder: bool = False,
    cache: bool = False,
) -> tf.data.Dataset:
    """The evaluation stream: resize (optionally central crop), `[-1, 1]`.

    Args:
        source: An `ImageSource`.
        image_size: Output size, an int or `(height, width)`.
        global_batch_size: Examples per batch over all replicas.
        crop_fraction: Central crop before resizing; 1.0 (default) resizes
            the whole image, as the reference evaluation does. See
            `keras_vit.data.transforms.eval_resize`.
        channels: Output channels. Defaults to 3.
        drop_remainder: Drop a last partial batch (needed on TPUs, which
            require static shapes). Defaults to `False`.
        cache: Keep the preprocessed images in memory after the first pass
            (for small sets). Defaults to `False`.

    Returns:
        A `tf.data.Dataset` of `(images, labels)` like `train_dataset`'s,
        in the source's order.
    """
    image_size = _pair(image_size)
    num_classes = source.num_classes

    def transform(image, label):
        if source.encoded:
            image = decode_image(image)
        image = _match_channels(image, channels)
        image = to_model_range(eval_resize(image, image_size, crop_fraction))
        return image, tf.one_hot(label, num_classes)

    dataset = source.dataset.map(transform, num_parallel_calls=AUTOTUNE)
    if source.may_fail_to_decode:
        dataset = dataset.ignore_errors(log_warning=True)
    dataset = dataset.batch(int(global_batch_size), drop_remainder=drop_remainder)
    if cache:
        dataset = dataset.cache()
    return dataset.prefetch(AUTOTUNE)


def _randaugment_seed(example_seed):
    # A stream of its own: the crop and flip seeds are split from the same
    # example seed.
    return tf.random.experimental.stateless_fold_in(example_seed, _RANDAUGMENT_STREAM)


def _match_channels(image: tf.Tensor, channels: int) -> tf.Tensor:
    have = image.shape[-1]
    if have == channels:
        return image
    if have == 1 and channels == 3:
        return tf.image.grayscale_to_rgb(image)
    if have == 3 and channels == 1:
        return tf.image.rgb_to_grayscale(image)
    raise ValueError(f"Cannot turn {have}-channel images into {channels} channels.")


def _pair(image_size):
    return to_pair(image_size, "image_size")
