"""Masked patch prediction on the bundled digits: Ti/4 at 16 px, CPU-sized.

Command:
    python -m recipes.pretrain_masked --config masked_digits
    # (`--config digits` is the same config)
    # then fine-tune the encoder:
    python -m recipes.train --config digits \
        --set init_from=runs/masked_digits/encoder.keras

Hardware: 2 CPU cores (no accelerator needed).

Expected accuracy and time: see docs/self_supervision.md for the measured
few-shot accuracies and times of this config; 30 epochs of 22 steps.

Recipe: the paper's objective (50% of the patches corrupted: 80% [mask], 10%
another patch, 10% kept; 3-bit mean colour targets) and optimiser (Adam,
warm-up then cosine decay, clipping at global norm 1), with the digits'
light augmentation (crops of 60-100% of the area, no flips).
"""

from __future__ import annotations

from keras_vit.recipes.configs.base import PretrainConfig


def get_config() -> PretrainConfig:
    return PretrainConfig(
        name="masked_digits",
        dataset="digits",
        image_size=16,
        global_batch_size=64,
        crop_area_range=(0.6, 1.0),
        crop_aspect_range=(0.8, 1.25),
        random_flip=False,
        variant="Ti/4",
        learning_rate=1e-3,
        warmup_steps=200,
        epochs=30,
        verbose=2,
    )
