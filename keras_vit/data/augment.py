"""Training augmentation: its settings, Inception crop and flip, MixUp, CutMix.

`Augmentation` gathers the settings `keras_vit.data.train_dataset` applies;
the functions and `BatchMixer` below carry them out.

The per-image crop and flip are stateless: each image's randomness comes
from an explicit seed (see `keras_vit.data.pipeline`), so a run is
reproducible and a resumed run sees exactly the images an uninterrupted one
would. RandAugment lives in `keras_vit.data.randaugment` and is stateless
and seeded per image in the same way. MixUp and CutMix are Keras's own
layers; they draw from their own seeded generators, so a run that uses them
repeats from a fresh start but not bit for bit across a resume.

Label smoothing is not here: it is an argument of the loss
(`keras.losses.CategoricalCrossentropy(label_smoothing=...)`).
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import keras
import tensorflow as tf

from keras_vit._export import export
from keras_vit.utils import to_pair


@export("keras_vit.data.Augmentation")
@dataclasses.dataclass(frozen=True)
class Augmentation:
    """The training augmentation of `keras_vit.data.train_dataset`.

    Per image, in this order: Inception crop, resize, flip, RandAugment. Per
    batch: MixUp or CutMix. The default is the paper's: crop and flip only.

    Attributes:
        crop_area_range: Fractions of the image area the Inception crop keeps
            (`0 < low <= high <= 1`); `(1.0, 1.0)` turns cropping off.
            Defaults to `(0.05, 1.0)`.
        crop_aspect_range: Aspect ratios (width / height) of the crop
            (`0 < low <= high`). Defaults to `(0.75, 4/3)`.
        flip: Random left-right flips. Turn them off for data whose meaning
            changes when mirrored (digits, text). Defaults to `True`.
        randaugment_ops: Operations per image of keras_vit's stateless
            `RandAugment`; 0 (default) turns it off.
        randaugment_magnitude: RandAugment strength in `[0, 1]`: the
            reference's 0-10 level divided by 10. Defaults to 0.5.
        mixup_alpha: MixUp's Beta parameter (`>= 0`); 0 (default) turns it
            off.
        cutmix_factor: `keras.layers.CutMix`'s factor in `[0, 1]`; 0
            (default) turns it off.

    Raises:
        ValueError: naming the field, when a value is out of its range.

    Example:

    ```python
    augmentation = Augmentation(crop_area_range=(0.6, 1.0), flip=False)
    dataset = keras_vit.data.train_dataset(
        source, image_size=32, global_batch_size=64, epochs=10,
        steps_per_epoch=None, seed=0, augmentation=augmentation)
    ```
    """

    crop_area_range: tuple[float, float] = (0.05, 1.0)
    crop_aspect_range: tuple[float, float] = (0.75, 4 / 3)
    flip: bool = True
    randaugment_ops: int = 0
    randaugment_magnitude: float = 0.5
    mixup_alpha: float = 0.0
    cutmix_factor: float = 0.0

    def __post_init__(self):
        # Lists (from JSON configs) become tuples, so the object stays hashable.
        for name in ("crop_area_range", "crop_aspect_range"):
            object.__setattr__(self, name, _float_pair(getattr(self, name), name))
        _check_range(self.crop_area_range, "crop_area_range", upper=1.0)
        _check_range(self.crop_aspect_range, "crop_aspect_range")
        if not isinstance(self.flip, bool):
            raise ValueError(f"`flip` must be True or False. Received: {self.flip!r}")
        ops = self.randaugment_ops
        if isinstance(ops, bool) or not isinstance(ops, numbers.Integral) or ops < 0:
            raise ValueError(
                f"`randaugment_ops` must be an integer >= 0. Received: {ops!r}"
            )
        object.__setattr__(self, "randaugment_ops", int(ops))
        for name, high in (
            ("randaugment_magnitude", 1.0),
            ("mixup_alpha", math.inf),
            ("cutmix_factor", 1.0),
        ):
            object.__setattr__(
                self, name, _check_number(getattr(self, name), name, high)
            )

    @property
    def mixes_batches(self) -> bool:
        """Whether batches go through MixUp or CutMix."""
        return bool(self.mixup_alpha or self.cutmix_factor)


@export("keras_vit.data.inception_crop")
def inception_crop(
    image: tf.Tensor,
    seed: tf.Tensor,
    area_range: tuple[float, float] = (0.05, 1.0),
    aspect_ratio_range: tuple[float, float] = (3 / 4, 4 / 3),
) -> tf.Tensor:
    """Cuts a random window of random area and aspect ratio ("Inception crop").

    The window covers a fraction of the image's area drawn from
    `area_range` and has an aspect ratio (width / height) drawn from
    `aspect_ratio_range`, as `tf.image.sample_distorted_bounding_box` draws
    them; after ten failed attempts the whole image is used.

    Args:
        image: `(height, width, channels)`, any dtype.
        seed: A shape `(2,)` integer tensor; the same seed gives the same
            window.
        area_range: Fractions of the image area. Defaults to `(0.05, 1.0)`.
        aspect_ratio_range: Defaults to `(3/4, 4/3)`.

    Returns:
        The window, `(crop_height, crop_width, channels)`, same dtype.
    """
    _check_range(area_range, "area_range", upper=1.0)
    _check_range(aspect_ratio_range, "aspect_ratio_range")
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image),
        bounding_boxes=tf.zeros((1, 0, 4), tf.float32),
        seed=seed,
        min_object_covered=0.0,
        aspect_ratio_range=aspect_ratio_range,
        area_range=area_range,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    crop = tf.slice(image, begin, size)
    crop.set_shape([None, None, image.shape[-1]])  # (h, w, C)
    return crop


@export("keras_vit.data.train_transform")
def train_transform(
    image: tf.Tensor,
    seed: tf.Tensor,
    image_size: int | tuple[int, int],
    area_range: tuple[float, float] = (0.05, 1.0),
    aspect_ratio_range: tuple[float, float] = (3 / 4, 4 / 3),
    flip: bool = True,
) -> tf.Tensor:
    """Inception crop, bilinear resize to `image_size`, random left-right flip.

    Args:
        image: `(height, width, channels)` pixels, e.g. `uint8`.
        seed: A shape `(2,)` integer tensor.
        image_size: Output size, an int or `(height, width)`.
        area_range: See `inception_crop`. `(1.0, 1.0)` turns cropping off.
        aspect_ratio_range: See `inception_crop`.
        flip: Flip left-right with probability 1/2. Turn it off for data
            whose meaning changes when mirrored (digits, text).

    Returns:
        `float32 (height, width, channels)` in the input's value range.
    """
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    if tuple(area_range) != (1.0, 1.0):
        image = inception_crop(image, crop_seed, area_range, aspect_ratio_range)
    image = tf.image.resize(image, to_pair(image_size, "image_size"), method="bilinear")
    if flip:
        image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    return tf.cast(image, tf.float32)


@export("keras_vit.data.BatchMixer")
class BatchMixer:
    """MixUp and/or CutMix on batches of images and one-hot labels.

    When both are enabled, each batch gets one of them, picked at random
    with probability 1/2. Uses `keras.layers.MixUp` and `keras.layers.CutMix`.

    Args:
        mixup_alpha: Beta-distribution parameter of MixUp; 0 turns it off.
        cutmix_factor: The `factor` of `keras.layers.CutMix` (in `(0, 1]`,
            the range its mixing weights are drawn from); 0 turns it off.
        seed: Seed of the layers' generators.

    Call arguments:
        images: `(batch, height, width, channels)` float images.
        labels: `(batch, num_classes)` one-hot (or soft) labels.

    Returns:
        `(images, labels)`, mixed.

    Example:

    ```python
    mixer = BatchMixer(mixup_alpha=0.2)
    dataset = dataset.map(mixer)  # after .batch(...)
    ```
    """

    def __init__(self, mixup_alpha: float = 0.0, cutmix_factor: float = 0.0, seed=None):
        if mixup_alpha < 0 or not 0 <= cutmix_factor <= 1:
            raise ValueError(
                "Need mixup_alpha >= 0 and 0 <= cutmix_factor <= 1. Received: "
                f"mixup_alpha={mixup_alpha}, cutmix_factor={cutmix_factor}"
            )
        if not (mixup_alpha or cutmix_factor):
            raise ValueError("BatchMixer needs mixup_alpha > 0 or cutmix_factor > 0.")
        self.layers = []
        if mixup_alpha:
            self.layers.append(keras.layers.MixUp(alpha=mixup_alpha, seed=seed))
        if cutmix_factor:
            self.layers.append(keras.layers.CutMix(factor=cutmix_factor, seed=seed))
        self._choice = keras.random.SeedGenerator(seed)

    def __call__(self, images, labels):
        outputs = [
            layer({"images": images, "labels": labels}, training=True)
            for layer in self.layers
        ]
        if len(outputs) == 1:
            return outputs[0]["images"], outputs[0]["labels"]
        use_first = keras.random.uniform((), seed=self._choice) < 0.5
        return (
            tf.where(use_first, outputs[0]["images"], outputs[1]["images"]),
            tf.where(use_first, outputs[0]["labels"], outputs[1]["labels"]),
        )


def _check_range(value, name, upper=None):
    low, high = (float(v) for v in value)
    if not 0.0 < low <= high or (upper is not None and high > upper):
        bound = f" and at most {upper}" if upper is not None else ""
        raise ValueError(
            f"`{name}` must be (low, high) with 0 < low <= high{bound}. "
            f"Received: {name}={value!r}"
        )


def _float_pair(value, name):
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(
            f"`{name}` must be a pair of numbers (low, high). Received: {value!r}"
        ) from None
    return (low, high)


def _check_number(value, name, high):
    """`value` as a float in `[0, high]`, or a `ValueError` naming `name`."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0 <= value <= high:
        bound = f"in [0, {high:g}]" if high != math.inf else ">= 0"
        raise ValueError(f"`{name}` must be a number {bound}. Received: {value!r}")
    return float(value)
