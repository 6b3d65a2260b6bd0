"""CIFAR-100 from scratch: the CIFAR-10 recipe on 100 classes.

Command:
    python -m recipes.train --config cifar100

Hardware: one GPU (or more; the global batch of 512 is split across
replicas). Mixed precision is "auto", inherited from `cifar10` (float16 on
a GPU, bfloat16 on a TPU or a CPU with native bfloat16, float32 on other
CPUs).

Expected accuracy and time: not measured (needs an accelerator). With 500
images per class this is an even harder setting for a ViT without
pre-training than CIFAR-10; fine-tuning a pre-trained model
(`cifar100_finetune_b16`) is the paper's way.
"""

from __future__ import annotations

import dataclasses

from keras_vit.recipes.configs import cifar10


def get_config():
    return dataclasses.replace(
        cifar10.get_config(), name="cifar100", dataset="cifar100"
    )
