"""Masked patch prediction, the self-supervised objective of paper §4.6.

Half of the patch embeddings of each image are corrupted. Of those, 80% are
replaced by a learnable [mask] embedding, 10% by the embedding of another
patch, and 10% are left as they are. The model then predicts the 3-bit mean
colour of every corrupted patch: a 512-way classification per patch
(Appendix B.1.2).

- `PatchCorruption`: the corruption, a layer active only when training.
- `MeanColorTargets`: the 512 colour classes, computed from the images.
- `MaskedPatchModel`: a functional model whose loss is the cross-entropy
  averaged over the corrupted patches only.
- `masked_patch_model`: builds it with the layer names of `keras_vit.ViT`.
- `transfer_encoder`: copies the pre-trained encoder into a ViT classifier
  for fine-tuning.

Example:

```python
model = masked_patch_model("B/16", image_size=224, seed=0)
model.compile(keras.optimizers.Adam(2e-4, global_clipnorm=1.0))
model.fit(images, epochs=1)  # images in [-1, 1]; labels are ignored

classifier = keras_vit.ViT("B/16", num_classes=10, image_size=384)
transfer_encoder(model, classifier)  # position embeddings resampled
```
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from keras_vit._export import export
from keras_vit.models import layout as names
from keras_vit.models.encoder import check_image_size
from keras_vit.models.encoder import encode
from keras_vit.models.encoder import patch_tokens
from keras_vit.models.encoder import readout
from keras_vit.models.functional import OptimizerFirstModel
from keras_vit.models.options import EncoderOptions
from keras_vit.models.options import builder_arguments
from keras_vit.models.options import resolve_options
from keras_vit.models.variants import ModelSpec
from keras_vit.models.variants import parse_variant
from keras_vit.utils import to_pair

# Paper §4.6: corrupt 50% of the patches; 80% [mask], 10% random, 10% kept.
CORRUPTION_RATE = 0.5
MASK_RATE = 0.8
RANDOM_RATE = 0.1
COLOR_BITS = 3


def mean_color_classes(bits: int = COLOR_BITS, channels: int = 3) -> int:
    """Number of mean-colour classes: `2 ** (bits * channels)` (512 for RGB)."""
    return 2 ** (int(bits) * int(channels))


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchCorruption(keras.layers.Layer):
    """Corrupts a random subset of patch embeddings, BERT-style (paper §4.6).

    When training, exactly `round(corruption_rate * num_patches)` positions
    (at least one) of each image are selected uniformly at random. Each
    selected position is, independently:
    - replaced by the learnable `mask_token` with probability `mask_rate`;
    - replaced by the embedding of another patch **of the same image**,
      drawn uniformly among the other `num_patches - 1` positions, with
      probability `random_rate` (the donor's uncorrupted embedding is used);
    - left unchanged otherwise (probability `1 - mask_rate - random_rate`).

    Unchanged selections are still predicted, as in BERT: the model cannot
    tell which visible patches it will be asked about. At inference
    (`training` false) the layer returns its input and an all-false mask.

    Apply it to the patch embeddings before the class token and the position
    embeddings are added, so that a replaced patch keeps the position
    embedding of the place it now sits in.

    Args:
        corruption_rate: Fraction of the patches to corrupt, in `(0, 1]`.
            Defaults to 0.5.
        mask_rate: Probability that a corrupted patch becomes the mask
            token. Defaults to 0.8.
        random_rate: Probability that a corrupted patch becomes another
            patch of the same image. Defaults to 0.1.
        seed: Optional int seed for reproducible corruption.
        mask_initializer: Initializer of the mask token. Defaults to a
            normal distribution with standard deviation 0.02.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Patch embeddings of shape `(batch, num_patches, dim)`.
        training: Python bool; the layer corrupts only when `True`.

    Returns:
        A tuple `(embeddings, mask)`: the corrupted embeddings, shaped like
        `inputs`, and a boolean `(batch, num_patches)` tensor that is true at
        the corrupted (selected) positions.

    Example:

    >>> layer = PatchCorruption(seed=0)
    >>> x = np.random.normal(size=(2, 196, 768)).astype("float32")
    >>> corrupted, mask = layer(x, training=True)
    >>> int(np.sum(mask))  # 98 patches per image
    196

    Reference:
    - [Dosovitskiy et al., 2021](https://arxiv.org/abs/2010.11929), §4.6 and
      Appendix B.1.2.
    """

    def __init__(
        self,
        corruption_rate: float = CORRUPTION_RATE,
        mask_rate: float = MASK_RATE,
        random_rate: float = RANDOM_RATE,
        seed: int | None = None,
        mask_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not 0.0 < corruption_rate <= 1.0:
            raise ValueError(
                "`corruption_rate` must be in (0, 1]. "
                f"Received: corruption_rate={corruption_rate}"
            )
        if mask_rate < 0.0 or random_rate < 0.0 or mask_rate + random_rate > 1.0:
            raise ValueError(
                "`mask_rate` and `random_rate` must be >= 0 with a sum <= 1. "
                f"Received: mask_rate={mask_rate}, random_rate={random_rate}"
            )
        self.corruption_rate = float(corruption_rate)
        self.mask_rate = float(mask_rate)
        self.random_rate = float(random_rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        if mask_initializer is None:
            mask_initializer = keras.initializers.RandomNormal(stddev=0.02)
        self.mask_initializer = keras.initializers.get(mask_initializer)

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "PatchCorruption expects patch embeddings of shape (batch, "
                f"num_patches, dim) with a known dim. Received: {input_shape}"
            )
        num_patches = input_shape[1]
        if num_patches is not None and num_patches < 2 and self.random_rate > 0:
            raise ValueError(
                "Replacing a patch by another one (random_rate > 0) needs at "
                f"least 2 patches per image. Received: input_shape={input_shape}"
            )
        self.mask_token = self.add_weight(
            name="mask_token",
            shape=(1, 1, input_shape[-1]),
            initializer=self.mask_initializer,
        )

    def call(self, inputs, training=None):
        batch_size, num_patches = ops.shape(inputs)[0], ops.shape(inputs)[1]
        if not training:
            return inputs, ops.zeros((batch_size, num_patches), dtype="bool")

        # Exactly k positions per image: those whose noise ranks below k.
        noise = keras.random.uniform(
            (batch_size, num_patches), seed=self.seed_generator
        )
        rank = ops.argsort(ops.argsort(noise, axis=1), axis=1)  # (B, N)
        selected = rank < self._num_corrupted(num_patches)  # (B, N)

        choice = keras.random.uniform(
            (batch_size, num_patches), seed=self.seed_generator
        )
        to_mask = ops.logical_and(selected, choice < self.mask_rate)
        to_other = ops.logical_and(
            ops.logical_and(selected, choice >= self.mask_rate),
            choice < self.mask_rate + self.random_rate,
        )

        # Donor i + offset (mod N) with offset in [1, N): uniform over the
        # other patches of the same image, never the patch itself.
        offset = keras.random.randint(
            (batch_size, num_patches),
            minval=1,
            maxval=ops.maximum(num_patches, 2),
            seed=self.seed_generator,
        )
        donor = (ops.arange(num_patches)[None, :] + offset) % num_patches
        others = ops.take_along_axis(inputs, donor[..., None], axis=1)  # (B, N, D)

        x = ops.where(to_other[..., None], others, inputs)
        token = ops.cast(self.mask_token, inputs.dtype)  # (1, 1, D)
        x = ops.where(to_mask[..., None], token, x)  # (B, N, D)
        return x, selected

    def _num_corrupted(self, num_patches):
        if isinstance(num_patches, int):
            return max(1, math.floor(self.corruption_rate * num_patches + 0.5))
        count = ops.floor(ops.cast(num_patches, "float32") * self.corruption_rate + 0.5)
        return ops.maximum(ops.cast(count, "int32"), 1)

    def compute_output_spec(self, inputs, training=None):
        mask = keras.KerasTensor(tuple(inputs.shape[:2]), dtype="bool")
        return keras.KerasTensor(inputs.shape, dtype=inputs.dtype), mask

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "corruption_rate": self.corruption_rate,
                "mask_rate": self.mask_rate,
                "random_rate": self.random_rate,
                "seed": self.seed,
                "mask_initializer": keras.initializers.serialize(self.mask_initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class MeanColorTargets(keras.layers.Layer):
    """The mean colour of each patch, quantised to `bits` per channel.

    For each patch and channel, the mean of the patch's pixels `m` in
    `[-1, 1]` is mapped to the level `floor((m + 1) / 2 * 2**bits)`, clipped
    to `[0, 2**bits - 1]` (eight equal bins for 3 bits; values outside
    `[-1, 1]` fall in the end bins). The levels are packed with the **first
    channel most significant**: for RGB and 3 bits,
    `class = 64 * r + 8 * g + b`, so black is 0, white is 511, pure red
    `(1, -1, -1)` is 448, pure green 56 and pure blue 7.

    The layer computes in float32 whatever the dtype policy, so that mixed
    precision cannot move a mean across a bin edge.

    Args:
        patch_size: Patch size in pixels, an int or `(height, width)`. For a
            hybrid model, the token stride in pixels.
        bits: Bits per channel. Defaults to 3 (512 classes for RGB).
        **kwargs: Base layer keyword arguments, such as `name`.

    Call arguments:
        inputs: Images `(batch, height, width, channels)` in `[-1, 1]`; the
            height and width must be multiples of the patch size.

    Returns:
        An `int32` tensor `(batch, num_patches)` of classes in
        `[0, 2 ** (bits * channels))`, patches in row-major order (the order
        of `PatchEmbedding`).

    Example:

    >>> white = np.ones((1, 16, 16, 3), "float32")
    >>> MeanColorTargets(patch_size=16)(white)
    array([[511]], dtype=int32)

    Reference:
    - [Dosovitskiy et al., 2021](https://arxiv.org/abs/2010.11929),
      Appendix B.1.2.
    """

    def __init__(
        self, patch_size: int | tuple[int, int], bits: int = COLOR_BITS, **kwargs
    ):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.patch_size = to_pair(patch_size, "patch_size")
        if not 1 <= int(bits) <= 8:
            raise ValueError(f"`bits` must be in [1, 8]. Received: bits={bits}")
        self.bits = int(bits)

    def build(self, input_shape):
        if len(input_shape) != 4 or input_shape[-1] is None:
            raise ValueError(
                "MeanColorTargets expects images of shape (batch, height, "
                f"width, channels) with known channels. Received: {input_shape}"
            )
        if self.bits * input_shape[-1] > 24:
            raise ValueError(
                f"{self.bits} bits x {input_shape[-1]} channels gives more than "
                "2**24 classes; use fewer bits."
            )
        for size, patch, axis in zip(
            input_shape[1:3], self.patch_size, ("height", "width"), strict=True
        ):
            if size is not None and size % patch:
                raise ValueError(
                    f"The image {axis} ({size}) is not a multiple of the patch "
                    f"{axis} ({patch})."
                )

    def call(self, inputs):
        x = ops.cast(inputs, "float32")
        means = ops.average_pool(
            x,
            self.patch_size,
            strides=self.patch_size,
            padding="valid",
            data_format="channels_last",
        )  # (B, h, w, C)
        levels = 2**self.bits
        level = ops.clip(ops.floor((means + 1.0) * (levels / 2.0)), 0, levels - 1)
        channels = means.shape[-1]
        place = levels ** np.arange(channels - 1, -1, -1)  # first channel first
        classes = ops.sum(level * ops.convert_to_tensor(place, "float32"), axis=-1)
        batch_size = ops.shape(inputs)[0]
        return ops.reshape(ops.cast(classes, "int32"), (batch_size, -1))  # (B, N)

    def compute_output_spec(self, inputs):
        batch, height, width = inputs.shape[:3]
        num_patches = None
        if height is not None and width is not None:
            num_patches = (height // self.patch_size[0]) * (width // self.patch_size[1])
        return keras.KerasTensor((batch, num_patches), dtype="int32")

    def get_config(self):
        config = super().get_config()
        config.update({"patch_size": self.patch_size, "bits": self.bits})
        return config


def masked_patch_loss(targets, logits, mask):
    """Cross-entropy averaged over the corrupted patches only.

    Args:
        targets: `int` classes `(batch, num_patches)`.
        logits: `(batch, num_patches, num_classes)`.
        mask: Boolean `(batch, num_patches)`, true where a patch was corrupted.

    Returns:
        A scalar: the mean of the per-patch cross-entropy over the positions
        where `mask` is true, 0 when there are none. Under `tf.distribute` it
        is divided by the number of replicas, like every Keras loss, so that
        summed replica gradients give the global mean.
    """
    loss = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="mean_with_sample_weight"
    )
    return loss(targets, logits, sample_weight=ops.cast(mask, logits.dtype))


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedPatchModel(OptimizerFirstModel):
    """A functional model trained by masked patch prediction.

    Build it with `masked_patch_model`. Its outputs are a dict:
    - `"logits"`: `(batch, num_patches, num_classes)` colour logits;
    - `"targets"`: `(batch, num_patches)` true colour classes;
    - `"mask"`: `(batch, num_patches)`, true at the corrupted patches;
    - `"pooled"`: `(batch, dim)`, the image representation (the `pool`
      layer), so `keras_vit.feature_extractor` and
      `keras_vit.analysis.fewshot.FewShotCallback` can follow pre-training.

    The loss needs no labels: `compile(optimizer)` without a `loss`, then
    `fit` on images (a `(images, labels)` dataset works too, the labels and
    any sample weights are ignored). The loss is `masked_patch_loss` plus any
    regularisation losses; the `patch_accuracy` metric is the colour
    accuracy on the corrupted patches.

    Corruption happens only when training, so `evaluate` reports a loss of 0:
    follow pre-training with the training loss and few-shot accuracy.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.patch_accuracy = keras.metrics.SparseCategoricalAccuracy(
            name="patch_accuracy"
        )

    def compute_loss(
        self, x=None, y=None, y_pred=None, sample_weight=None, training=True
    ):
        del x, y, sample_weight, training
        loss = masked_patch_loss(y_pred["targets"], y_pred["logits"], y_pred["mask"])
        for extra in self.losses:
            loss = loss + ops.cast(ops.sum(extra), loss.dtype)
        return loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        weights = ops.cast(y_pred["mask"], "float32")
        self.patch_accuracy.update_state(
            y_pred["targets"], y_pred["logits"], sample_weight=weights
        )
        return super().compute_metrics(x, y, y_pred, sample_weight)


@export("keras_vit.models.masked_patch_model")
def masked_patch_model(
    variant: str | ModelSpec = "B/16",
    *,
    image_size: int | tuple[int, int] = 224,
    channels: int = 3,
    corruption_rate: float = CORRUPTION_RATE,
    mask_rate: float = MASK_RATE,
    random_rate: float = RANDOM_RATE,
    color_bits: int = COLOR_BITS,
    seed: int | None = None,
    name: str | None = None,
    options: EncoderOptions | None = None,
    **encoder_options,
) -> MaskedPatchModel:
    """Builds a ViT for masked patch prediction pre-training (paper §4.6).

    The encoder is the one `keras_vit.ViT` builds from the same
    `EncoderOptions`, with the same layer names (`embedding`, `class_token`,
    `posembed_input`, `encoderblock_{i}`, `encoder_norm`, `pool`, and the
    hybrid backbone's), so `transfer_encoder` moves it into a classifier by
    name, and `keras_vit.ViT(variant, options=ViTLayout.of(model)
    .encoder_options, include_top=False)` rebuilds it exactly. A
    `PatchCorruption` layer named `patch_corruption` sits between the patch
    embedding and the class token; a zero-initialised dense layer named
    `masked_patch_head` maps every patch token after `encoder_norm` to
    `2 ** (color_bits * channels)` colour logits; `MeanColorTargets` (named
    `mean_color_targets`) computes the targets from the input images.

    Args:
        variant: Size and patch, e.g. `"B/16"` or `"R50+B/16"` (see
            `keras_vit.VARIANTS`), or a `keras_vit.models.ModelSpec`.
        image_size: Input size, an int or `(height, width)`. Defaults to 224.
        channels: Input channels. Defaults to 3.
        corruption_rate: Fraction of patches corrupted. Defaults to 0.5.
        mask_rate: Share of corrupted patches set to the mask token.
            Defaults to 0.8.
        random_rate: Share of corrupted patches replaced by another patch of
            the same image. Defaults to 0.1.
        color_bits: Bits per channel of the colour targets. Defaults to 3.
        seed: Seed of the corruption. Defaults to `None`.
        name: Model name. Defaults to e.g. `"masked_patch_vit_b16"`.
        options: The encoder's `keras_vit.EncoderOptions`, as for
            `keras_vit.ViT`. Its pooling forms the `"pooled"` output (used
            for few-shot monitoring) and must not be `None`.
        **encoder_options: Single `EncoderOptions` fields by name, applied
            over `options` (e.g. `qk_norm=True`).

    Returns:
        A `MaskedPatchModel` taking images `(batch, height, width, channels)`
        in `[-1, 1]`, named `"images"`.

    Example:

    ```python
    model = masked_patch_model("test/4", image_size=32, seed=0)
    model.compile(keras.optimizers.Adam(1e-3))
    model.fit(images, batch_size=32, epochs=1)
    ```
    """
    options = resolve_options(options, encoder_options, _ARGUMENTS)
    spec = parse_variant(variant)
    image_size = to_pair(image_size, "image_size")
    check_image_size(spec, image_size)
    if options.pooling is None:
        raise ValueError(
            "A masked-patch model needs a pooling for its 'pooled' output; "
            "use 'token', 'gap' or 'map'."
        )
    if options.distillation:
        raise ValueError("A masked-patch model has no distillation token.")
    if options.fc_norm:
        raise ValueError(
            "A masked-patch model predicts from the normalised tokens, and "
            "fc_norm=True leaves them unnormalised (it normalises only the "
            "pooled output); use fc_norm=False."
        )
    prefix = options.num_prefix_tokens
    mixed = keras.config.dtype_policy().compute_dtype != "float32"

    images = keras.Input((*image_size, channels), name=names.INPUT)
    targets = MeanColorTargets(
        spec.total_stride, bits=color_bits, name=names.MEAN_COLOR_TARGETS
    )(images)  # (B, N)
    x = patch_tokens(images, spec, options=options)  # (B, N, D)
    x, mask = PatchCorruption(
        corruption_rate, mask_rate, random_rate, seed=seed, name=names.PATCH_CORRUPTION
    )(x)  # (B, N, D), (B, N)
    x = encode(x, spec, image_size, options)  # (B, prefix + N, D)
    pooled = readout(x, spec, options)  # (B, D)
    logits = keras.layers.Dense(
        mean_color_classes(color_bits, channels),
        kernel_initializer="zeros",
        dtype="float32" if mixed else None,
        name=names.MASKED_PATCH_HEAD,
    )(x[:, prefix:])  # (B, N, classes)
    outputs = {"logits": logits, "targets": targets, "mask": mask, "pooled": pooled}
    return MaskedPatchModel(images, outputs, name=name or f"masked_patch_{spec.name}")


# masked_patch_model's own parameters, suggested for a misspelt keyword.
_ARGUMENTS = builder_arguments(masked_patch_model)


def transfer_encoder(
    pretrained: keras.Model,
    classifier: keras.Model,
    method: str = "bilinear",
) -> list[str]:
    """Copies the encoder of `pretrained` into `classifier`, for fine-tuning.

    A call to `keras_vit.weights.load_weights(classifier, pretrained)`, the
    one weights path: the pre-training layers (masked-patch head, [mask]
    token) are left behind, the classifier's head is zero-initialised when
    the source has none (the paper's fine-tuning rule), and the position
    embeddings are resampled to the classifier's patch grid (the class-token
    row kept) when it works at another resolution (paper §3.2). Nothing is
    assigned unless everything fits.

    Args:
        pretrained: The source, e.g. a `masked_patch_model` after
            pre-training (or any keras_vit model).
        classifier: The destination, e.g. `keras_vit.ViT(variant,
            num_classes=..., image_size=...)` with the same variant.
        method: Position-embedding resampling, `"bilinear"` (default) or
            `"bicubic"`.

    Returns:
        The notes of the load (what was resampled, left out or zeroed).

    Raises:
        keras_vit.weights.CheckpointError: the two encoders differ (the
            message names the keys and shapes); no weight was changed.

    Example:

    ```python
    pretrained = keras.saving.load_model("runs/masked_b16/final.keras")
    classifier = keras_vit.ViT("B/16", num_classes=100, image_size=384)
    transfer_encoder(pretrained, classifier)
    ```
    """
    # Here, not at the top: the weights package reads the models' layouts.
    from keras_vit.weights.loader import load_weights

    return load_weights(classifier, pretrained, resample_method=method)
