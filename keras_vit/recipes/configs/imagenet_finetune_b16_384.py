r"""ImageNet fine-tuned from ViT-B/16 pre-trained on ImageNet-21k, at 384 px.

Command:
    python -m recipes.train --config imagenet_finetune_b16_384 \
        --set data_dir=/path/to/tensorflow_datasets

Data: TFDS `imagenet2012` needs the ILSVRC-2012 archives downloaded by
hand into `<data_dir>/downloads/manual/` (TFDS prints where); 1% of the
training set is held out for validation, the official validation set is the
test set.

Hardware: a TPU v3-8 or 8 GPUs (mixed precision on, XLA on).

Expected accuracy and time: not measured (needs an accelerator). The
paper's ImageNet-21k ViT-L/16 reaches 85.30% this way (Table 2); B/16 is
lower.

Recipe (paper §3.2, Appendix B.1.1): new zero-initialised head, 384 px with
resampled position embeddings, SGD momentum 0.9 without weight decay, 500
warm-up steps then cosine decay over 20k steps at batch 512, gradient
clipping at global norm 1, Polyak averaging 0.9999. The paper sweeps the
learning rate (Table 4); 0.03 is a good first value. Evaluation resizes the
whole image (no central crop), as the reference does.
"""

from __future__ import annotations

import dataclasses

from keras_vit.recipes.configs import cifar10_finetune_b16
from keras_vit.recipes.configs.base import TrainConfig


def get_config() -> TrainConfig:
    # The CIFAR fine-tuning recipe (the paper's), on ImageNet for 20k steps.
    return dataclasses.replace(
        cifar10_finetune_b16.get_config(),
        name="imagenet_finetune_b16_384",
        dataset="imagenet2012",
        train_split="train[:99%]",
        val_split="train[99%:]",
        test_split="validation",
        shuffle_buffer=50_000,
        steps_per_epoch=1_000,  # 20k steps, as in the paper.
    )
