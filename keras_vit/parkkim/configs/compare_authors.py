r"""Park & Kim's own trained CIFAR-100 models under their analyses.

Command (needs CIFAR-100 in a TFDS data directory, and the authors' two
files: downloaded into the Keras cache on the first run, or given as paths):
    python -m recipes.compare --config compare_authors --set data_dir=~/tfds
    python -m recipes.compare --config compare_authors \
        --set authors_vit_ti=vit_ti_cifar100_9857b21357.pth.tar \
        --set authors_resnet_50=resnet_50_cifar100_691cc9a9e4.pth.tar

Data: CIFAR-100 (`tensorflow_datasets`' `cifar100`), 32 px, normalised as
the authors' pipeline (keras_vit.parkkim.authors.preprocess).

Hardware: any; memory: the ViT-Ti's Hessian-vector product grows with its
batch (peak 3.5 GB at 8 images, 9 GB at 24 on CPU), so the Hessian takes
batches of 32 (about 12 GB); the authors' loader batch, 96
(`--set analysis.hessian_batch_size=96`), needs about 24 GB. Expected
time: many hours on 2 CPU cores. The loss landscape is 21 x 21 points x 16
batches of 96 = 7,056 forward passes per model (about 2.8 h for ResNet-50
and 4.2 h for ViT-Ti at 1.4 and 2.2 s a batch); the Hessian at most 4
batches of 32 x 20 iterations x (the top 5, the smallest and the clean
column's top 5) = 880 Hessian-vector products per model, each 11-15
forward passes' time (an upper bound: power iterations stop once
converged). The command times both models first and
prints its plan, with the settings that change it, e.g.
`--set analysis.landscape_points=11` (a quarter of the grid),
`--set analysis.landscape_batches=4`, `--set analysis.clean_hessian=false`,
`--set analysis.hessian_batches=None` (every batch of the training set, as
the authors) or `--set analysis.hessian_iterations=100` (PyHessian's cap).
An interrupted run resumes: kept panels are reused and the landscape
continues from its last grid point.

Expected results: the authors publish the loss landscapes of these two
models (resources/results/cifar100_*_losslandscape.csv in their
repository); at the trained weights their files give NLL 2.49 and
accuracy 65.8% for ViT-Ti, NLL 2.19 and 72.4% for ResNet-50, on their
augmented training set. docs/parkkim.md lists the numbers to compare.

Recipe: no training. The analyses use the authors' training augmentation
for the Hessian and the landscape (RandAugment 2 ops at magnitude 9,
MixUp 1.0 / CutMix 0.8, label smoothing 0.1, weight decay 0.05;
configs/cifar100_vit.yaml), except the crop: keras_vit's Inception crop of
77-100% of the area stands in for their 4-pixel padded crop.
"""

from __future__ import annotations

from keras_vit.parkkim.config import CompareConfig
from keras_vit.parkkim.settings import PanelSettings


def get_config() -> CompareConfig:
    return CompareConfig(
        name="compare_authors",
        dataset="cifar100",
        train_split="train",
        val_split=None,
        test_split="test",
        image_size=32,
        crop_area_range=(0.77, 1.0),
        random_flip=True,
        randaugment_ops=2,
        randaugment_magnitude=0.9,
        mixup_alpha=1.0,
        cutmix_factor=0.8,
        label_smoothing=0.1,
        weight_decay=0.05,
        models=("authors_vit_ti", "authors_resnet_50"),
        seeds=1,
        analysis=PanelSettings(
            images=1024,
            # The noise on the first 2,000 test images of 10,000: 13 passes
            # (the clean one, 11 bands and the accuracy) of each model.
            noise_images=2000,
            hessian_batches=4,
            hessian_batch_size=32,
            landscape_points=21,
            landscape_batches=16,
        ),
        mixed_precision=False,
        verbose=2,
    )
