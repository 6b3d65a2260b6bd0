r"""ImageNet fine-tuned from ViT-L/16 pre-trained on ImageNet-21k, at 384 px.

Command:
    python -m recipes.train --config imagenet_finetune_l16_384 \
        --set data_dir=/path/to/tensorflow_datasets

Hardware: a TPU v3-8 (or 8 large GPUs; lower `global_batch_size` if memory
runs out, and the learning rate with it). Mixed precision on.

Expected accuracy and time: not measured (needs an accelerator). The paper
reports 85.30% top-1 for this model and pre-training (Table 2, ImageNet-21k
column).

Recipe: as `imagenet_finetune_b16_384`, with the L/16 encoder.
"""

from __future__ import annotations

import dataclasses

from keras_vit.recipes.configs import imagenet_finetune_b16_384


def get_config():
    return dataclasses.replace(
        imagenet_finetune_b16_384.get_config(),
        name="imagenet_finetune_l16_384",
        variant="L/16",
    )
