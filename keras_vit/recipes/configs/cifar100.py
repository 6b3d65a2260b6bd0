"""CIFAR-100 from scratch: the CIFAR-10 recipe on 100 classes.

Command:
    python -m recipes.train --config cifar100

Hardware: one GPU (or more; the global batch of 512 is split across
replicas). Mixed precision is on.

Expected accuracy and time: not measured here (no accelerator on this
project's machines). With 500 images per class this is an even harder
setting for a ViT without pre-training than CIFAR-10; fine-tuning a
pre-trained model (`cifar100_finetune_b16`) is the paper's way.
"""

from __future__ import annotations

import dataclasses

from keras_vit.recipes.configs import cifar10


def get_config():
    return dataclasses.replace(
        cifar10.get_config(), name="cifar100", dataset="cifar100"
    )
