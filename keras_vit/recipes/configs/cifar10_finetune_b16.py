r"""CIFAR-10 fine-tuned from ViT-B/16 pre-trained on ImageNet-21k, at 384 px.

Command:
    python -m recipes.train --config cifar10_finetune_b16
    # from a model of our own, e.g. the encoder of `recipes.pretrain_masked
    # --config masked_b16_paper`:
    python -m recipes.train --config cifar10_finetune_b16 \
        --set init_from=runs/masked_b16/encoder.keras

Hardware: a TPU v3-8 or 8 GPUs for the paper's batch of 512 at 384 px
(mixed precision on). On fewer devices lower `global_batch_size` (e.g. 128
on one 80 GB GPU) and the learning rate with it.

Expected accuracy and time: not measured (needs an accelerator). For
reference the paper reports 99.15% for ViT-L/16 with the same ImageNet-21k
pre-training (Table 2); B/16 is a little lower.

Recipe (paper §3.2, §4.1, Appendix B.1.1): the pre-trained head is dropped
and a zero-initialised head added; images are upsampled to 384 px and the
position embeddings resampled to the 24x24 grid; SGD with momentum 0.9, no
weight decay, 500 warm-up steps then cosine decay over 10k steps, gradient
clipping at global norm 1, batch 512, and Polyak averaging (EMA 0.9999) of
the weights used for validation, checkpoints and the final model. The paper
sweeps the learning rate (its Table 4); 0.03 is a good first value.
"""

from __future__ import annotations

from keras_vit.recipes.configs.base import TrainConfig


def get_config() -> TrainConfig:
    return TrainConfig(
        name="cifar10_finetune_b16",
        dataset="cifar10",
        train_split="train[:98%]",
        val_split="train[98%:]",
        test_split="test",
        image_size=384,
        global_batch_size=512,
        eval_batch_size=256,
        crop_area_range=(0.05, 1.0),
        random_flip=True,
        variant="B/16",
        init_from="imagenet21k",
        optimizer="sgd",
        learning_rate=0.03,
        momentum=0.9,
        weight_decay=0.0,
        warmup_steps=500,
        schedule="cosine",
        global_clipnorm=1.0,
        ema_momentum=0.9999,
        epochs=20,
        steps_per_epoch=500,  # 10k steps, as in the paper.
        mixed_precision="auto",
        verbose=2,
    )
