r"""Masked patch prediction with ViT-B/16 as in the paper (Appendix B.1.2).

Command:
    python -m recipes.pretrain_masked --config masked_b16_paper \
        --set data_dir=/path/to/tensorflow_datasets
    # (`--config b16_paper` is the same config)

Data: TFDS `imagenet2012` (the paper used JFT-300M, which is not public);
few-shot accuracy is measured on its validation split.

Hardware: a TPU v3 pod slice or many GPUs for the paper's batch of 4096.

Expected accuracy and time: not measured (needs an accelerator). The paper
reports 79.9% ImageNet top-1 after fine-tuning a B/16 pre-trained this way
on JFT, 2% above training from scratch and 4% below supervised pre-training
(§4.6).

Recipe: Adam β = (0.9, 0.999), base learning rate 2e-4, 10k warm-up steps,
cosine decay, gradient clipping at global norm 1, batch 4096, about 1M steps
(14 epochs of JFT); 50% of the patches corrupted, 3-bit colour targets.
"""

from __future__ import annotations

from keras_vit.recipes.configs.base import PretrainConfig


def get_config() -> PretrainConfig:
    return PretrainConfig(
        name="masked_b16",
        dataset="imagenet2012",
        fewshot_train_split="train",
        fewshot_test_split="validation",
    )
