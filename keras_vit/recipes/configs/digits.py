"""Digits: a small ViT trained from scratch on scikit-learn's bundled digits.

Command (the README's main command):
    keras-vit train --config digits
    # from a checkout: python -m recipes.train --config digits

Data: the 1,797 real 8x8 handwritten digits that ship with scikit-learn
(nothing is downloaded), upsampled to 16x16 and repeated to 3 channels; a
fixed split of 1,437 training and 360 test images. There is no separate
validation set: the per-epoch "validation" curves are the test set, and the
reported accuracy is that of the final weights (nothing is selected on it).

Hardware: 2 CPU cores (no accelerator needed).

Expected accuracy and time (wall clock, `import` included, 2 cores):
98.61% test accuracy (355/360) in 95 s on an Intel Xeon with AVX-512 and
AMX; 98.33% (354/360) in 58-65 s on an AMD EPYC Zen 5 (AVX-512 with
AVX512_BF16, no AMX); 98.06% (353/360) on an AMD EPYC Zen 3 (AVX2 only).
A second run on the same machine gives the same figures to the last digit;
the last digits depend on the CPU class, because oneDNN picks its kernels
by instruction set.

Recipe: the `test` ViT size (width 32, 2 blocks, 2 heads) with 2x2 patches,
i.e. a 8x8 grid of 64 tokens, averaged (`pooling="gap"`, no class token: on
this little data it generalises better than the class token); the paper's
optimiser (AdamW β = (0.9, 0.999), global-norm clipping 1) with warm-up and
cosine decay; light augmentation: crops of 60-100% of the area, no flips
(a mirrored digit is another symbol), label smoothing 0.1.
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.recipes.configs.base import TrainConfig


def get_config() -> TrainConfig:
    return TrainConfig(
        name="digits",
        dataset="digits",
        train_split="train",
        val_split="test",
        test_split="test",
        image_size=16,
        global_batch_size=64,
        crop_area_range=(0.6, 1.0),
        crop_aspect_range=(0.8, 1.25),
        random_flip=False,
        label_smoothing=0.1,
        variant="test/2",
        encoder=EncoderOptions(pooling="gap", class_token=False),
        optimizer="adamw",
        learning_rate=3e-3,
        weight_decay=0.05,
        warmup_steps=200,
        schedule="cosine",
        epochs=100,
    )
