"""Park & Kim's comparison on glyphs: a patch-2 ViT, ResNets and AlterNet.

Command:
    python -m recipes.compare

Data: `glyphs`, keras_vit's offline dataset with real high frequencies
(digits in 15 typefaces over photographs, 10,000 training and 2,000 test
images at 32 px; keras_vit.data.glyphs). Nothing is downloaded.

Hardware: 2 CPU cores (no accelerator needed).

Expected time: about 1 h 50 min on 2 cores of an Intel Xeon with AMX;
results in docs/parkkim.md ("ViT, ResNets and AlterNet side by side").

Recipe: four networks trained with one recipe, five seeds each: a ViT with
2x2 patches (a 16x16 grid, as the authors' CIFAR ViT), width 32, 4 blocks
of 2 heads, class-token pooling as theirs (43,242 parameters); the authors'
post-activation ResNet, a pre-activation ResNet and AlterNet of the `mini`
row (quarter width, CIFAR stem; 424k-704k parameters). AdamW (1e-3, weight
decay 0.05), one epoch of warm-up then cosine decay, 10 epochs of batch 64,
label smoothing 0.1, crops of 60-100% of the area, no flips; float32. A
ViT this small leaves chance level only after about 3 epochs here (with
average pooling, after 5), the CNNs within one. Every analysis uses the
authors' protocol (keras_vit.analysis.parkkim).
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
        global_batch_size=64,
        crop_area_range=(0.6, 1.0),
        crop_aspect_range=(0.8, 1.25),
        random_flip=False,
        label_smoothing=0.1,
        variant="32x4x64x2/2",
        encoder=EncoderOptions(pooling="token", class_token=True),
        cnn_variant="mini",
        models=("vit", "resnet", "preact_resnet", "alternet"),
        seeds=5,
        optimizer="adamw",
        learning_rate=1e-3,
        weight_decay=0.05,
        warmup_steps=156,
        schedule="cosine",
        epochs=10,
        mixed_precision=False,
        monitor_images=0,
        verbose=2,
    )
