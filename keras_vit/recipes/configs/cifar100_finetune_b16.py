"""CIFAR-100 fine-tuned from ViT-B/16 pre-trained on ImageNet-21k, at 384 px.

Command:
    python -m recipes.train --config cifar100_finetune_b16

Hardware: as `cifar10_finetune_b16` (TPU v3-8 or 8 GPUs for batch 512).

Expected accuracy and time: not measured (needs an accelerator). For
reference the paper reports 93.25% for ViT-L/16 with the same pre-training
(Table 2).

Recipe: identical to `cifar10_finetune_b16` (10k steps of SGD momentum,
cosine, warm-up 500, clipping 1, EMA 0.9999, 384 px), on CIFAR-100.
"""

from __future__ import annotations

import dataclasses

from keras_vit.recipes.configs import cifar10_finetune_b16


def get_config():
    return dataclasses.replace(
        cifar10_finetune_b16.get_config(),
        name="cifar100_finetune_b16",
        dataset="cifar100",
    )
