"""CIFAR-10 from scratch: ViT-S/4 at 32 px with strong augmentation.

Command:
    python -m recipes.train --config cifar10

Hardware: one GPU (mixed precision is "auto": float16 on a GPU, bfloat16
on a TPU or a CPU with native bfloat16, float32 on other CPUs). Any number
of GPUs or TPU cores works unchanged: the global batch of 512 is split
across replicas.

Expected accuracy and time: not measured (needs an accelerator). ViTs
trained from scratch on 50k images lack the convolutional inductive bias
(paper §4.2); the RandAugment, MixUp/CutMix, label smoothing and stochastic
depth below are what keeps them useful on this little data.

Recipe: the paper's pre-training optimiser (Adam β = (0.9, 0.999), decoupled
weight decay, linear warm-up then cosine decay, gradient clipping at global
norm 1) on 98% of the training set; the other 2% is the validation set that
picks `checkpoints/best.keras`, the test set is evaluated once at the end.
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.recipes.configs.base import TrainConfig


def get_config() -> TrainConfig:
    return TrainConfig(
        name="cifar10",
        dataset="cifar10",
        train_split="train[:98%]",
        val_split="train[98%:]",
        test_split="test",
        image_size=32,
        global_batch_size=512,
        crop_area_range=(0.35, 1.0),
        random_flip=True,
        randaugment_ops=2,
        randaugment_magnitude=0.5,
        mixup_alpha=0.8,
        cutmix_factor=1.0,
        label_smoothing=0.1,
        variant="S/4",
        encoder=EncoderOptions(drop_path_rate=0.1),
        optimizer="adamw",
        learning_rate=1e-3,
        weight_decay=0.05,
        warmup_steps=2_000,  # ~20 epochs of 95 steps.
        schedule="cosine",
        epochs=300,
        mixed_precision="auto",
        verbose=2,
    )
