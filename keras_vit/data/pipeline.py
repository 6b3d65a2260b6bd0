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

Input contract: both pipelines end with the model's normalisation,
`preprocessing` (a `keras_vit.Preprocessing`, `preprocessing_of(model)`;
default the paper's `[-1, 1]`). Training augmentation (Inception crop,
flip, RandAugment, MixUp/CutMix) is the same whatever the contract; the
evaluation resize and central crop follow it
(`keras_vit.data.transforms.prepare_image`).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import tensorflow as tf

from keras_vit._export import export
from keras_vit.data import augment
from keras_vit.data.augment import Augmentation
from keras_vit.data.randaugment import RandAugment
from keras_vit.data.source import ImageSource
from keras_vit.data.transforms import decode_image
from keras_vit.data.transforms import normalize
from keras_vit.data.transforms import prepare_image
from keras_vit.data.transforms import with_crop_fraction
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.preprocessing import as_preprocessing
from keras_vit.utils import to_pair

AUTOTUNE = tf.data.AUTOTUNE
_GRAPH_SEED = 87_178_291
_RANDAUGMENT_STREAM = 0x5A4D  # Folded into an example's seed for RandAugment.


@export("keras_vit.data.per_replica_batch_size")
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


@export("keras_vit.data.full_batches")
def full_batches(num_examples: int, global_batch_size: int) -> int:
    """Full global batches in one pass over `num_examples` (the rest is dropped)."""
    steps = int(num_examples) // int(global_batch_size)
    if steps <= 0:
        raise ValueError(
            f"The global batch size {global_batch_size} is larger than the "
            f"{num_examples} training examples; use a smaller batch."
        )
    return steps


