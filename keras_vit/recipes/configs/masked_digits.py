r"""Masked patch prediction on the bundled digits: Ti/4 at 16 px, CPU-sized.

Command:
    keras-vit pretrain_masked --config masked_digits
    # (`--config digits` is the same config; from a checkout:
    # python -m recipes.pretrain_masked --config masked_digits)
    # then fine-tune the encoder, in a classifier of its architecture:
    keras-vit train --config digits --set variant=Ti/4 --set pooling=token \
        --set class_token=true --set init_from=runs/masked_digits/encoder.keras

Hardware: 2 CPU cores (no accelerator needed).

Expected accuracy: on grey 8x8 digits the pretext task is weak (8 of the
512 colour classes occur, most patches are black background), so the run
shows the pipeline working, not the paper's gains: the masked-patch loss
falls well below uniform guessing (ln 512), while the class token's
few-shot accuracy does not improve (the objective never trains it); see
docs/self_supervision.md. 30 epochs of 22 steps.

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
