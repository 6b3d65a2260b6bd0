"""Park & Kim's comparison on glyphs: a patch-2 ViT, ResNets and AlterNet.

Command:
    python -m recipes.compare

Data: `glyphs`, keras_vit's offline dataset with real high frequencies
(digits in 15 typefaces over photographs, 10,000 training and 2,000 test
images at 32 px; keras_vit.data.glyphs). Nothing is downloaded.

Hardware: 2 CPU cores (no accelerator needed).

Expected time: see docs/analysis.md ("ViT, ResNets and AlterNet side by
side") for the measured time and results of this config.

Recipe: four networks of about the same size trained with one recipe, five
seeds each: a ViT with 2x2 patches (a 16x16 grid, as the authors' CIFAR
ViT), width 64, 4 blocks of 4 heads, average pooling; the authors'
post-activation ResNet, a pre-activation ResNet and AlterNet of the `mini`
row (quarter width, CIFAR stem). AdamW (3e-3, weight decay 0.05), warm-up
then cosine decay, label smoothing 0.1, crops of 60-100% of the area and
MixUp (alpha 0.2), no flips; float32. Every analysis uses the authors'
protocol (keras_vit.analysis.parkkim).
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.recipes.configs.base import CompareConfig


def get_config() -> CompareConfig:
    return CompareConfig(
        name="compare",
        dataset="glyphs",
        train_split="train",
        val_split=None,
        test_split="test",
        image_size=32,
        global_batch_size=128,
        crop_area_range=(0.6, 1.0),
        crop_aspect_range=(0.8, 1.25),
        random_flip=False,
        mixup_alpha=0.2,
        label_smoothing=0.1,
        variant="64x4x128x4/2",
        encoder=EncoderOptions(pooling="gap", class_token=False),
        cnn_variant="mini",
        models=("vit", "resnet", "preact_resnet", "alternet"),
        seeds=5,
        optimizer="adamw",
        learning_rate=3e-3,
        weight_decay=0.05,
        warmup_steps=78,
        schedule="cosine",
        epochs=3,
        mixed_precision=False,
        monitor_images=0,
        verbose=2,
    )