@export("keras_vit.data.train_dataset")
def train_dataset(
    source: ImageSource,
    *,
    image_size: int | tuple[int, int],
    global_batch_size: int,
    epochs: int,
    steps_per_epoch: int | None,
    seed: int,
    start_epoch: int = 0,
    channels: int = 3,
    augmentation: Augmentation = Augmentation(),  # noqa: B008 (frozen)
    shuffle_buffer: int = 10_000,
    preprocessing: Preprocessing | None = None,
) -> tf.data.Dataset:
    """The training stream: shuffled, augmented, batched, prefetched.

    Yields `steps_per_epoch` batches for each epoch in `[start_epoch,
    epochs)`, then ends: pass the same `steps_per_epoch=` to `model.fit`.
    Each epoch is a fresh shuffle of the source cut to whole batches, so
    batches never straddle epochs. The dataset's cardinality is that number
    of batches; should a source lose more images to decoding errors than an
    epoch can spare, iterating raises instead of ending early.

    The steps, each a function of this module:

    1. `epoch_examples`: one epoch's examples in a seeded order, each with
       its own seed.
    2. `augment_example`: decode, crop, resize, flip, RandAugment, the
       contract's normalisation, one-hot label.
    3. `batch_and_mix`: whole global batches, then MixUp/CutMix.

    Args:
        source: An `ImageSource` (see `keras_vit.data.load_source`).
        image_size: Output size, an int or `(height, width)`.
        global_batch_size: Examples per step over all replicas.
        epochs: The epoch the stream ends before.
        steps_per_epoch: Batches per epoch; `None` takes the number of whole
            global batches in the source. A larger value reads the source
            several times per epoch (for step-based schedules).
        seed: Seed of the shuffles and augmentations.
        start_epoch: The first epoch to produce; set it to the epoch a
            resumed run starts from. Defaults to 0.
        channels: Channels of the output images (grayscale sources are
            repeated to 3 channels). Defaults to 3.
        augmentation: An `Augmentation`. Defaults to the paper's Inception
            crop and flip.
        shuffle_buffer: Examples in the shuffle buffer (capped at the
            source's size, which makes it a full shuffle).
        preprocessing: The model's input contract (`preprocessing_of(model)`):
            the augmented `[0, 255]` images are normalised with its mean and
            std. Defaults to the paper's (`[-1, 1]`).

    Returns:
        A `tf.data.Dataset` of `(images, labels)`: `float32 (global_batch_size,
        height, width, channels)` normalised by `preprocessing` (`[-1, 1]`
        by default) and `float32 (global_batch_size, num_classes)`.

    Example:

    ```python
    source = keras_vit.data.load_source("digits", "train")
    dataset = train_dataset(
        source, image_size=32, global_batch_size=64, epochs=10,
        steps_per_epoch=None, seed=0,
        augmentation=Augmentation(crop_area_range=(0.5, 1.0), flip=False))
    ```
    """
    if not isinstance(augmentation, Augmentation):
        raise ValueError(
            "`augmentation` must be a keras_vit.data.Augmentation. Received: "
            f"{augmentation!r}"
        )
    if not 0 <= int(start_epoch) <= int(epochs):
        raise ValueError(
            f"`start_epoch` must be in [0, epochs]. Received: start_epoch="
            f"{start_epoch}, epochs={epochs}"
        )
    plan = EpochPlan.of(source, global_batch_size, steps_per_epoch, shuffle_buffer)
    base_seed = tf.constant([int(seed), 0x5EED], tf.int64)
    augment_one = functools.partial(
        augment_example,
        source=source,
        image_size=_pair(image_size),
        channels=channels,
        augmentation=augmentation,
        preprocessing=as_preprocessing(preprocessing),
    )
    dataset = tf.data.Dataset.range(int(start_epoch), int(epochs)).flat_map(
        lambda epoch: epoch_examples(source, plan, base_seed, epoch, augment_one)
    )
    dataset = batch_and_mix(dataset, plan.batch_size, augmentation, seed)
    total = plan.steps * (int(epochs) - int(start_epoch))
    return dataset.apply(tf.data.experimental.assert_cardinality(total)).prefetch(
        AUTOTUNE
    )


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """How one training epoch reads its source.

    An epoch is `steps` whole batches (`examples` examples), so batches never
    straddle epochs and epoch `k` always starts at batch `k * steps`. It reads
    the source in `passes` full passes, each shuffled with its own seed (more
    than one pass when the epoch is longer than the source), then, for a
    source that may fail to decode, `spare` examples in the source's order
    that stand in for the images that fail (read only when some do).

    Attributes:
        steps: Batches per epoch.
        batch_size: The global batch size.
        examples: Examples per epoch, `steps * batch_size`.
        passes: Shuffled passes over the source per epoch.
        spare: Extra examples read per epoch to replace undecodable ones.
        buffer: Shuffle buffer, at most the source's size.
    """

    steps: int
    batch_size: int
    examples: int
    passes: int
    spare: int
    buffer: int

    @classmethod
    def of(cls, source, global_batch_size, steps_per_epoch, shuffle_buffer):
        """The plan for `source` at `global_batch_size` and `steps_per_epoch`."""
        batch_size = int(global_batch_size)
        steps = (
            full_batches(source.num_examples, batch_size)
            if steps_per_epoch is None
            else int(steps_per_epoch)
        )
        if steps <= 0:
            raise ValueError(f"`steps_per_epoch` must be positive. Received: {steps}")
        examples = steps * batch_size
        passes = -(-examples // source.num_examples)  # ceil
        spare = batch_size if source.may_fail_to_decode else 0
        buffer = max(1, min(int(shuffle_buffer), source.num_examples))
        return cls(steps, batch_size, examples, passes, spare, buffer)


def epoch_examples(source, plan, base_seed, epoch, augment_one):
    """One epoch of augmented examples, a pure function of `(seed, epoch)`.

    The epoch's passes over the source are shuffled with seeds derived from
    `(seed, epoch, pass)`; the `i`-th example of the epoch is augmented with
    the seed `fold_in((seed, epoch), -1 - i)`. Examples the source fails to
    decode are dropped and replaced by the epoch's spare examples, so the
    epoch keeps its length and the next epoch its examples.

    Args:
        source: The `ImageSource`.
        plan: The `EpochPlan`.
        base_seed: `(2,)` int64, the run's seed.
        epoch: A scalar int64 tensor.
        augment_one: `(image, label, example_seed) -> (image, one_hot)`.

    Returns:
        A dataset of `plan.examples` `(image, one_hot_label)` pairs.
    """
    epoch_seed = tf.random.experimental.stateless_fold_in(base_seed, epoch)
    examples = tf.data.Dataset.range(plan.passes).flat_map(
        lambda index: _shuffled_pass(source, plan.buffer, epoch_seed, index)
    )
    examples = examples.take(plan.examples)
    if plan.spare:
        examples = examples.concatenate(source.dataset.repeat().take(plan.spare))
    examples = examples.enumerate()
    examples = examples.map(
        lambda index, example: augment_one(
            *example, tf.random.experimental.stateless_fold_in(epoch_seed, -1 - index)
        ),
        num_parallel_calls=AUTOTUNE,
    )
    if source.may_fail_to_decode:
        examples = examples.ignore_errors(log_warning=True)
    return examples.take(plan.examples)


def _shuffled_pass(source, buffer, epoch_seed, index):
    # Fix this function's graph-level seed: the shuffle order then depends on
    # `seed`, the epoch and the pass only, not on the process's global TF seed
    # (and TF's seed helper fails on a tensor op seed when that seed is 0).
    tf.compat.v1.set_random_seed(_GRAPH_SEED)
    pass_seed = tf.random.experimental.stateless_fold_in(epoch_seed, index)
    shuffle_seed = tf.random.stateless_uniform(
        (), pass_seed, minval=0, maxval=2**62, dtype=tf.int64
    )
    return source.dataset.shuffle(
        buffer, seed=shuffle_seed, reshuffle_each_iteration=False
    )


def augment_example(
    image,
    label,
    example_seed,
    *,
    source,
    image_size,
    channels,
    augmentation,
    preprocessing=None,
):
    """Decode (encoded sources), augment and normalise one example; one-hot label.

    Args:
        image: `uint8 (height, width, channels)` or encoded bytes.
        label: An integer class.
        example_seed: `(2,)` int64: the crop and flip and the RandAugment
            seeds are split from it.
        source: The `ImageSource` the example comes from.
        image_size: `(height, width)` of the output.
        channels: Output channels.
        augmentation: The `Augmentation`.
        preprocessing: The input contract whose normalisation ends the
            transform; `None` for the paper's `[-1, 1]`.

    Returns:
        `(image, one_hot)`: `float32 (height, width, channels)` normalised by
        `preprocessing` and `float32 (num_classes,)`.
    """
    if source.encoded:
        image = decode_image(image)
    image = _match_channels(image, channels)
    image = augment.train_transform(
        image,
        example_seed,
        image_size,
        augmentation.crop_area_range,
        augmentation.crop_aspect_range,
        augmentation.flip,
    )
    if augmentation.randaugment_ops:
        randaugment = RandAugment(
            augmentation.randaugment_ops, augmentation.randaugment_magnitude
        )
        image = randaugment(image, _randaugment_seed(example_seed))
    image = normalize(image, preprocessing)
    return image, tf.one_hot(label, source.num_classes)


def batch_and_mix(dataset, batch_size, augmentation, seed):
    """Whole batches of `batch_size`, then MixUp/CutMix when enabled.

    The mixing runs one call at a time: the layers' generators then give a
    fixed sequence of mixes for a given seed (a resumed run does not repeat
    them bit for bit; see `keras_vit.data.augment`).
    """
    dataset = dataset.batch(batch_size, drop_remainder=True)
    if augmentation.mixes_batches:
        dataset = dataset.map(
            augment.BatchMixer(
                augmentation.mixup_alpha, augmentation.cutmix_factor, seed
            )
        )
    return dataset


@export("keras_vit.data.eval_dataset")
def eval_dataset(
    source: ImageSource,
    *,
    image_size: int | tuple[int, int],
    global_batch_size: int,
    crop_fraction: float | None = None,
    channels: int = 3,
    drop_remainder: bool = False,
    cache: bool = False,
    preprocessing: Preprocessing | None = None,
) -> tf.data.Dataset:
    """The evaluation stream: resize and crop, normalise, by the model's contract.

    Args:
        source: An `ImageSource`.
        image_size: Output size, an int or `(height, width)`.
        global_batch_size: Examples per batch over all replicas.
        crop_fraction: The central crop (timm's `crop_pct`), overriding the
            contract's; `None` (default) takes the contract's (1.0, the
            whole image, for the paper's). See
            `keras_vit.data.transforms.resize_and_crop`.
        channels: Output channels. Defaults to 3.
        drop_remainder: Drop a last partial batch (needed on TPUs, which
            require static shapes). Defaults to `False`.
        cache: Preprocess the whole set now, once, and keep it in memory
            (for small sets). Defaults to `False`. An image that fails to
            decode is then found now: a `ValueError` naming its file.
        preprocessing: The model's input contract (`preprocessing_of(model)`):
            its resize filter, crop and normalisation. Defaults to the
            paper's: the whole image resized with plain bilinear
            interpolation (`eval_resize`), `[-1, 1]` (`to_model_range`).

    Returns:
        A `tf.data.Dataset` of `(images, labels)` like `train_dataset`'s,
        in the source's order, of known length. For a folder source, an
        image that passed the source's check but fails to decode stops the
        iteration with an error rather than leaving the set one image short.
    """
    image_size = _pair(image_size)
    num_classes = source.num_classes
    preprocessing = with_crop_fraction(preprocessing, crop_fraction)

    def transform(image, label):
        if source.encoded:
            image = decode_image(image)
        image = _match_channels(image, channels)
        image = prepare_image(image, preprocessing, image_size)
        return image, tf.one_hot(label, num_classes)

    dataset = source.dataset.map(transform, num_parallel_calls=AUTOTUNE)
    if source.may_fail_to_decode:
        # Keep a known length (Keras then runs exactly that many steps rather
        # than reading until the data runs out); an image that fails to decode
        # then fails the evaluation instead of silently shrinking it.
        dataset = dataset.ignore_errors(log_warning=True).apply(
            tf.data.experimental.assert_cardinality(source.num_examples)
        )
    dataset = dataset.batch(int(global_batch_size), drop_remainder=drop_remainder)
    if cache:
        dataset = _filled_cache(dataset, source)
    return dataset.prefetch(AUTOTUNE)


def _filled_cache(dataset: tf.data.Dataset, source=None) -> tf.data.Dataset:
    """`dataset.cache()`, filled now by one full pass.

    A cache is only kept once an iterator has read its input to the end, and
    Keras stops a dataset of known length after its last batch, one read
    short of the end: every evaluation would start over (and TensorFlow warns
    that "the calling iterator did not fully read the dataset being cached").
    """
    dataset = dataset.cache()
    try:
        for _ in dataset:
            pass
    except tf.errors.OpError as error:  # E.g. a truncated JPEG.
        raise ValueError(_undecodable(source, error)) from error
    return dataset


def _undecodable(source, error: tf.errors.OpError) -> str:
    """One line naming the first file of `source` that fails to decode."""
    name = getattr(source, "name", "the evaluation set")
    for path in getattr(source, "files", None) or ():
        if not os.path.isfile(path):
            continue
        try:
            decode_image(tf.io.read_file(path))
        except (tf.errors.OpError, ValueError) as failure:
            reason = (getattr(failure, "message", "") or str(failure)).strip()
            reason = reason.splitlines()[0] if reason else type(failure).__name__
            return (
                f"{path} (in {name}) cannot be decoded as an image ({reason}); "
                "remove or replace it"
            )
    reason = (error.message or "").strip().splitlines()
    return f"{name} could not be read: {reason[0] if reason else type(error).__name__}"


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
