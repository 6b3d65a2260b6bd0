"""A smoke test of Park & Kim's comparison: every model and analysis, tiny.

Command:
    python -m recipes.compare --config compare_quick

Data: `glyphs` at 16 px (offline). Hardware: 2 CPU cores. Expected time:
under a minute; most of it goes to graph tracing, and the numbers mean
nothing.

Recipe: the `test` rows (a 2-block ViT with 2x2 patches, the smallest
ResNets and AlterNet), one seed, two steps of training, and every analysis
of the default comparison on a few images with few iterations.
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.parkkim.config import CompareConfig
from keras_vit.parkkim.settings import PanelSettings


def get_config() -> CompareConfig:
    return CompareConfig(
        name="compare_quick",
        dataset="glyphs",
        val_split=None,
        test_split="test",
        image_size=16,
        global_batch_size=16,
        random_flip=False,
        mixup_alpha=0.2,
        label_smoothing=0.1,
        variant="test/2",
        encoder=EncoderOptions(pooling="gap", class_token=False),
        cnn_variant="test",
        seeds=1,
        epochs=1,
        steps_per_epoch=2,
        warmup_steps=1,
        weight_decay=0.05,
        learning_rate=1e-3,
        mixed_precision=False,
        monitor_images=0,
        analysis=PanelSettings(
            images=32,
            noise_images=32,
            hessian_batches=1,
            hessian_batch_size=8,
            hessian_top_k=2,
            hessian_iterations=3,
            noise_frequencies=3,
            landscape_points=3,
            landscape_batches=1,
        ),
        verbose=0,
    )
